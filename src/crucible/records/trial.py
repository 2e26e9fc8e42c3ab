"""What a trial and a job leave on disk (result.json), as pydantic models.

Field names follow Harbor's TrialResult where one exists (`id`, `task_name`,
`trial_name`, `agent_info`, `agent_result`, `verifier_result.rewards`,
`exception_info`, `started_at`, `finished_at`, per-phase timings), plus
crucible's `attempt`, `outcome` and `error`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from crucible.errors import ErrorKind
from crucible.records.tamper import TamperRecord
from crucible.records.verifier import VerifierResult


def utcnow() -> datetime:
    return datetime.now(UTC)


# Outcomes that are the attempt's fault and count as reward 0 by default.
ZERO_OUTCOMES: frozenset[str] = frozenset({ErrorKind.verifier_failed.value})


def counted_as(outcome: str) -> float | None:
    """The default score of a trial that has no reward: 0 for the attempt's own
    failures, None (left out of means) for everything else."""
    return 0.0 if outcome in ZERO_OUTCOMES else None


class TimingInfo(BaseModel):
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def duration_sec(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class ModelInfo(BaseModel):
    name: str
    provider: str | None = None


class AgentInfo(BaseModel):
    name: str
    version: str = "unknown"
    model_info: ModelInfo | None = None


class AgentError(BaseModel):
    """How the agent failed at the task (not an infrastructure error)."""

    type: str  # "nonzero_exit", "timeout", "crash", "context_overflow", "turn_limit"
    message: str = ""


class AgentResult(BaseModel):
    exit_code: int | None = None
    error: AgentError | None = None
    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_cache_write_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None
    n_turns: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ExceptionInfo(BaseModel):
    exception_type: str
    exception_message: str
    exception_traceback: str = ""
    occurred_at: datetime = Field(default_factory=utcnow)


class ErrorInfo(BaseModel):
    kind: ErrorKind
    type: str
    message: str


class StepResult(BaseModel):
    """One step of a multi-step trial (Harbor's [[steps]]): its agent phase and its grade."""

    name: str
    agent_result: AgentResult | None = None
    verifier_result: VerifierResult | None = None
    agent_execution: TimingInfo | None = None
    verifier: TimingInfo | None = None
    # Why the step has no rewards (its setup or grading failed); None when it was graded.
    error: str | None = None
    # False: below its min_reward, so the later steps did not run; None: no min_reward.
    passed_min_reward: bool | None = None
    # Harbor's: "shared" (graded in the agent's sandbox) or "separate" (in a new one).
    verifier_environment_mode: str | None = None


class TrialResult(BaseModel):
    schema_version: int = 1
    id: str
    task_name: str
    trial_name: str
    job_id: str
    attempt: int  # 0-based; attempt i of every task forms run i
    task_checksum: str
    source: str | None = None
    task_metadata: dict[str, Any] = Field(default_factory=dict)
    agent_info: AgentInfo
    agent_result: AgentResult | None = None
    verifier_result: VerifierResult | None = None
    exception_info: ExceptionInfo | None = None
    outcome: str = "graded"  # "graded" or an ErrorKind value
    error: ErrorInfo | None = None
    retries: int = 0  # infra retries before this final record
    started_at: datetime | None = None
    finished_at: datetime | None = None
    environment_setup: TimingInfo | None = None
    agent_setup: TimingInfo | None = None
    agent_execution: TimingInfo | None = None
    verifier: TimingInfo | None = None
    # What the attempt changed outside its workdir, HOME, /tmp and /logs, as seen once its
    # processes were gone ("added /usr/bin/x", "changed ...", "deleted ..."); None: the
    # provider cannot see them. Kept for older readers: `tamper` is the full record.
    tampered_paths: list[str] | None = None
    # The same changes classified (added/modified/removed; executable, library,
    # interpreter), capped, and whether `--tampered zero` counted the trial 0 for them.
    tamper: TamperRecord | None = None
    # Harbor's: "shared" (graded in the agent's sandbox) or "separate" (in a new one).
    verifier_environment_mode: str | None = None
    # A multi-step task's steps in the order they ran (those after a failed gate are absent);
    # the trial's rewards then come from them by multi_step_reward_strategy.
    steps: list[StepResult] | None = None
    # Why this record is not exactly what the trial produced: strings no record can
    # hold (a lone surrogate) were escaped to write it (records/text.py); None: it is.
    record_warnings: list[str] | None = None
    # The cluster node that ran it (the ray executor's); None: this machine.
    node: str | None = None

    @property
    def graded(self) -> bool:
        return self.outcome == "graded"

    @property
    def tampered(self) -> bool:
        """Whether the attempt changed code grading could run (records/tamper.py), under any
        policy; an older record without `tamper`: whether it changed any system path."""
        if self.tamper is not None:
            return self.tamper.counts_against
        return bool(self.tampered_paths)

    def tampered_list(self) -> list[str] | None:
        """The changes behind `tampered`, for a report: "path (modified, executable)"."""
        if self.tamper is not None:
            cut = ["(the record's walk was cut: past it, unseen)"] if self.tamper.walk_cut else []
            return [f"{c.path} ({c.marks()})" for c in self.tamper.reaching] + cut
        return self.tampered_paths

    def not_fully_graded(self) -> list[str]:
        """What grading the task declares did not run (its own, and each step's), for a
        summary: the reward stands, but a veto or gate that could have zeroed it was not
        applied. Empty when the trial was graded as declared (or not graded at all)."""
        results = [self.verifier_result, *(s.verifier_result for s in self.steps or [])]
        return sorted({n for v in results if v is not None for n in v.not_fully_graded()})

    @property
    def counted_reward(self) -> float | None:
        """What the trial counts as in a mean by default: its reward when graded,
        0 when its own grading failed (verifier_failed: the attempt's fault),
        None (left out) for infrastructure failures."""
        if self.graded:
            return self.reward
        return counted_as(self.outcome)

    @property
    def reward(self) -> float | None:
        """The primary reward: key 'reward' if present, else the first key."""
        rewards = self.verifier_result.rewards if self.verifier_result else None
        if not rewards:
            return None
        if "reward" in rewards:
            return rewards["reward"]
        return next(iter(rewards.values()))
