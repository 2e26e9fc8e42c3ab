"""Grading in a separate verifier sandbox (Harbor's `[verifier] environment_mode = "separate"`).

The agent's sandbox is done with once its submission and artifacts are taken
(engine/grading/grader.py), and is closed before this starts (in a multi-step trial it
lives on for the next step and is closed only before the last step's grading). The
verifier runs in a NEW sandbox from engine/spec.verifier_spec ([verifier.environment]'s
resources, a step's [steps.verifier.environment] first, and the image that carries the
tests, else a fresh copy of the task's own environment), made under the job's start gate
(engine/spec.create_sandbox). It gets only the taken artifacts, uploaded at their sandbox
paths. Then grading goes exactly as in place: /tests and /logs/verifier reset from the
host side, the tests copied in, test.sh in the grading context, the reward read from
what was collected of the verifier sandbox's /logs/verifier (engine/grading/script.py).

Nothing of the agent's sandbox can reach the verifier but the artifacts' bytes: not
its processes, its /bin, its loader, its site-packages, a planted /tests or reward.

Blame: a verifier sandbox that cannot be made (or fails its healthcheck) is the
infrastructure's (sandbox_failed, retried); a failure inside it once it runs is
the attempt's (verifier_failed), as in place (engine/grading/blame.py).
"""

from __future__ import annotations

from pathlib import Path

from crucible.engine.grading.artifacts import Taken, give
from crucible.engine.grading.blame import blamed, shielded
from crucible.engine.grading.script import Collect, run_script
from crucible.engine.healthcheck import run_healthcheck
from crucible.engine.spec import create_sandbox, verifier_environment
from crucible.sandboxes.base import ExecResult, Provider, Sandbox, SandboxSpec
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.logs import FileLog
from crucible.tasks.models import Task
from crucible.verifiers.script import prepare_grading


async def grade_separately(
    task: Task,
    spec: SandboxSpec,
    provider: Provider,
    taken: list[Taken],
    log: FileLog,
    collect: Collect,
    gate: StartGate | None = None,
) -> tuple[ExecResult, Path]:
    """Grade in a new sandbox from `spec` (verifier_spec); return how test.sh ended and the
    host folder where its /logs/verifier was collected (by `collect`, which kills first)."""
    sandbox = await create_sandbox(provider, spec, gate, what="the verifier sandbox")
    log.info(f"verifier: a separate sandbox ({spec.image or spec.dockerfile_dir or 'default'})")
    try:
        await run_healthcheck(
            sandbox, verifier_environment(task).healthcheck, log, cwd=spec.workdir
        )
        return await blamed(sandbox, _grade(sandbox, task, spec, taken, collect))
    finally:
        await shielded(sandbox.close())


async def _grade(
    sandbox: Sandbox, task: Task, spec: SandboxSpec, taken: list[Taken], collect: Collect
) -> tuple[ExecResult, Path]:
    await give(sandbox, taken)
    staged = await prepare_grading(sandbox, task.tests_dirs)
    return await run_script(sandbox, task, staged, cwd=spec.workdir, collect=collect)
