"""The executor seam: the one place a job (or the grading service) hands a trial over
to be run, and gets its final record back.

The scheduler (engine/job.py, serve/service.py) stays the authority: it decides what
runs, when, and what is retried; an executor only places each trial and brings its
record and folder back into the job folder. `LocalExecutor` runs it in this process
with the job's provider; the ray executor (crucible/executors/ray/) runs it on a node
agent of a Ray cluster. Executors register by name like providers: built-ins are
imported lazily, third parties through the `crucible.executors` entry point group, so
start-up never imports Ray.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from crucible.agents.base import Agent
from crucible.engine.spec import TrialPlan
from crucible.engine.teardown import Teardown
from crucible.engine.trial import run_trial
from crucible.records.trial import TrialResult
from crucible.sandboxes.base import Provider, SandboxSpec
from crucible.sandboxes.ratelimit import StartGate

BUILTIN: dict[str, str] = {
    "local": "crucible.engine.executor:LocalExecutor",
    "ray": "crucible.executors.ray.executor:RayExecutor",
}


@dataclass
class TrialCall:
    """One trial as the scheduler hands it over (run_trial's arguments)."""

    plan: TrialPlan
    agent: Agent
    job_dir: Path
    retries: int = 0
    env_params: dict[str, str] | None = None
    time_limit_sec: float | None = None

    async def run(
        self,
        *,
        provider: Provider,
        start_gate: StartGate | None,
        teardown: Teardown | None,
        plan: TrialPlan | None = None,
        job_dir: Path | None = None,
    ) -> TrialResult:
        """`run_trial` on `provider`, here; `plan` and `job_dir` in place of the call's own
        (a node agent runs the plan it rebuilt into its own scratch folder)."""
        return await run_trial(
            plan or self.plan,
            provider=provider,
            agent=self.agent,
            job_dir=job_dir or self.job_dir,
            retries=self.retries,
            env_params=self.env_params,
            time_limit_sec=self.time_limit_sec,
            start_gate=start_gate,
            teardown=teardown,
        )


@dataclass
class ExecutorSettings:
    """What an executor is made from: `--executor`, `--ray-address`, `--shared-store`,
    and the job's provider and pacing (a remote executor builds a provider per node)."""

    name: str = "local"
    address: str | None = None
    shared_store: str | None = None
    env: str = "local"
    env_params: dict[str, str] = field(default_factory=dict)
    job_id: str = ""
    max_builds: int | None = None
    create_rate: float | None = None
    max_starting: int | None = None


class Executor(Protocol):
    name: str

    async def start(self, provider: Provider) -> None:
        """Connect, and check what will run the trials (on every node, for a cluster)."""

    async def prepare(self, provider: Provider, specs: list[SandboxSpec]) -> None: ...

    async def cleanup(self, provider: Provider, job_id: str) -> int: ...

    async def run(
        self,
        call: TrialCall,
        *,
        provider: Provider,
        start_gate: StartGate | None,
        teardown: Teardown | None,
    ) -> TrialResult: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """Trials in this process, on the job's own provider (the default)."""

    name = "local"

    def __init__(self, settings: ExecutorSettings | None = None) -> None:
        self.settings = settings or ExecutorSettings()

    async def start(self, provider: Provider) -> None:
        return None  # launch.py has preflighted the provider

    async def prepare(self, provider: Provider, specs: list[SandboxSpec]) -> None:
        await provider.prepare(specs)

    async def cleanup(self, provider: Provider, job_id: str) -> int:
        return await provider.cleanup(job_id)

    async def run(
        self,
        call: TrialCall,
        *,
        provider: Provider,
        start_gate: StartGate | None,
        teardown: Teardown | None,
    ) -> TrialResult:
        return await call.run(provider=provider, start_gate=start_gate, teardown=teardown)

    async def aclose(self) -> None:
        return None


def executor_names() -> list[str]:
    names = set(BUILTIN)
    names.update(ep.name for ep in entry_points(group="crucible.executors"))
    return sorted(names)


def get_executor(settings: ExecutorSettings) -> Executor:
    """The executor `settings.name`, made from `settings`; KeyError if none is known."""
    target = BUILTIN.get(settings.name)
    if target is not None:
        module, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    else:
        eps = [ep for ep in entry_points(group="crucible.executors") if ep.name == settings.name]
        if not eps:
            known = ", ".join(executor_names())
            raise KeyError(f"unknown executor {settings.name!r}; known: {known}")
        cls = eps[0].load()
    executor: Executor = cls(settings)
    return executor
