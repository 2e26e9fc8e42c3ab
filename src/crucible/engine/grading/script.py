"""The script stage: tests/test.sh, run once per grading, in the agent's sandbox (in
place) or in a separate verifier's (engine/grading/separate.py).

/tests and the reward folder reset from the host side, the tests copied in
(verifiers/script.prepare_grading) -> test.sh in the verifier's own context
(verifiers/script.run_verifier) -> every process killed, /logs/verifier collected. The
reward is read from what was collected: one transfer, and the record on disk is exactly
what was graded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from crucible.engine.grading.record import note_changes
from crucible.records.tamper import TamperPolicy
from crucible.records.trial import TrialResult
from crucible.sandboxes.base import ExecResult, Sandbox
from crucible.store.logs import FileLog
from crucible.tasks.models import Task
from crucible.verifiers.script import prepare_grading, run_verifier

# Collects the grading sandbox's /logs/verifier (killing every process first); returns
# the host folder it landed in.
Collect = Callable[[Sandbox], Awaitable[Path]]


async def run_script(
    sandbox: Sandbox, task: Task, staged: str, *, cwd: str, collect: Collect
) -> tuple[ExecResult, Path]:
    """test.sh from `staged` (prepare_grading's) in the grading context, then `collect`:
    how it ended and the host folder holding /logs/verifier."""
    verifier = task.config.verifier
    res = await run_verifier(
        sandbox,
        staged,
        timeout_sec=task.verifier_timeout_sec,
        env=dict(verifier.env),
        cwd=cwd,
        user=None if verifier.user is None else str(verifier.user),
    )
    return res, await collect(sandbox)


async def grade_in_place(
    sandbox: Sandbox,
    task: Task,
    result: TrialResult,
    log: FileLog,
    collect: Collect,
    policy: TamperPolicy = "flag",
) -> tuple[ExecResult, Path]:
    """Grade in the agent's sandbox. Records (and under `zero` polices) what the attempt
    changed: note_changes."""
    await sandbox.kill_all()  # what a collect hook started is gone too
    # Every agent process is gone: what the attempt changed is final. Read before the
    # tests go in, not beside them: docker's stat of a path (the record asks for modes)
    # racing an archive upload or a reset exec lost /tests/test.sh now and then.
    changes = await sandbox.system_changes()
    try:
        staged = await prepare_grading(sandbox, task.tests_dirs)
    except Exception:
        note_changes(result, changes, log)  # kept: the likeliest cause of the failure
        raise
    # Before test.sh: under `zero` nothing of the agent's is run for a verdict already known.
    note_changes(result, changes, log, policy)
    return await run_script(sandbox, task, staged, cwd=task.workdir, collect=collect)
