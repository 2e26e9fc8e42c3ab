"""Grading in a separate verifier sandbox (Harbor's `[verifier] environment_mode = "separate"`).

The agent's sandbox is done with once its artifacts are taken (engine/artifacts.py)
and is closed before this starts (in a multi-step trial, engine/step_grade.py, it lives
on for the next step and is closed only before the last step's grading). The verifier
runs in a NEW sandbox with [verifier.environment]'s resources (a step's
[steps.verifier.environment] first) and, in Harbor's order, the step's docker_image or
steps/NAME/tests/Dockerfile, then the task's docker_image or tests/Dockerfile (the build
context Harbor gives a verifier), else a fresh copy of the task's own environment, made
as the agent's is. It gets only the taken artifacts, uploaded at their sandbox paths. Then grading goes
exactly as in shared mode: /tests and /logs/verifier reset from the host side,
the tests copied in, test.sh in the grading context, the reward read from what
was collected of the verifier sandbox's /logs/verifier.

Nothing of the agent's sandbox can reach the verifier but the artifacts' bytes: not
its processes, its /bin, its loader, its site-packages, a planted /tests or reward.

Blame: a verifier sandbox that cannot be made (or fails its healthcheck) is the
infrastructure's (sandbox_failed, retried); a failure inside it once it runs is
the attempt's (verifier_failed), as in shared mode (grading.blamed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from crucible.engine.artifacts import Taken, give
from crucible.engine.grading import blamed, shielded
from crucible.engine.healthcheck import run_healthcheck
from crucible.engine.spec import SANDBOX_NETWORK
from crucible.errors import CrucibleError, SandboxFailed, TaskInvalid
from crucible.sandboxes.base import ExecResult, Provider, Sandbox, SandboxSpec
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.logs import FileLog
from crucible.tasks.loader import dockerfile_workdir, tree_digest
from crucible.tasks.models import EnvironmentSection, StepSection, Task
from crucible.tasks.taskfs import read_task_bytes
from crucible.verifiers.script import prepare_grading, run_verifier


def verifier_environment(task: Task, step: StepSection | None = None) -> EnvironmentSection:
    """Harbor's: [steps.verifier.environment], then [verifier.environment], then a copy of
    the task's [environment]."""
    own = step.verifier.environment if step is not None else None
    return own or task.config.verifier.environment or task.config.environment


def _dockerfile_text(context: Path) -> str:
    """The bundled Dockerfile, never read through a link (tasks/taskfs.py)."""
    try:
        return read_task_bytes(context, "Dockerfile").decode("utf-8", errors="replace")
    except OSError as exc:
        raise TaskInvalid(f"the verifier image cannot be built: {exc}") from exc


def _bundled(task: Task, step: StepSection | None) -> tuple[str | None, Path | None]:
    """A verifier image that carries its tests, in Harbor's order: the step's
    [steps.verifier.environment] image or a Dockerfile in steps/NAME/tests/, then the
    task's [verifier.environment] image or tests/Dockerfile. (None, None): none."""
    candidates = [(task.config.verifier.environment, task.path / "tests")]
    if step is not None:
        candidates.insert(0, (step.verifier.environment, task.step_dir(step.name) / "tests"))
    for env, tests in candidates:
        if env is not None and env.docker_image:
            return env.docker_image, None
        if (tests / "Dockerfile").is_file():
            return None, tests
    return None, None


def verifier_spec(
    task: Task,
    *,
    job_id: str,
    trial_id: str,
    params: dict[str, str] | None = None,
    step: StepSection | None = None,
) -> SandboxSpec:
    """The verifier sandbox of `task` (the whole task, not a step's view), or of its
    step `step` in a multi-step trial."""
    cfg = task.config
    env = verifier_environment(task, step)
    image, build = _bundled(task, step)
    digest = None if build is None else tree_digest(build)
    workdir = env.workdir
    if build is not None:
        workdir = workdir or dockerfile_workdir(_dockerfile_text(build))
    elif image is None:  # a fresh copy of the task's own environment, made as the agent's is
        image = cfg.environment.docker_image
        if task.dockerfile.is_file():
            build, digest = task.environment_dir, task.environment_digest
    # [verifier].network_mode ([steps.verifier]'s first) is the verifier phase's policy: a
    # sandbox of its own gets it from the start instead of switching.
    phases = [cfg.verifier] if step is None else [step.verifier, cfg.verifier]
    network, hosts = env.resolved_network(), env.allowed_hosts
    for phase in phases:
        if phase.network_mode is not None:
            network, hosts = phase.network_mode, phase.allowed_hosts
            break
    return SandboxSpec(
        job_id=job_id,
        trial_id=f"{trial_id}__verifier" + (f"__{step.name}" if step is not None else ""),
        task_name=task.name,
        image=image,
        dockerfile_dir=build,
        environment_digest=digest,
        workdir=workdir or task.workdir,
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        storage_mb=env.storage_mb,
        gpus=env.gpus,
        gpu_types=env.gpu_types,
        network=SANDBOX_NETWORK[network],
        allowed_hosts=list(hosts),
        env=dict(env.env),
        build_timeout_sec=env.build_timeout_sec,
        build_network=task.build_network,
        params=dict(params or {}),
    )


async def _create(provider: Provider, spec: SandboxSpec, gate: StartGate | None) -> Sandbox:
    try:
        if gate is None:
            return await provider.create(spec)
        async with gate.starting():
            return await provider.create(spec)
    except CrucibleError:
        raise  # sandbox_failed, task_invalid (a broken image), resources_unavailable
    except Exception as exc:
        raise SandboxFailed(f"could not create the verifier sandbox: {exc}"[:1000]) from exc


async def grade_separately(
    task: Task,
    spec: SandboxSpec,
    provider: Provider,
    taken: list[Taken],
    log: FileLog,
    collect: Callable[[Sandbox], Awaitable[Path]],
    gate: StartGate | None = None,
) -> tuple[ExecResult, Path]:
    """Grade in a new sandbox from `spec` (verifier_spec); return how test.sh ended and the
    host folder where its /logs/verifier was collected (by `collect`, which kills first)."""
    sandbox = await _create(provider, spec, gate)
    log.info(f"verifier: a separate sandbox ({spec.image or spec.dockerfile_dir or 'default'})")
    try:
        await run_healthcheck(
            sandbox, verifier_environment(task).healthcheck, log, cwd=spec.workdir
        )
        return await blamed(sandbox, _grade(sandbox, task, spec, taken, collect))
    finally:
        await shielded(sandbox.close())


async def _grade(
    sandbox: Sandbox,
    task: Task,
    spec: SandboxSpec,
    taken: list[Taken],
    collect: Callable[[Sandbox], Awaitable[Path]],
) -> tuple[ExecResult, Path]:
    await give(sandbox, taken)
    staged = await prepare_grading(sandbox, task.tests_dir)
    verifier = task.config.verifier
    res = await run_verifier(
        sandbox,
        staged,
        timeout_sec=task.verifier_timeout_sec,
        env=dict(verifier.env),
        cwd=spec.workdir,
        user=None if verifier.user is None else str(verifier.user),
    )
    return res, await collect(sandbox)
