"""RhymeReward: answer in rhyme, on topic. A reward with slime's signature (train/reward.py)

    reward = RhymeReward(min_words=4, threshold=0.3, cap=0.1)
    await reward(args, sample)  ->  {"total": ..., "rhyme": ..., "relevance": ..., "gate": ...,
                                     "rhyme_fallback": ..., "relevance_fallback": ..., ...}

The topic is the sample's label (else its metadata's `topic`, else the prompt). The rhyme
score (rewards/rhyme.py) and the relevance (rewards/relevance.py) are combined by the gate
(rewards/gate.py). `args` (the config's `reward_args`) may override `min_words`,
`min_lines`, `window`, `threshold` and `cap` for one run. Every component is returned, so
`crucible runs get ID --verbose` shows which part of the reward moved.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from crucible.train.rewards.gate import Gate
from crucible.train.rewards.relevance import Embedder, relevance, shared_embedder
from crucible.train.rewards.rhyme import rhyme_score

OVERRIDABLE = ("min_words", "min_lines", "window", "threshold", "cap")


class RhymeReward:
    """Rhyme, gated by relevance to the topic."""

    __name__ = "rhyme"

    def __init__(self, *, min_words: int = 4, min_lines: int = 2, window: int = 2,
                 threshold: float = 0.3, cap: float = 0.1,
                 embedder: Embedder | Path | str | None = None) -> None:  # fmt: skip
        self.min_words, self.min_lines, self.window = min_words, min_lines, window
        self.threshold, self.cap = threshold, cap
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        if isinstance(self._embedder, Embedder):
            return self._embedder
        return shared_embedder(self._embedder)

    def _opt(self, args: Any, name: str) -> Any:
        value = getattr(args, name, None) if args is not None else None
        return getattr(self, name) if value is None else value

    def score(self, args: Any, topic: str, response: str) -> dict[str, float]:
        rs = rhyme_score(response, min_words=int(self._opt(args, "min_words")),
                         min_lines=int(self._opt(args, "min_lines")),
                         window=int(self._opt(args, "window")))  # fmt: skip
        rel = relevance(topic, response, self.embedder)
        gate = Gate(float(self._opt(args, "threshold")), float(self._opt(args, "cap")))
        total, opened = gate.apply(rs.score, rel.score)
        return {"total": total, **rs.components(), **rel.components(),
                "gate": 1.0 if opened else 0.0}  # fmt: skip

    async def __call__(self, args: Any, sample: Any, **kw: Any) -> dict[str, float]:
        topic = _topic(sample)
        response = str(getattr(sample, "response", "") or "")
        # the embedder is CPU work: keep the trainer's event loop free
        return await asyncio.to_thread(self.score, args, topic, response)


def _topic(sample: Any) -> str:
    label = getattr(sample, "label", None)
    if isinstance(label, str) and label.strip():
        return label
    meta = getattr(sample, "metadata", None) or {}
    if isinstance(meta, dict) and isinstance(meta.get("topic"), str):
        return str(meta["topic"])
    prompt = getattr(sample, "prompt", "")
    return prompt if isinstance(prompt, str) else str(prompt)
