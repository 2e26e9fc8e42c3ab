"""The sandbox contract every provider implements.

Exception contract: transport or lifecycle failures raise `SandboxFailed`;
a request the provider can never satisfy raises `ResourcesUnavailable`.
A command that fails or times out is *not* an exception: it is an
`ExecResult` with `exit_code` / `timed_out` set.
"""

from __future__ import annotations

import abc
import os
import shlex
import tempfile
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from crucible.errors import ResourcesUnavailable
from crucible.records.tamper import TamperRecord
from crucible.sandboxes.buildgate import BuildGate

NetworkMode = Literal["none", "public", "allowlist"]

DEFAULT_OUTPUT_CAP = 1 << 20  # bytes kept per stream per exec


class SandboxSpec(BaseModel):
    """What one trial asks of a provider."""

    job_id: str = "adhoc"
    trial_id: str = "adhoc"
    task_name: str = "adhoc"
    image: str | None = None  # a prebuilt image (docker_image)
    dockerfile_dir: Path | None = None  # environment/ holding a Dockerfile
    environment_digest: str | None = None  # sha256 of environment/ (build cache key)
    # environment/docker-compose.yaml: sidecar services (the docker provider runs them)
    compose_file: Path | None = None
    workdir: str = "/app"
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int | None = None
    pids_limit: int = 1024
    gpus: int = 0
    gpu_types: list[str] | None = None
    network: NetworkMode = "none"
    allowed_hosts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # The allowed host variables the task read (tasks/hostvars.py), for its compose file.
    host_env: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    build_timeout_sec: float = 600.0
    # Whether the image's build steps reach a network: None follows `network` ("public"
    # only); True when the task asks for it to build alone ([metadata.crucible]
    # build_network), which a job's --no-network clears.
    build_network: bool | None = None
    params: dict[str, str] = Field(default_factory=dict)  # provider-specific (--env-param)

    @property
    def builds_with_network(self) -> bool:
        return self.network == "public" if self.build_network is None else self.build_network


def refuse_compose(spec: SandboxSpec, provider: str) -> None:
    """For a provider without compose sidecars: a compose task is refused, never run as main
    alone (the launch refuses it first; this holds for every other way in)."""
    if spec.compose_file is not None:
        raise ResourcesUnavailable(
            f"compose environments ({spec.compose_file.name}) are not supported on this "
            f"provider ({provider!r})",
            hint="run the task with --env docker",
        )


