"""Ready-made reward functions for crucible.train: rhyme, relevance, and a gate over them."""

from crucible.train.rewards.gate import Gate
from crucible.train.rewards.relevance import Embedder, Relevance, lexical_relevance, relevance
from crucible.train.rewards.rhyme import RhymeScore, rhyme_score
from crucible.train.rewards.rhyme_reward import RhymeReward

__all__ = ["Embedder", "Gate", "Relevance", "RhymeReward", "RhymeScore", "lexical_relevance",
           "relevance", "rhyme_score"]  # fmt: skip
