"""What the verifier left: rewards, the test script's exit code, and each stage's result.

The stages (verifiers/pipeline.py) are the in-sandbox test script, then host-side
stages that score, gate or veto. Every stage's result is kept, the judge's model
usage and cost among them, apart from the agent's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from crucible.records.usage import Usage

StageRole = Literal["score", "gate", "veto"]
# passed: counted as it is; failed: a gate that zeroed the reward; vetoed: a veto that
# zeroed it; skipped: not run (an earlier stage already failed the rollout); error: the
# stage could not run (the trial then ends with the matching error kind, never a 0 or a 1).
StageStatus = Literal["passed", "failed", "vetoed", "skipped", "error"]


class StageModel(BaseModel):
    """The model a judge stage asked, and the prompt it asked with (versioned)."""

    model: str
    base_url: str | None = None
    prompt_version: str
    prompt_sha256: str
    calls: int = 0  # requests answered (a malformed verdict asked again counts)


class StageResult(BaseModel):
    name: str
    kind: str  # "script", "contracts", "judge"
    role: StageRole
    status: StageStatus
    components: dict[str, float] = Field(default_factory=dict)
    verdict: str | None = None  # the judge's "pass" | "veto"; a gate's "pass" | "fail"
    reason: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    model: StageModel | None = None
    usage: Usage | None = None  # the stage's own model calls, never the agent's
    cost_usd: float | None = None  # None: no model call, or a model without a known price
    duration_sec: float | None = None
    # Why a gate or veto that could have zeroed the reward did not run, where that is no
    # verdict on the rollout (a judge with no endpoint configured): its trial is then not
    # fully graded, and the job's summary and report count it. None: it ran, or its not
    # running changed nothing (an earlier stage had already failed the rollout).
    not_run: str | None = None


def not_fully_graded_text(n: int, why: dict[str, int]) -> str:
    """ "2 trials not fully graded (judge veto not run: no judge configured)", for a summary
    or a report; `why`: the trials by reason (a reason all n share is not counted again)."""
    parts = ", ".join(w + (f": {c}" if c != n else "") for w, c in sorted(why.items()))
    return f"{n} trial{'s' * (n != 1)} not fully graded ({parts})"


class SubmissionRecord(BaseModel):
    """What host-side stages read: the declared files found, those that were not, and
    what collecting them met (links not followed, caps)."""

    files: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class VerifierResult(BaseModel):
    rewards: dict[str, float] | None = None
    exit_code: int | None = None
    # reward.json's values that are not numbers (labels, notes): kept, never graded.
    details: dict[str, Any] = Field(default_factory=dict)
    # What the test script gave, before host-side stages gated or vetoed it (None: no stages).
    script_rewards: dict[str, float] | None = None
    stages: list[StageResult] = Field(default_factory=list)
    submission: SubmissionRecord | None = None

    @property
    def stage_cost_usd(self) -> float | None:
        costs = [s.cost_usd for s in self.stages if s.cost_usd is not None]
        return sum(costs) if costs else None

    def not_fully_graded(self) -> list[str]:
        """The gates and vetoes that could not run ("judge veto not run: no judge configured")."""
        return [f"{s.name} {s.role} not run: {s.not_run}" for s in self.stages if s.not_run]

    def stage_note(self) -> str | None:
        """Why host-side stages zeroed the reward ("judge vetoed: ..."), or None."""
        for s in self.stages:
            if s.status in ("failed", "vetoed", "error"):
                return f"{s.name} {s.status}: {s.reason}"
        return None
