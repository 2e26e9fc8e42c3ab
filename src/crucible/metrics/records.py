"""The flat trial record that every metric is computed from, built from a TrialResult."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from crucible.llm.pricing import ModelPrice
from crucible.metrics.cost import CostSource, TokenUsage, rollout_cost
from crucible.records.trial import TrialResult

GRADED = "graded"


class Scored(Protocol):
    """What the success rule (pass@k, success rate) reads of a trial."""

    @property
    def task(self) -> str: ...
    @property
    def graded(self) -> bool: ...
    @property
    def rewards(self) -> Mapping[str, float] | None: ...
    @property
    def outcome(self) -> str: ...  # whose failure an ungraded trial is decides how it counts


class Attempt(NamedTuple):
    """The least a trial needs for pass@k: cheap to build for every trial of a running job."""

    task: str
    graded: bool
    rewards: Mapping[str, float] | None
    outcome: str = GRADED


@dataclass(frozen=True)
class TrialRecord:
    task: str
    attempt: int  # 0-based; attempt i of every task forms run i
    outcome: str = GRADED  # "graded" or an ErrorKind value
    rewards: Mapping[str, float] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    trial_name: str = ""
    folder: str | None = None  # the trial's folder name inside the job folder
    duration_sec: float | None = None
    agent_sec: float | None = None
    cost_usd: float | None = None
    cost_source: CostSource | None = None
    tokens: TokenUsage | None = None
    agent_error: str | None = None  # the agent failed at the task (still graded)
    error_message: str | None = None
    retries: int = 0
    # What the attempt changed that grading could run (TrialResult.tampered_list)
    tampered_paths: tuple[str, ...] | None = None
    # The verifier's own model calls (judge stages), apart from the agent's cost and tokens.
    verifier_tokens: int | None = None  # None: no stage called a model
    verifier_cost_usd: float | None = None
    # A multi-step trial's steps that ran, in order: name -> its primary reward (None: no reward).
    step_rewards: Mapping[str, float | None] | None = None
    # What declared grading did not run (TrialResult.not_fully_graded): empty when all did.
    not_fully_graded: tuple[str, ...] = ()
    # Each verifier stage as (name, status, reason): why a stage zeroed or stopped it.
    stages: tuple[tuple[str, str, str], ...] = ()

    @property
    def graded(self) -> bool:
        return self.outcome == GRADED


def _duration(start: Any, end: Any) -> float | None:
    if start is None or end is None:
        return None
    seconds: float = (end - start).total_seconds()
    return max(seconds, 0.0)


def record_from_result(
    r: TrialResult,
    *,
    folder: str | None = None,
    model: str | None = None,
    prices: Mapping[str, ModelPrice] | None = None,
) -> TrialRecord:
    """`model` is the job's model, used when the trial's agent_info names none."""
    info_model = r.agent_info.model_info.name if r.agent_info.model_info else None
    cost, source = rollout_cost(r.agent_result, info_model or model, prices)
    metadata = dict(r.task_metadata)
    if r.source is not None:
        metadata.setdefault("source", r.source)
    ar = r.agent_result
    return TrialRecord(
        task=r.task_name,
        attempt=r.attempt,
        outcome=r.outcome,
        rewards=dict(r.verifier_result.rewards)
        if r.verifier_result and r.verifier_result.rewards is not None
        else None,
        metadata=metadata,
        trial_name=r.trial_name,
        folder=folder,
        duration_sec=_duration(r.started_at, r.finished_at),
        agent_sec=r.agent_execution.duration_sec if r.agent_execution else None,
        cost_usd=cost,
        cost_source=source,
        tokens=TokenUsage.from_agent_result(ar),
        agent_error=ar.error.type if ar and ar.error else None,
        error_message=r.error.message if r.error else None,
        retries=r.retries,
        tampered_paths=None if (t := r.tampered_list()) is None else tuple(t),
        step_rewards=_step_rewards(r),
        not_fully_graded=tuple(r.not_fully_graded()) if r.graded else (),
        stages=tuple((s.name, s.status, s.reason) for s in vr.stages)
        if (vr := r.verifier_result)
        else (),
        **_verifier_cost(r),
    )


def _step_rewards(r: TrialResult) -> dict[str, float | None] | None:
    if r.steps is None:
        return None
    out: dict[str, float | None] = {}
    for s in r.steps:
        got = s.verifier_result.rewards if s.verifier_result else None
        out[s.name] = got.get("reward", next(iter(got.values()))) if got else None
    return out


def _verifier_cost(r: TrialResult) -> dict[str, Any]:
    used = [s.usage for s in (r.verifier_result.stages if r.verifier_result else []) if s.usage]
    if not used:
        return {}
    return {
        "verifier_tokens": sum(u.total_tokens for u in used),
        "verifier_cost_usd": r.verifier_result.stage_cost_usd if r.verifier_result else None,
    }
