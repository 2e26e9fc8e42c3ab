"""From a trial's final record to a grade's status, honestly (records/serve.py):

- graded -> `ok` with its reward; a 0 that host-side stages or the tamper rule gave
  says why in `error`;
- verifier_failed (the blame rule put the grading failure on the attempt) -> `ok`,
  reward 0, the reason in `error`;
- a submission that could not be applied (agent error `invalid_submission`) ->
  `invalid`, reward 0, whatever the tests then gave;
- anything else (the sandbox or model failed after the service's own retries, the
  task is broken or asks for what the provider lacks) -> `unscorable`, reward None.
"""

from __future__ import annotations

from typing import Any

from crucible.agents.submission import INVALID
from crucible.errors import ErrorKind
from crucible.records.serve import GradeResult, GradeStatus
from crucible.records.trial import TrialResult


def _metrics(r: TrialResult) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": r.outcome, "retries": r.retries}
    if r.started_at and r.finished_at:
        out["duration_s"] = round((r.finished_at - r.started_at).total_seconds(), 3)
    if r.tampered:
        out["tampered"] = r.tampered_list()
    if r.verifier_result is not None and r.verifier_result.details:
        out["details"] = r.verifier_result.details
    return out


def _why_zero(r: TrialResult) -> str | None:
    v = r.verifier_result
    note = v.stage_note() if v is not None else None
    if note:
        return note
    if r.tamper is not None and r.tamper.counts_against:
        return "tampered: the submission changed code that grading runs"
    return None


def grade_result(
    grade_id: str, r: TrialResult, *, trial: str, group_id: str | None = None
) -> GradeResult:
    base: dict[str, Any] = {
        "id": grade_id,
        "task_hash": r.task_checksum,
        "trial": trial,
        "group_id": group_id,
        "metrics": _metrics(r),
    }
    agent_err = r.agent_result.error if r.agent_result else None
    attempts_fault = r.graded or r.outcome == ErrorKind.verifier_failed.value
    if attempts_fault and agent_err is not None and agent_err.type == INVALID:
        return GradeResult(
            status=GradeStatus.invalid, reward=0.0, error=agent_err.message or INVALID, **base
        )
    if r.graded:
        rewards = r.verifier_result.rewards if r.verifier_result else None
        reward = r.reward if r.reward is not None else 0.0
        error = _why_zero(r) if reward == 0 else None
        return GradeResult(
            status=GradeStatus.ok, reward=reward, rewards=rewards, error=error, **base
        )
    message = r.error.message if r.error else r.outcome
    if r.outcome == ErrorKind.verifier_failed.value:
        return GradeResult(
            status=GradeStatus.ok, reward=0.0, error=f"verifier_failed: {message}", **base
        )
    return GradeResult(
        status=GradeStatus.unscorable, reward=None, error=f"{r.outcome}: {message}", **base
    )
