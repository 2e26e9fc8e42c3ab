"""The grading half of a trial: what happens after the agent phase, and whose
fault it is when it breaks.

kill every agent process -> record what the attempt changed in the system ->
reset /tests and the reward folder from the host side, copy the tests in ->
tests/test.sh in the verifier's own context -> collect -> read the reward.

Blame decides the outcome: once the agent phase is over, anything that breaks
grading in a sandbox that is still alive is the attempt's (it may have caused
it: a full disk, a deleted workdir, a fork bomb, a broken loader), so it is a
counted verifier_failed, never a retried gap. So is a sandbox its own processes
ended (`Sandbox.ended_by_contents`: the agent killed the container's keeper or its
entrypoint, or filled its memory): from the agent phase on, that is the attempt's
doing. Only a sandbox lost to the infrastructure is sandbox_failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from crucible.errors import (
    Cancelled,
    CrucibleError,
    SandboxFailed,
    Tampered,
    TaskInvalid,
    VerifierFailed,
)
from crucible.records.tamper import TamperPolicy, TamperRecord
from crucible.records.trial import TrialResult
from crucible.records.verifier import VerifierResult
from crucible.sandboxes.base import ExecResult, Sandbox
from crucible.store.logs import FileLog
from crucible.tasks.models import Task
from crucible.verifiers.rewards import check_range
from crucible.verifiers.script import PRELUDE_FAILED, prepare_grading, read_rewards, run_verifier

T = TypeVar("T")


async def shielded(aw: Awaitable[T]) -> T:
    """Run cleanup (a sandbox's close) to completion even when the trial is being cancelled."""
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def blamed(sandbox: Sandbox, work: Awaitable[T]) -> T:
    """`work` (grading in the sandbox), its failures attributed by blame."""
    try:
        return await work
    except (VerifierFailed, TaskInvalid, Cancelled):
        raise
    except Exception as exc:
        if await sandbox.alive():
            what = exc.message if isinstance(exc, CrucibleError) else f"{type(exc).__name__}: {exc}"
            raise VerifierFailed(f"grading failed in a live sandbox: {what}"[:1000]) from exc
        ended = await ended_by_attempt(sandbox, exc)
        if ended is not None:
            raise ended from exc
        if isinstance(exc, SandboxFailed):
            raise
        raise SandboxFailed(f"the sandbox was lost during grading: {exc}") from exc


async def ended_by_attempt(sandbox: Sandbox, exc: BaseException) -> VerifierFailed | None:
    """The attempt's failure when `exc` came from a sandbox its own processes ended
    (from the agent phase on, the agent could have), else None (a loss to blame on
    the infrastructure)."""
    if not isinstance(exc, SandboxFailed) and isinstance(exc, CrucibleError):
        return None  # a verdict of its own kind (resources, model, task): kept
    how = await sandbox.ended_by_contents()
    if how is None:
        return None
    return VerifierFailed(
        f"the sandbox ended during the attempt ({how}); what runs in it could end it, "
        f"so it counts against the attempt: {exc}"[:1000]
    )


def note_changes(
    result: TrialResult,
    record: TamperRecord | None,
    log: FileLog,
    policy: TamperPolicy = "flag",
    *,
    shared: bool = True,
) -> None:
    """Put what the attempt changed on the trial's record (both forms), say so in the log,
    and, under `--tampered zero` when grading runs where the agent was (`shared`), count it
    0: raise Tampered naming the changes grading could run. The one place every grading
    path (a trial, a step, shared or separate) records and polices tampering."""
    result.tamper = record
    result.tampered_paths = None if record is None else record.as_paths()
    if record is None and policy == "zero" and shared:
        log.warning("--tampered zero: this provider cannot see what the attempt changed")
    if record is None or not (record.changes or record.walk_cut):
        return
    reaching = record.reaching
    log.warning(
        f"the attempt changed {record.n_total} path(s) outside its own places, "
        f"{len(reaching)} that grading can run: "
        + ", ".join(f"{c.path} ({c.marks()})" for c in (reaching or record.changes)[:10])
    )
    if policy == "zero" and shared and record.counts_against:
        record.zeroed = True
        raise Tampered(record.reason()[:1000])


async def grade(
    sandbox: Sandbox,
    task: Task,
    result: TrialResult,
    log: FileLog,
    collect: Callable[[], Awaitable[Path]],
    policy: TamperPolicy = "flag",
) -> tuple[ExecResult, Path]:
    """Grade in the sandbox; return how test.sh ended and the host folder where
    /logs/verifier was collected (by `collect`). Records (and under `zero` polices) what
    the attempt changed: note_changes."""
    await sandbox.kill_all()  # the end of the agent phase
    # Every agent process is gone: what the attempt changed is final. Read before the
    # tests go in, not beside them: docker's stat of a path (the record asks for modes)
    # racing an archive upload or a reset exec lost /tests/test.sh now and then.
    changes = await sandbox.system_changes()
    try:
        staged = await prepare_grading(sandbox, task.tests_dir)
    except Exception:
        note_changes(result, changes, log)  # kept: the likeliest cause of the failure
        raise
    # Before test.sh: under `zero` nothing of the agent's is run for a verdict already known.
    note_changes(result, changes, log, policy)
    res = await run_verifier(
        sandbox,
        staged,
        timeout_sec=task.verifier_timeout_sec,
        env=dict(task.config.verifier.env),
        cwd=task.workdir,
        user=None if task.config.verifier.user is None else str(task.config.verifier.user),
    )
    # The reward is read from what was collected: one transfer, and the
    # record on disk is exactly what was graded.
    return res, await collect()


def record_grade(
    res: ExecResult,
    verifier_dir: Path,
    own: Path,
    timeout_sec: float,
    log: FileLog,
    hold: Callable[[VerifierResult], None],
    reward_range: tuple[float, float],
) -> VerifierResult:
    """Write test.sh's output to crucible's own folder `own` (made here: never one the
    sandbox shares), then read the rewards into a VerifierResult. `hold` gets it first, so
    a reward that cannot be read, or lies outside `reward_range` (VerifierFailed), leaves
    the exit code on record."""
    own.mkdir(parents=True)
    (own / "test-stdout.txt").write_text(
        res.stdout + (f"\n--- stderr ---\n{res.stderr}" if res.stderr else "")
    )
    record = VerifierResult(exit_code=res.exit_code)
    hold(record)
    record.rewards, details = rewards_of(res, verifier_dir, timeout_sec)
    # The task's range, after the details are split off: a reward outside it (1.5e308,
    # whose sum with itself is inf) is the attempt's failure, never a score.
    check_range(record.rewards, *reward_range, source="the test script's reward")
    if details:  # Harbor's reward.json may carry strings beside its numbers
        record.details = details
        log.warning(
            f"reward.json values that are not numbers kept as details: {sorted(details)[:10]}"
        )
    return record


def rewards_of(
    res: ExecResult, verifier_dir: Path, timeout_sec: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """The rewards graded and reward.json's non-numeric details, or VerifierFailed saying
    why there are none."""
    if res.timed_out:
        raise VerifierFailed(f"the verifier timed out after {timeout_sec:g}s")
    try:
        return read_rewards(verifier_dir)
    except VerifierFailed as exc:
        if res.exit_code == 0:
            raise
        tail = (res.stderr.strip().splitlines() or [""])[-1][:300]
        what = (
            "grading could not be set up"
            if res.exit_code == PRELUDE_FAILED
            else f"test.sh exited {res.exit_code}"
        )
        raise VerifierFailed(f"{exc.message}; {what}: {tail}") from exc
