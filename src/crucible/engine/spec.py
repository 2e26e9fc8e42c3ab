"""What one trial is (a task's attempt in a job, named so resume finds it again) and
what it asks of a provider (its SandboxSpec)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from crucible.agents.base import Agent
from crucible.errors import ResourcesUnavailable
from crucible.records.tamper import TamperPolicy
from crucible.sandboxes.base import NetworkMode, SandboxSpec
from crucible.tasks.models import NetworkMode as TaskNetwork
from crucible.tasks.models import Task
from crucible.tasks.support import compose_file

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
    task = plan.task
    env_cfg = task.config.environment
    return SandboxSpec(
        job_id=plan.job_id,
        trial_id=plan.trial_name,
        task_name=task.name,
        image=env_cfg.docker_image,
        dockerfile_dir=task.environment_dir if task.dockerfile.is_file() else None,
        environment_digest=task.environment_digest,
        compose_file=compose_file(task),
        workdir=task.workdir,
        cpus=env_cfg.cpus,
        memory_mb=env_cfg.memory_mb,
        storage_mb=env_cfg.storage_mb,
        gpus=env_cfg.gpus,
        gpu_types=env_cfg.gpu_types,
        network=_network(task, agent),
        allowed_hosts=list(env_cfg.allowed_hosts),
        env=dict(env_cfg.env),
        host_env=dict(task.host_env),
        build_timeout_sec=env_cfg.build_timeout_sec,
        build_network=task.build_network,
        params=dict(params or {}),
    )
