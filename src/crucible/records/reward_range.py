"""The range a task's rewards must fall in, and what makes a stored reward unusable.

A task declares `[metadata.crucible] reward_range = [lo, hi]` (default [0, 1]). The
grader refuses a reward outside it (verifier_failed, counted 0); the readers of stored
records refuse one outside it too, since a record written before the check, or edited
since, can hold 1.5e308, whose sum with itself is inf and whose report then crashes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_RANGE: tuple[float, float] = (0.0, 1.0)
# Far past any score, and small enough that a sum of a million rewards and a sum of
# squared deviations stay exact enough and finite.
BOUND = 1e12
META_KEY = "crucible"


def parse_range(value: Any) -> tuple[float, float]:
    """`[lo, hi]` as two finite floats with lo < hi, both within ±BOUND; ValueError saying
    what is wrong."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"reward_range must be [lo, hi], got {value!r}"[:200])
    out: list[float] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"reward_range bounds must be numbers, got {v!r}"[:200])
        try:
            f = float(v)
        except OverflowError:
            raise ValueError("reward_range bound too large for a number") from None
        if not math.isfinite(f) or abs(f) > BOUND:
            raise ValueError(f"reward_range bounds must be finite and within ±{BOUND:g}: {f!r}")
        out.append(f)
    lo, hi = out
    if not lo < hi:
        raise ValueError(f"reward_range needs lo < hi, got [{lo:g}, {hi:g}]")
    return lo, hi


def declared_range(task_metadata: Mapping[str, Any] | None) -> tuple[float, float]:
    """The range a task's [metadata] declares; the default when it declares none or one
    that is invalid (such a task never runs: launch and `tasks check` refuse it)."""
    meta = (task_metadata or {}).get(META_KEY)
    if not isinstance(meta, Mapping) or "reward_range" not in meta:
        return DEFAULT_RANGE
    try:
        return parse_range(meta["reward_range"])
    except ValueError:
        return DEFAULT_RANGE


def stored_problem(
    rewards: Iterable[tuple[str, float | None]], task_metadata: Mapping[str, Any] | None
) -> str | None:
    """Why stored rewards cannot be counted (one not finite, or outside the task's range
    widened to [0, 1], where crucible's own stage components lie), or None."""
    lo, hi = declared_range(task_metadata)
    lo, hi = min(lo, 0.0), max(hi, 1.0)
    for key, value in rewards:
        if value is None:
            continue
        if not math.isfinite(value) or not lo <= value <= hi:
            return f"reward {key!r} is {value!r}, outside [{lo:g}, {hi:g}]"
    return None