class ExecResult(BaseModel):
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False  # output over the cap was cut
    duration_sec: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Sandbox(abc.ABC):
    """A live environment for one trial. Lives until `close()`."""

    spec: SandboxSpec
    # Set when crucible ended the sandbox at the operator's `timeout` (overrides.py): its
    # life ran out while the attempt used it, so that loss is the attempt's, never a gap
    # an agent could reach by stalling (engine/grading/blame.py).
    lifetime_ended: str | None = None

    @abc.abstractmethod
    async def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | str | None = None,
        user: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        """Run a command (a string goes through `sh -c`). Timeout kills its process tree."""

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """Raise FileNotFoundError when absent."""

    @abc.abstractmethod
    async def upload_dir(self, src: Path, dst: str) -> None:
        """Copy a host directory's contents to `dst` (created) inside the sandbox."""

    @abc.abstractmethod
    async def download_dir(self, src: str, dst: Path) -> None:
        """Copy a sandbox directory's contents into host directory `dst`."""

    @abc.abstractmethod
    async def kill_all(self) -> None:
        """Kill every process in the sandbox but its init (end of the agent phase)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Tear the sandbox down. Idempotent; never raises for an already-dead sandbox."""

    # ---- grading: what the engine needs once the agent phase is over ----------------

    async def reset_dir(self, path: str) -> None:
        """Make `path` a fresh, empty, plain directory, whatever stood there (a link is
        removed, never followed; missing parents are made). Decided and checked by crucible, not by a shell glob
        inside: raise `OSError` when that cannot be achieved, `SandboxFailed` when the
        transport fails.

        This default is for providers without a host-side handle: a root exec does the
        work, then a listing fetched through `download_dir` (and a link test) shows it
        held. Providers that hold a handle on the sandbox's files override it.
        """
        q = shlex.quote(path)
        res = await self.exec(
            f"rm -rf -- {q} && mkdir -p -- {q} && [ -d {q} ] && [ ! -L {q} ]",
            timeout=120,
            cwd="/",
            user="root",
        )
        if not res.ok:
            raise OSError(f"cannot reset {path}: {(res.stderr or res.stdout).strip()[-300:]}")
        with tempfile.TemporaryDirectory(prefix="crucible-reset-") as tmp:
            await self.download_dir(path, Path(tmp))
            left = sorted(os.listdir(tmp))
        if left:
            raise OSError(f"{path} is not empty after its reset: {left[:5]}")

    async def make_fresh_dir(
        self, path: str, mode: int = 0o700, files: dict[str, bytes] | None = None
    ) -> bool:
        """Make `path` a new directory (`mode`, root's) holding `files` (name -> bytes,
        mode 0644), from the host, in place of an exec: once every agent process is gone
        (grading's HOME). Its parent must exist; anything already there, a link included
        (never followed), is an `OSError`. False: the caller makes it with an exec (this
        default, for providers without a host-side handle on the sandbox's files)."""
        return False

    async def alive(self) -> bool:
        """Is the sandbox still there and answering? Cheap; never raises. A failure
        after the agent phase in a live sandbox is the attempt's (verifier_failed);
        in a lost one, the infrastructure's (sandbox_failed)."""
        try:
            return (await self.exec("true", timeout=30, cwd="/")).ok
        except Exception:
            return False

    async def ended_by_contents(self) -> str | None:
        """Once the sandbox is no longer alive: how its own processes ended it (its main
        process exited or was killed from inside, it ran out of its own memory), or None
        when it was lost otherwise (the provider gone, closed by crucible) or the provider
        cannot tell. An attempt that can end its sandbox must not turn its 0 into an
        excluded sandbox_failed (engine/grading/blame.py `blamed`). Never raises."""
        return None

    async def system_changes(self) -> TamperRecord | None:
        """What the attempt changed outside its own places (the workdir, HOME, /tmp,
        /logs), classified (records/tamper.py), once every agent process is gone; None
        when this provider cannot see its writable layer. Never raises."""
        return None

    async def changed_system_paths(self) -> list[str] | None:
        """`system_changes` in the older form ("added /usr/bin/x", "changed ...")."""
        record = await self.system_changes()
        return None if record is None else record.as_paths()

    def grading_kit(self) -> str | None:
        """A directory inside the sandbox holding crucible's static `bash` and `busybox`
        (sandboxes/gradekit.py), which nothing inside can write or replace: grading's own
        commands run from it by absolute path. None: PATH's tools are already crucible's
        (a read-only host userland) or the provider has no kit (then PATH's are used)."""
        return None

    async def expose_url(self, url: str) -> str:
        """The URL by which commands in this sandbox reach `url`, a service the operator
        named for them (an installed agent's model endpoint). Default: `url` itself.
        The local provider forwards a URL on the host's loopback, which its sandboxes
        cannot reach otherwise, through the sandbox's own loopback (local/forward.py)."""
        return url

    def service(self, name: str) -> Sandbox | None:
        """A compose sidecar of this sandbox by service name (collect hooks run there), or
        None when there is no such service (a sandbox without compose has none)."""
        return None

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class ProviderCapabilities(BaseModel):
    gpus: int = 0  # GPUs this provider can give one sandbox (0: none)
    gpu_types: list[str] = Field(default_factory=list)
    network_allowlist: bool = False
    # True when the agent can neither rename, replace nor write the system layout
    # (/, /bin, /lib*, /sbin, /usr, /etc): what grading runs is then not the agent's.
    immutable_layout: bool = False
    isolation: str = ""  # human words: how isolation and limits are enforced
    # What a sandbox with network reaches of this machine's own non-loopback addresses:
    # "blocked" (local: prohibit routes in its netns), "reachable" (docker: the host is
    # its bridge's gateway), "elsewhere" (it runs on another machine; the conformance
    # suite then never probes this one's addresses, whose packets would leave it).
    host_addresses: Literal["blocked", "reachable", "elsewhere"] = "elsewhere"


class Provider(abc.ABC):
    """Makes sandboxes. One instance per job."""

    name: str = ""
    # The `--env-param` keys it reads (None: its constructor's keywords; registry.py).
    env_param_names: ClassVar[tuple[str, ...] | None] = None
    default_concurrency: int = 8
    # A hard cap on live sandboxes of this provider (None: only the job's -c applies).
    max_concurrency: int | None = None
    # The job folder, set by the engine before prepare(): where a provider keeps job logs
    # (image builds).
    log_dir: Path | None = None
    _build_gate: BuildGate | None = None

    @property
    def build_gate(self) -> BuildGate:
        """The job's one limit on image builds at once, and their off switch (buildgate.py):
        set by the engine before prepare(); used outside a job, one of its own."""
        if self._build_gate is None:
            self._build_gate = BuildGate()
        return self._build_gate

    @build_gate.setter
    def build_gate(self, gate: BuildGate) -> None:
        self._build_gate = gate

    @abc.abstractmethod
    async def preflight(self) -> None:
        """Raise ProviderUnavailable/AuthError, with a hint, when this provider cannot run."""

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities()

    async def prepare(self, specs: list[SandboxSpec]) -> None:  # noqa: B027
        """Once per job, before the fan-out: build images etc. Default: nothing."""

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox: ...

    async def cleanup(self, job_id: str | None = None) -> int:
        """Remove what a job (or every job) left behind; return how many were removed."""
        return 0

    async def aclose(self) -> None:  # noqa: B027
        """Release provider-wide resources (clients, sessions)."""
