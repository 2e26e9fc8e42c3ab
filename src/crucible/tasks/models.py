"""The task.toml schema (Harbor-compatible) and the loaded, immutable `Task`.

Field names and defaults follow Harbor 0.25's `TaskConfig` so Harbor and
Terminal-Bench tasks load unchanged, every field included (the newer parts
live in tasks/sections.py); crucible's own additions live in `[metadata]`,
which Harbor ignores. What a provider cannot run yet is named by
tasks/support.py, not refused here.
"""

from __future__ import annotations

import unicodedata
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crucible.tasks.hosts import normalize_hosts
from crucible.tasks.sections import (
    ArtifactSection,
    CollectHook,
    HealthcheckSection,
    McpServerSection,
    RewardStrategy,
    TpuSection,
    VerifierMode,
    validate_step_name,
)


class NetworkMode(StrEnum):
    public = "public"
    no_network = "no-network"
    allowlist = "allowlist"


def parse_size_mb(size: str) -> int:
    """Harbor's deprecated size strings ('2G', '512M', '1024K') to MiB."""
    s = size.strip().upper()
    if s.endswith("B"):
        s = s[:-1]
    units = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    if not s or s[-1] not in units:
        raise ValueError(f"invalid size {size!r}: expected a number with G, M or K, like '2G'")
    return int(float(s[:-1]) * units[s[-1]])


class _Section(BaseModel):
    # Unknown keys are kept (Harbor adds fields over time) but reported by `tasks check`.
    model_config = ConfigDict(extra="allow")


class Author(_Section):
    name: str
    email: str | None = None


class PackageInfo(_Section):
    name: str
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


def _network_policy(where: str, mode: NetworkMode | None, hosts: list[str]) -> NetworkMode | None:
    """allowed_hosts implies 'allowlist' and is refused with any other mode."""
    if not hosts:
        return mode
    if mode is None:
        return NetworkMode.allowlist
    if mode != NetworkMode.allowlist:
        raise ValueError(f"{where}.allowed_hosts is only valid with network_mode='allowlist'")
    return mode


