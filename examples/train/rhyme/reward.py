"""The rhyme example's reward: rhyme (CMU dictionary, true rhymes, lines of 4+ words),
gated by relevance to the topic (all-MiniLM-L6-v2, offline). See docs/train-rhyme.md."""

from crucible.train.rewards import RhymeReward

# Both known hacks are closed in the library: a word never rhymes with itself or its own
# inflection (true rhymes need a different onset), and a line under 4 words never counts.
rm = RhymeReward(min_words=4, min_lines=4, threshold=0.3, cap=0.1)
