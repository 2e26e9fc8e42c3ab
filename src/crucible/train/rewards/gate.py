"""The gate: rhyme earns reward only while the answer stays on its topic.

    total = rhyme                       when relevance >= threshold
    total = min(rhyme, cap)             otherwise (the gate is shut: `gate` = 0)

A model that learns to rhyme about anything but the topic is capped at `cap`, so rhyming
off-topic never pays more than a little; the components keep both scores, so a run's
curves show which one moved.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gate:
    threshold: float = 0.3  # relevance below this shuts the gate
    cap: float = 0.1  # the most a gated answer earns

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0 or not 0.0 <= self.cap <= 1.0:
            raise ValueError("threshold and cap are in [0, 1]")

    def apply(self, rhyme: float, relevance: float) -> tuple[float, bool]:
        """(total, open)."""
        if relevance >= self.threshold:
            return rhyme, True
        return min(rhyme, self.cap), False