class _Phase(_Section):
    """[agent] and [verifier]: a network policy set here overrides the environment's."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _policy(self) -> _Phase:
        where = "agent" if isinstance(self, AgentSection) else "verifier"
        self.allowed_hosts = normalize_hosts(self.allowed_hosts, where)
        self.network_mode = _network_policy(where, self.network_mode, self.allowed_hosts)
        return self


class AgentSection(_Phase):
    timeout_sec: float | None = None
    user: str | int | None = None


class VerifierSection(_Phase):
    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    # None: 'separate' when [verifier.environment] is given, else 'shared' (Harbor's rule).
    environment_mode: VerifierMode | None = None
    environment: EnvironmentSection | None = None
    collect: list[CollectHook] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode(self) -> VerifierSection:
        if self.environment_mode == VerifierMode.shared and self.environment is not None:
            raise ValueError(
                "verifier.environment_mode = 'shared' conflicts with [verifier.environment]; "
                "omit the environment or set environment_mode = 'separate'"
            )
        return self

    def declared_mode(self) -> VerifierMode | None:
        if self.environment_mode is not None:
            return self.environment_mode
        return VerifierMode.separate if self.environment is not None else None


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSection(_Section):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    workdir: str | None = None
    cpus: float = 1
    memory_mb: int = 2048
    storage_mb: int = 10240
    gpus: int = 0
    gpu_types: list[str] | None = None
    tpu: TpuSection | None = None
    os: Literal["linux", "windows"] = "linux"
    mcp_servers: list[McpServerSection] = Field(default_factory=list)
    skills_dir: str | None = None
    healthcheck: HealthcheckSection | None = None
    allow_internet: bool | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Deprecated in Harbor; migrated to memory_mb / storage_mb.
    memory: str | None = Field(default=None, exclude=True)
    storage: str | None = Field(default=None, exclude=True)

    @field_validator("os", mode="before")
    @classmethod
    def _lower_os(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _migrate(self) -> EnvironmentSection:
        # The key is named in the message so `tasks check` can point at its line.
        if self.memory is not None:
            try:
                self.memory_mb = parse_size_mb(self.memory)
            except ValueError as exc:
                raise ValueError(f"environment.memory: {exc}") from None
            self.memory = None
        if self.storage is not None:
            try:
                self.storage_mb = parse_size_mb(self.storage)
            except ValueError as exc:
                raise ValueError(f"environment.storage: {exc}") from None
            self.storage = None
        self.allowed_hosts = normalize_hosts(self.allowed_hosts, "environment")
        self.network_mode = _network_policy("environment", self.network_mode, self.allowed_hosts)
        if self.cpus <= 0:
            raise ValueError("environment.cpus must be positive")
        if self.memory_mb <= 0:
            raise ValueError("environment.memory_mb must be positive")
        if self.gpus < 0:
            raise ValueError("environment.gpus must be >= 0")
        return self

    def resolved_network(self) -> NetworkMode:
        """Explicit network_mode wins; then the deprecated allow_internet; else Harbor's
        default, the network. A job run with `--no-network` locks every task to none
        (see `Task.without_network`)."""
        if self.network_mode is not None:
            return self.network_mode
        if self.allow_internet is False:
            return NetworkMode.no_network
        return NetworkMode.public


VerifierSection.model_rebuild()  # its [verifier.environment] is an EnvironmentSection


class StepSection(_Section):
    """One `[[steps]]` entry; its instruction, tests, solution and setup are files under
    steps/NAME/ (tests/test.sh falls back to the task's own)."""

    name: str
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    # A float gates on 'reward'; a table gates on each key. Below it, later steps do not run.
    min_reward: float | dict[str, float] | None = None
    healthcheck: HealthcheckSection | None = None
    artifacts: list[str | ArtifactSection] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_step_name(value)


class TaskConfig(_Section):
    schema_version: str = "1.1"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    source: str | None = None
    multi_step_reward_strategy: RewardStrategy | None = None
    steps: list[StepSection] | None = None
    artifacts: list[str | ArtifactSection] = Field(default_factory=list)

    @field_validator("steps")
    @classmethod
    def _unique_steps(cls, steps: list[StepSection] | None) -> list[StepSection] | None:
        seen: set[str] = set()
        for step in steps or []:
            # Names are directories: equal on a case-insensitive filesystem means equal.
            key = unicodedata.normalize("NFC", step.name).casefold()
            if key in seen:
                raise ValueError(f"steps: the name {step.name!r} is used twice")
            seen.add(key)
        return steps

    def verifier_mode(self) -> VerifierMode:
        """The mode of the task's verifier (steps may set their own)."""
        return self.verifier.declared_mode() or VerifierMode.shared

    def step_verifier_mode(self, step: StepSection) -> VerifierMode:
        return step.verifier.declared_mode() or self.verifier_mode()

    @model_validator(mode="before")
    @classmethod
    def _rename_version(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", str(data.pop("version")))
        return data


DEFAULT_AGENT_TIMEOUT_SEC = 600.0


class Task(BaseModel):
    """One task directory, loaded and validated. Identity: name + digest."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: Path
    config: TaskConfig
    instruction: str  # "" on a multi-step task: each step has its own
    step_instructions: dict[str, str] = Field(default_factory=dict)  # step name -> text
    digest: str  # sha256 over every file of the task directory
    environment_digest: str | None = None  # sha256 over environment/ only
    dockerfile_workdir: str | None = None  # last WORKDIR of environment/Dockerfile
    step_name: str | None = None  # set on the view of one step (engine/steps.py)
    # The allowed host variables the task read (name -> value), for the compose file read
    # again at run time; never part of its identity, never stored, never shown.
    host_env: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    @property
    def solution_dir(self) -> Path:
        if self.step_name is not None:
            return self.step_dir(self.step_name) / "solution"
        return self.path / "solution"

    @property
    def tests_dir(self) -> Path:
        """The folder whose test.sh grading runs (a step without its own runs the task's)."""
        if self.step_name is not None:
            own = self.step_dir(self.step_name) / "tests"
            if (own / "test.sh").is_file():
                return own
        return self.path / "tests"

    @property
    def tests_dirs(self) -> list[Path]:
        """What grading copies to /tests, in order: the task's tests/, then a step's own
        tests/ over it, so a name in both is the step's (its test.sh first of all). Harbor
        0.25 uploads both, in this order, into one /tests (src/harbor/verifier/verifier.py,
        `Verifier._resolve_tests` and `verify`): a step's test.sh may load a helper that
        only the task's tests/ holds."""
        if self.step_name is None:
            return [self.tests_dir]
        both = (self.path / "tests", self.step_dir(self.step_name) / "tests")
        found = [d for d in both if d.is_dir() and not d.is_symlink()]
        return found or [self.tests_dir]

    @property
    def workdir(self) -> str:
        return self.config.environment.workdir or self.dockerfile_workdir or "/app"

    @property
    def agent_timeout_sec(self) -> float:
        return self.config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC

    @property
    def verifier_timeout_sec(self) -> float:
        return self.config.verifier.timeout_sec

    @property
    def metadata(self) -> dict[str, Any]:
        return self.config.metadata

    @property
    def steps(self) -> list[StepSection]:
        return self.config.steps or []

    def step_dir(self, name: str) -> Path:
        return self.path / "steps" / name

    @property
    def build_network(self) -> bool | None:
        """True when the task asks for network to build its image alone (`[metadata.crucible]
        build_network = true`); None leaves it to the environment's network."""
        own = self.metadata.get("crucible")
        return True if isinstance(own, dict) and own.get("build_network") is True else None

    def without_network(self) -> Task:
        """This task with every phase, and its image's build, locked to no network (a job's
        `--no-network`). The digest is unchanged: only the job's policy differs."""
        none: dict[str, Any] = {"network_mode": NetworkMode.no_network, "allowed_hosts": []}
        cfg = self.config
        verifier_env = cfg.verifier.environment
        steps = [
            s.model_copy(
                update={
                    "agent": s.agent.model_copy(update=none),
                    "verifier": s.verifier.model_copy(update=none),
                }
            )
            for s in cfg.steps or []
        ]
        locked = cfg.model_copy(
            update={
                "environment": cfg.environment.model_copy(update=none),
                "agent": cfg.agent.model_copy(update=none),
                "verifier": cfg.verifier.model_copy(
                    update={
                        **none,
                        "environment": verifier_env.model_copy(update=none)
                        if verifier_env is not None
                        else None,
                    }
                ),
                "steps": steps if cfg.steps is not None else None,
                "metadata": _without_build_network(cfg.metadata),
            }
        )
        return self.model_copy(update={"config": locked})


def _without_build_network(metadata: dict[str, Any]) -> dict[str, Any]:
    own = metadata.get("crucible")
    if isinstance(own, dict):
        return {**metadata, "crucible": {k: v for k, v in own.items() if k != "build_network"}}
    return metadata
