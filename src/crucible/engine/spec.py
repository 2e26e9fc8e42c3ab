"""What one trial is (a task's attempt in a job, named so resume finds it again), what it
asks of a provider, and how its sandboxes are made.

One builder (`sandbox_spec`) makes both SandboxSpecs a trial asks for: the agent's
(`build_spec`, from [environment]) and a separate verifier's (`verifier_spec`, from
[verifier.environment], Harbor's precedence). One helper (`create_sandbox`) makes either
under the job's start gate (its creation rate limit and cap on sandboxes still starting).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from crucible.agents.base import Agent
from crucible.errors import CrucibleError, ResourcesUnavailable, SandboxFailed, TaskInvalid
from crucible.records.tamper import TamperPolicy
from crucible.sandboxes.base import NetworkMode, Provider, Sandbox, SandboxSpec
from crucible.sandboxes.ratelimit import StartGate
from crucible.tasks.loader import dockerfile_workdir, tree_digest
from crucible.tasks.models import EnvironmentSection, StepSection, Task
from crucible.tasks.models import NetworkMode as TaskNetwork
from crucible.tasks.support import compose_file
from crucible.tasks.taskfs import read_task_bytes

SANDBOX_NETWORK: dict[TaskNetwork, NetworkMode] = {
    TaskNetwork.public: "public",
    TaskNetwork.no_network: "none",
    TaskNetwork.allowlist: "allowlist",
}


def trial_name_for(task_name: str, attempt: int) -> str:
    """Deterministic folder name: resume finds the same trial again."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_name).strip("._") or "task"
    return f"{safe}__{attempt}"


@dataclass(frozen=True)
class TrialPlan:
    task: Task
    attempt: int
    job_id: str
    tampered: TamperPolicy = "flag"  # the job's --tampered policy (records/tamper.py)

    @property
    def trial_name(self) -> str:
        return trial_name_for(self.task.name, self.attempt)

    @property
    def pool(self) -> str:
        return "gpu" if self.task.config.environment.gpus > 0 else "cpu"


def sandbox_spec(
    task: Task,
    env: EnvironmentSection,
    *,
    job_id: str,
    trial_id: str,
    image: str | None,
    build: Path | None,
    digest: str | None,
    workdir: str,
    network: NetworkMode,
    hosts: list[str],
    params: dict[str, str] | None,
    compose: Path | None = None,
    host_env: dict[str, str] | None = None,
) -> SandboxSpec:
    """The SandboxSpec of one of a trial's sandboxes: `env`'s resources, the image (or
    build context) and network decided by the caller."""
    return SandboxSpec(
        job_id=job_id,
        trial_id=trial_id,
        task_name=task.name,
        image=image,
        dockerfile_dir=build,
        environment_digest=digest,
        compose_file=compose,
        workdir=workdir,
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        storage_mb=env.storage_mb,
        gpus=env.gpus,
        gpu_types=env.gpu_types,
        network=network,
        allowed_hosts=list(hosts),
        env=dict(env.env),
        host_env=dict(host_env or {}),
        build_timeout_sec=env.build_timeout_sec,
        build_network=task.build_network,
        params=dict(params or {}),
    )


def _network(task: Task, agent: Agent) -> NetworkMode:
    mode = task.config.environment.resolved_network()
    if agent.requires_network and mode != TaskNetwork.public:
        raise ResourcesUnavailable(
            f"agent {agent.name!r} needs network, but task {task.name!r} has network_mode "
            f"{mode.value!r}",
            hint="run it with an agent that works offline, or a task that allows network",
        )
    return SANDBOX_NETWORK[mode]


def build_spec(plan: TrialPlan, agent: Agent, params: dict[str, str] | None = None) -> SandboxSpec:
    """The agent's sandbox: the task's [environment]."""
    task = plan.task
    env = task.config.environment
    return sandbox_spec(
        task,
        env,
        job_id=plan.job_id,
        trial_id=plan.trial_name,
        image=env.docker_image,
        build=task.environment_dir if task.dockerfile.is_file() else None,
        digest=task.environment_digest,
        workdir=task.workdir,
        network=_network(task, agent),
        hosts=env.allowed_hosts,
        params=params,
        compose=compose_file(task),
        host_env=task.host_env,
    )


# -- a separate verifier's sandbox ------------------------------------------------------


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
    step `step` in a multi-step trial: the image that carries its tests, else a fresh
    copy of the task's own environment, made as the agent's is."""
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
    return sandbox_spec(
        task,
        env,
        job_id=job_id,
        trial_id=f"{trial_id}__verifier" + (f"__{step.name}" if step is not None else ""),
        image=image,
        build=build,
        digest=digest,
        workdir=workdir or task.workdir,
        network=SANDBOX_NETWORK[network],
        hosts=hosts,
        params=params,
    )


# -- making a sandbox ---------------------------------------------------------------------


async def create_sandbox(
    provider: Provider, spec: SandboxSpec, gate: StartGate | None, *, what: str
) -> Sandbox:
    """`provider.create(spec)` under the job's start gate (when given). A provider's failure
    that is not a verdict of its own kind is sandbox_failed, naming `what` was made."""
    try:
        if gate is None:
            return await provider.create(spec)
        async with gate.starting():
            return await provider.create(spec)
    except CrucibleError:
        raise  # sandbox_failed, task_invalid (a broken image), resources_unavailable
    except Exception as exc:
        raise SandboxFailed(f"could not create {what}: {type(exc).__name__}: {exc}"[:1000]) from exc
