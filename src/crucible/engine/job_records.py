"""The records a job writes for trials that did not end on their own: never started
(cancelled), raised out of run_trial, or failed while a cancel was under way."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

from crucible.agents.base import Agent
from crucible.engine.spec import TrialPlan
from crucible.errors import ErrorKind
from crucible.records.text import storable_text
from crucible.records.trial import ErrorInfo, TrialResult, utcnow
from crucible.store.layout import dump, write_json_atomic
from crucible.store.logs import FileLog


def cancelled_result(plan: TrialPlan, agent: Agent) -> TrialResult:
    now = utcnow()
    return TrialResult(
        id="",
        task_name=plan.task.name,
        trial_name=plan.trial_name,
        job_id=plan.job_id,
        attempt=plan.attempt,
        task_checksum=plan.task.digest,
        agent_info=agent.info(),
        outcome=ErrorKind.cancelled.value,
        error=ErrorInfo(kind=ErrorKind.cancelled, type="Cancelled", message="not started"),
        started_at=now,
        finished_at=now,
    )


def unrecorded_result(
    plan: TrialPlan, agent: Agent, retries: int, exc: Exception, log: FileLog
) -> TrialResult:
    """A trial that raised out of run_trial (its folder cannot be made, say: a task
    folder name near NAME_MAX, "__0" added) is crucible's failure, counted as such: one
    trial never stops the job. It has no record on disk, so a resume runs it again."""
    why = storable_text(f"the trial could not run or be recorded: {type(exc).__name__}: {exc}")
    log.error(f"{plan.trial_name}: {why}"[:2000])
    out = cancelled_result(plan, agent)
    return out.model_copy(
        update={
            "id": str(uuid4()),
            "outcome": ErrorKind.sandbox_failed.value,
            "retries": retries,
            "error": ErrorInfo(
                kind=ErrorKind.sandbox_failed, type=type(exc).__name__, message=why[:2000]
            ),
        }
    )


def failed_while_cancelling(result: TrialResult, job_dir: Path) -> TrialResult:
    """An error that ends a trial once a cancel is under way is the cancel's doing
    (Ctrl-C in a terminal reaches the sandbox's processes too): the trial stays
    resumable, with what happened kept in its message."""
    why = f"{result.outcome}: {result.error.message}" if result.error else result.outcome
    if result.outcome == ErrorKind.cancelled.value:
        return result
    out = result.model_copy(
        update={
            "outcome": ErrorKind.cancelled.value,
            "error": ErrorInfo(
                kind=ErrorKind.cancelled,
                type="Cancelled",
                message=f"cancelled while running ({why})",
            ),
        }
    )
    write_json_atomic(job_dir / out.trial_name / "result.json", dump(out))
    return out
