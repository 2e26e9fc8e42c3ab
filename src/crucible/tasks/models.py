"""The task.toml schema (Harbor-compatible) and the loaded, immutable `Task`.

Field names and defaults follow Harbor's `TaskConfig` so Harbor and
Terminal-Bench tasks load unchanged; crucible's own additions live in
`[metadata]`, which Harbor ignores.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


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


def _normalize_hosts(hosts: list[str]) -> list[str]:
    out: list[str] = []
    for host in hosts:
        value = str(host).strip().lower().rstrip(".")
        if not value:
            continue
        if "://" in value or "/" in value or ":" in value:
            raise ValueError(f"allowed_hosts entries must be hostnames or IPv4 addresses: {host!r}")
        if value not in out:
            out.append(value)
    return out


class _Section(BaseModel):
    # Unknown keys are kept (Harbor adds fields over time) but reported by `tasks check`.
    model_config = ConfigDict(extra="allow")


class PackageInfo(_Section):
    name: str
    description: str = ""
    authors: list[dict[str, Any]] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class AgentSection(_Section):
    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class VerifierSection(_Section):
    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


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
    allow_internet: bool | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Deprecated in Harbor; migrated to memory_mb / storage_mb.
    memory: str | None = Field(default=None, exclude=True)
    storage: str | None = Field(default=None, exclude=True)

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
        if self.allowed_hosts:
            self.allowed_hosts = _normalize_hosts(self.allowed_hosts)
            if self.network_mode is None:
                self.network_mode = NetworkMode.allowlist
            elif self.network_mode != NetworkMode.allowlist:
                raise ValueError(
                    "environment.allowed_hosts is only valid with network_mode='allowlist'"
                )
        if self.cpus <= 0:
            raise ValueError("environment.cpus must be positive")
        if self.memory_mb <= 0:
            raise ValueError("environment.memory_mb must be positive")
        if self.gpus < 0:
            raise ValueError("environment.gpus must be >= 0")
        return self

    def resolved_network(self) -> NetworkMode:
        """Explicit network_mode wins; then an explicit allow_internet; else no network.

        Harbor defaults allow_internet to true; crucible is closed unless the
        task asks, so untrusted code has no network by default.
        """
        if self.network_mode is not None:
            return self.network_mode
        if self.allow_internet:
            return NetworkMode.public
        return NetworkMode.no_network


class TaskConfig(_Section):
    schema_version: str = "1.1"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    source: str | None = None

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
    instruction: str
    digest: str  # sha256 over every file of the task directory
    environment_digest: str | None = None  # sha256 over environment/ only
    dockerfile_workdir: str | None = None  # last WORKDIR of environment/Dockerfile

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

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
