"""Reward functions: slime's signature, components, and crucible's graders.

    async def rm(args, sample, **kw) -> float | dict[str, float]

`args` is the run's `TrainConfig.reward_args` (a namespace), `sample` a `Sample` (prompt,
response, label, metadata). A reward may return one number, or a dict of components with
the total under "total" (or "reward"): the components are recorded per step beside it. A
plain (non-async) function is accepted too. `GraderReward` grades a response with the
crucible task its row was made from (rows of `TaskSetDataset` / `dataset export` carry
`task_id` and `task_hash`), through a running `crucible serve`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

TOTAL_KEYS = ("total", "reward")

RewardFn = Callable[..., Any]  # async (args, sample, **kw) -> float | dict[str, float]


@dataclass
class Sample:
    """One sampled response to be scored (slime's Sample, the fields a reward reads)."""

    prompt: str
    response: str
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)  # the prompt as chat
    index: int = 0  # its place in the step's batch
    step: int = 0


class RewardError(ValueError):
    """A reward function returned something that is not a reward."""


def reward_name(fn: RewardFn) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RewardError(f"{what} is {value!r}, not a number")
    x = float(value)
    if not math.isfinite(x):
        raise RewardError(f"{what} is {x!r}, not finite")
    return x


def split_reward(value: Any, name: str = "reward") -> tuple[float, dict[str, float]]:
    """(total, components) of what a reward function returned."""
    if isinstance(value, dict):
        total_key = next((k for k in TOTAL_KEYS if k in value), None)
        if total_key is None:
            raise RewardError(
                f"{name} returned a dict without a 'total': {sorted(map(str, value))}"
            )
        comps = {str(k): _finite(v, f"{name}[{k!r}]") for k, v in value.items()
                 if k != total_key}  # fmt: skip
        return _finite(value[total_key], f"{name}[{total_key!r}]"), comps
    return _finite(value, f"{name}'s reward"), {}


def as_args(reward_args: dict[str, Any] | None) -> SimpleNamespace:
    return SimpleNamespace(**(reward_args or {}))


async def score(
    fn: RewardFn, args: Any, sample: Sample, **kw: Any
) -> tuple[float, dict[str, float]]:
    """Call one reward function on one sample: (total, components)."""
    got = fn(args, sample, **kw)
    if inspect.isawaitable(got):
        got = await got
    return split_reward(got, reward_name(fn))


class GraderReward:
    """crucible's graders as a reward: the sample's task (metadata task_id, task_hash)
    grades its response through the grading service at `url` (else $CRUCIBLE_SERVE_URL).
    Statuses map as for TRL (trainers/trl.py): ok its reward, invalid 0, else 0 here with
    the status recorded as a component `unscorable` = 1 (a slime-style reward cannot mask)."""

    __name__ = "crucible"

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 submission: str = "text", wait_s: float | None = None) -> None:  # fmt: skip
        self.url, self.token, self.submission, self.wait_s = url, token, submission, wait_s

    async def __call__(self, args: Any, sample: Sample, **kw: Any) -> dict[str, float]:
        from crucible.records.serve import GradeStatus, TaskRef
        from crucible.trainers.client import DEFAULT_WAIT_S
        from crucible.trainers.common import async_client, grade_async, prepare

        task_id, task_hash = sample.metadata.get("task_id"), sample.metadata.get("task_hash")
        if not task_id or not task_hash:
            raise RewardError(
                "GraderReward needs rows with task_id and task_hash (TaskSetDataset, or a "
                "file made by `crucible dataset export`)"
            )
        task = TaskRef(id=str(task_id), hash=str(task_hash))
        item = prepare(task, sample.response, self.submission,  # type: ignore[arg-type]
                       f"train:{sample.step}:{sample.index}", {"trainer": "crucible.train"})  # fmt: skip
        wait = self.wait_s if self.wait_s is not None else DEFAULT_WAIT_S
        [result] = await grade_async(async_client(self.url, self.token), [item], wait)
        ok = result.status in (GradeStatus.ok, GradeStatus.invalid)
        reward = float(result.reward or 0.0) if ok else 0.0
        return {"total": reward, "unscorable": 0.0 if ok else 1.0}
