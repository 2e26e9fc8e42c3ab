"""The `modal` provider: one Modal Sandbox per trial, through the modal SDK's
async API (`.aio`), with the SDK surface it touches declared in one table.

`SDK_USES` lists every modal class, method, property and keyword argument this
module calls; the code reaches the SDK only through `_Sdk`, which refuses a
call or keyword not in the table. A test checks the table against the
installed modal package with inspect.signature, so SDK drift fails CI, and the
same table is checked against the test stand-in.

The SDK is imported lazily, in `load_sdk()` (tests replace it with a stand-in),
so `crucible --help` never imports modal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import shlex
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from crucible.errors import (
    AuthError,
    CrucibleError,
    ProviderUnavailable,
    ResourcesUnavailable,
    SandboxFailed,
    TaskInvalid,
)
from crucible.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    Provider,
    ProviderCapabilities,
    Sandbox,
    SandboxSpec,
)
from crucible.sandboxes.modal_auth import ModalCredentials, resolve_credentials
from crucible.sandboxes.ratelimit import Backoff, RetriesExhausted, StartGate, retry

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# The SDK surface, declared once.

Kind = Literal["aio", "agen", "sync", "property", "aiter"]


@dataclass(frozen=True)
class SdkUse:
    """One attribute of the modal SDK that this module uses."""

    owner: str  # key of SDK_CLASSES
    attr: str
    kind: Kind
    kwargs: tuple[str, ...] = ()  # keyword arguments passed
    positional: int = 0  # positional arguments passed (self excluded); -1: *args

    @property
    def key(self) -> str:
        return f"{self.owner}.{self.attr}"


# Where each class lives, as a dotted path under the `modal` package.
SDK_CLASSES: dict[str, str] = {
    "Client": "Client",
    "App": "App",
    "Image": "Image",
    "Sandbox": "Sandbox",
    "SandboxFilesystem": "sandbox.sandbox.SandboxFilesystem",
    "ContainerProcess": "container_process.ContainerProcess",
    "StreamReader": "io_streams.StreamReader",
    "StreamWriter": "io_streams.StreamWriter",
}

_SANDBOX_CREATE_KWARGS = (
    "app",
    "image",
    "tags",
    "env",
    "timeout",
    "idle_timeout",
    "workdir",
    "gpu",
    "region",
    "cpu",
    "memory",
    "block_network",
    "outbound_cidr_allowlist",
    "outbound_domain_allowlist",
    "client",
)

SDK_USES: tuple[SdkUse, ...] = (
    SdkUse("Client", "from_credentials", "aio", positional=2),
    SdkUse("Client", "close", "aio"),
    SdkUse("App", "lookup", "aio", ("create_if_missing", "environment_name", "client"), 1),
    SdkUse("App", "app_id", "property"),
    SdkUse("Image", "from_registry", "sync", positional=1),
    SdkUse("Image", "from_dockerfile", "sync", ("context_dir",), 1),
    SdkUse("Image", "build", "aio", positional=1),
    SdkUse("Sandbox", "create", "aio", _SANDBOX_CREATE_KWARGS),
    SdkUse("Sandbox", "list", "agen", ("app_id", "tags", "client")),
    SdkUse("Sandbox", "object_id", "property"),
    SdkUse("Sandbox", "exec", "aio", ("timeout", "workdir", "env", "text"), -1),
    SdkUse("Sandbox", "terminate", "aio"),
    SdkUse("Sandbox", "filesystem", "property"),
    SdkUse("SandboxFilesystem", "read_bytes", "aio", positional=1),
    SdkUse("SandboxFilesystem", "write_bytes", "aio", positional=2),
    SdkUse("SandboxFilesystem", "copy_from_local", "aio", positional=2),
    SdkUse("SandboxFilesystem", "copy_to_local", "aio", positional=2),
    SdkUse("ContainerProcess", "stdout", "property"),
    SdkUse("ContainerProcess", "stderr", "property"),
    SdkUse("ContainerProcess", "stdin", "property"),
    SdkUse("ContainerProcess", "wait", "aio"),
    SdkUse("StreamReader", "__aiter__", "aiter"),
    SdkUse("StreamWriter", "write", "sync", positional=1),
    SdkUse("StreamWriter", "write_eof", "sync"),
    SdkUse("StreamWriter", "drain", "aio"),
)

# modal.exception classes this module catches.
SDK_EXCEPTIONS: tuple[str, ...] = (
    "Error",
    "AuthError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ConnectionError",
    "InternalError",
    "ServiceError",
    "InvalidError",
    "NotFoundError",
    "ImageBuildError",
    "ExecTimeoutError",
    "SandboxFilesystemError",
    "SandboxFilesystemNotFoundError",
    "SandboxFilesystemIsADirectoryError",
    "SandboxFilesystemFileTooLargeError",
)

_USES: dict[str, SdkUse] = {u.key: u for u in SDK_USES}


def load_sdk() -> Any:
    """The modal module (tests swap this function for one returning a stand-in)."""
    try:
        import modal
    except ImportError as exc:
        raise ProviderUnavailable(
            f"the modal SDK is not installed ({exc})",
            hint="pip install 'crucible[modal]'  (needs modal>=1.6)",
        ) from None
    return modal


class _Sdk:
    """Every SDK access goes through here, checked against SDK_USES."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.exc = module.exception

    def cls(self, owner: str) -> Any:
        obj = self.module
        for part in SDK_CLASSES[owner].split("."):
            obj = getattr(obj, part)
        return obj

    @staticmethod
    def _use(key: str, kind: Kind, nargs: int, kwargs: dict[str, Any]) -> SdkUse:
        use = _USES.get(key)
        if use is None or use.kind != kind:
            raise AssertionError(f"modal SDK use {key} ({kind}) is not declared in SDK_USES")
        undeclared = set(kwargs) - set(use.kwargs)
        if undeclared:
            raise AssertionError(
                f"{key}: keywords {sorted(undeclared)} are not declared in SDK_USES"
            )
        if use.positional >= 0 and nargs > use.positional:
            raise AssertionError(f"{key}: {nargs} positional arguments, {use.positional} declared")
        return use

    async def aio(self, target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        """`await target.<attr>.aio(...)`; target is a class (static) or an instance."""
        use = self._use(key, "aio", len(args), kwargs)
        if target is None:
            target = self.cls(use.owner)
        return await getattr(target, use.attr).aio(*args, **kwargs)

    def agen(self, target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        """`target.<attr>.aio(...)` for an async generator: returns it, unawaited."""
        use = self._use(key, "agen", len(args), kwargs)
        if target is None:
            target = self.cls(use.owner)
        return getattr(target, use.attr).aio(*args, **kwargs)

    def sync(self, target: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        use = self._use(key, "sync", len(args), kwargs)
        if target is None:
            target = self.cls(use.owner)
        return getattr(target, use.attr)(*args, **kwargs)

    def prop(self, target: Any, key: str) -> Any:
        use = self._use(key, "property", 0, {})
        return getattr(target, use.attr)

    def aiter(self, target: Any, key: str) -> Any:
        self._use(key, "aiter", 0, {})
        return target.__aiter__()

    def is_exc(self, exc: BaseException, *names: str) -> bool:
        for name in names:
            assert name in SDK_EXCEPTIONS, f"modal.exception.{name} is not declared"
            cls = getattr(self.exc, name, None)
            if cls is not None and isinstance(exc, cls):
                return True
        return False


# ---------------------------------------------------------------------------
# Parameters (`--env-param key=value`, all strings).

KNOWN_GPU_TYPES = (
    "T4",
    "L4",
    "A10G",
    "A100",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "H100",
    "H100!",
    "H200",
    "B200",
)
MAX_GPUS = 8
SANDBOX_MAX_TIMEOUT = 24 * 3600
_RESERVED_ENV_PREFIX = "MODAL_TOKEN"
TAG_JOB = "crucible.job"
TAG_TRIAL = "crucible.trial"
TAG_TASK = "crucible.task"
TAG_MANAGED = "crucible.managed"


def _parse_env(raw: str) -> dict[str, str]:
    raw = raw.strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"modal env-param env: invalid JSON: {exc}") from None
        if not isinstance(data, dict) or not all(
            isinstance(v, str | int | float) for v in data.values()
        ):
            raise ValueError("modal env-param env: JSON must be an object of strings")
        return {str(k): str(v) for k, v in data.items()}
    out: dict[str, str] = {}
    for item in raw.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"modal env-param env: expected k=v;k2=v2, got {item!r}")
        out[key.strip()] = value
    return out


@dataclass
class ModalParams:
    app_name: str = "crucible"
    environment: str | None = None
    image: str | None = None  # a registry image for every trial
    timeout: int = 2 * 3600  # a sandbox's maximum lifetime, seconds
    idle_timeout: int | None = None
    cpu: float | None = None  # overrides spec.cpus
    memory: int | None = None  # MiB; overrides spec.memory_mb
    gpu: str | None = None  # overrides spec.gpus/gpu_types, e.g. "A100:2"
    region: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    create_rate: float = 5.0  # sandbox creations per second, never exceeded
    max_starting: int = 32  # creations in flight at once
    create_attempts: int = 6
    config: str | None = None  # a private TOML file holding token_id / token_secret

    @classmethod
    def parse(cls, params: dict[str, str]) -> ModalParams:
        p = cls()
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(
                f"unknown modal env-param(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )

        def num(key: str, conv: Callable[[str], Any], lo: float, hi: float = math.inf) -> Any:
            raw = str(params[key]).strip()
            try:
                value = conv(raw)
            except ValueError:
                raise ValueError(f"modal env-param {key}: not a number: {raw!r}") from None
            if not (lo <= value <= hi):
                raise ValueError(f"modal env-param {key}: {value} is outside [{lo}, {hi}]")
            return value

        for key, raw in params.items():
            raw = str(raw)
            if key == "app_name":
                if not raw.strip():
                    raise ValueError("modal env-param app_name must not be empty")
                p.app_name = raw.strip()
            elif key in ("environment", "image", "config"):
                setattr(p, key, raw.strip() or None)
            elif key == "gpu":
                p.gpu = raw.strip().upper() or None
            elif key == "timeout":
                p.timeout = num(key, int, 1, SANDBOX_MAX_TIMEOUT)
            elif key == "idle_timeout":
                p.idle_timeout = num(key, int, 1, SANDBOX_MAX_TIMEOUT)
            elif key == "cpu":
                p.cpu = num(key, float, 0.125, 64)
            elif key == "memory":
                p.memory = num(key, int, 128, 1 << 20)
            elif key == "region":
                regions = [r.strip() for r in raw.split(",") if r.strip()]
                p.region = regions or None
            elif key == "env":
                p.env = _parse_env(raw)
            elif key == "create_rate":
                p.create_rate = num(key, float, 0.01, 10_000)
            elif key == "max_starting":
                p.max_starting = num(key, int, 1, 100_000)
            elif key == "create_attempts":
                p.create_attempts = num(key, int, 1, 100)
        return p


def gpu_request(spec: SandboxSpec, override: str | None) -> str | None:
    """Modal's gpu string ("H100:1", "ANY:2") for a spec, or None for no GPU."""
    if override:
        return override
    if spec.gpus <= 0:
        return None
    if spec.gpus > MAX_GPUS:
        raise ResourcesUnavailable(
            f"task asks for {spec.gpus} GPUs; a Modal sandbox has at most {MAX_GPUS}"
        )
    types = [t.strip().upper() for t in (spec.gpu_types or []) if t.strip()]
    # Sandbox.create takes one GPU type, not a fallback list: the first listed wins.
    gpu_type = types[0] if types else "ANY"
    return f"{gpu_type}:{spec.gpus}"


def network_kwargs(spec: SandboxSpec) -> dict[str, Any]:
    """block_network, or outbound allowlists split into CIDRs and domains."""
    if spec.network == "public":
        return {}
    if spec.network == "none" or not spec.allowed_hosts:
        return {"block_network": True}
    cidrs: list[str] = []
    domains: list[str] = []
    for host in spec.allowed_hosts:
        host = host.strip()
        try:
            cidrs.append(str(ipaddress.ip_network(host, strict=False)))
        except ValueError:
            domains.append(host)
    return {"outbound_cidr_allowlist": cidrs, "outbound_domain_allowlist": domains}


def _image_key(spec: SandboxSpec, override: str | None) -> str | None:
    if override:
        return f"registry:{override}"
    if spec.image:
        return f"registry:{spec.image}"
    if spec.dockerfile_dir is not None:
        ident = spec.environment_digest or str(Path(spec.dockerfile_dir).resolve())
        return f"dockerfile:{ident}"
    return None


# ---------------------------------------------------------------------------
# The sandbox.


async def _drain(sdk: _Sdk, stream: Any, cap: int) -> tuple[bytes, bool]:
    """Read a byte stream to its end, keeping at most `cap` bytes."""
    kept = bytearray()
    truncated = False
    async for chunk in sdk.aiter(stream, "StreamReader.__aiter__"):
        data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        room = cap - len(kept)
        if len(data) > room:
            truncated = True
            if room > 0:
                kept += data[:room]
        else:
            kept += data
    return bytes(kept), truncated


class ModalSandbox(Sandbox):
    """A live Modal Sandbox. `close()` terminates it; idempotent."""

    # Extra wall time over an exec's own timeout before the host gives up on it.
    EXEC_GRACE_SEC = 30.0

    def __init__(self, provider: ModalProvider, handle: Any, spec: SandboxSpec) -> None:
        self.spec = spec
        self._provider = provider
        self._sdk = provider._sdk_checked()
        self._sb = handle
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    @property
    def sandbox_id(self) -> str:
        return str(self._sdk.prop(self._sb, "Sandbox.object_id"))

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.spec.workdir.rstrip('/')}/{path}"

    def _failed(self, what: str, exc: BaseException) -> SandboxFailed:
        return SandboxFailed(f"modal sandbox {what} failed: {type(exc).__name__}: {exc}")

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
        if self._closed:
            raise SandboxFailed("exec on a closed modal sandbox")
        argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if user and user not in ("root", "0"):
            argv = ["runuser", "-u", user, "--", *argv]
        kwargs: dict[str, Any] = {
            "workdir": self._abs(cwd) if cwd else self.spec.workdir,
            "text": False,
        }
        if env:
            kwargs["env"] = _scrub_env(env, self._provider._secret_values())
        if timeout is not None:
            # Modal's exec timeout is whole seconds; it kills the command and wait() gives -1.
            kwargs["timeout"] = max(1, math.ceil(timeout))
        started = time.monotonic()

        async def run() -> tuple[int, bytes, bool, bytes, bool]:
            proc = await self._sdk.aio(self._sb, "Sandbox.exec", *argv, **kwargs)
            stdin = self._sdk.prop(proc, "ContainerProcess.stdin")
            if input is not None:
                self._sdk.sync(
                    stdin, "StreamWriter.write", input.encode() if isinstance(input, str) else input
                )
            # Always close stdin, so a command that reads it sees EOF instead of hanging.
            self._sdk.sync(stdin, "StreamWriter.write_eof")
            await self._sdk.aio(stdin, "StreamWriter.drain")
            (out, out_cut), (err, err_cut), code = await asyncio.gather(
                _drain(self._sdk, self._sdk.prop(proc, "ContainerProcess.stdout"), output_cap),
                _drain(self._sdk, self._sdk.prop(proc, "ContainerProcess.stderr"), output_cap),
                self._sdk.aio(proc, "ContainerProcess.wait"),
            )
            return int(code), out, out_cut, err, err_cut

        guard = None if timeout is None else timeout + self.EXEC_GRACE_SEC
        try:
            code, out, out_cut, err, err_cut = await asyncio.wait_for(run(), guard)
        except TimeoutError:
            return ExecResult(
                exit_code=-1,
                stderr="exec did not finish within its timeout (host-side guard)",
                timed_out=True,
                duration_sec=time.monotonic() - started,
            )
        except Exception as exc:
            if self._sdk.is_exc(exc, "ExecTimeoutError"):
                return ExecResult(
                    exit_code=-1, timed_out=True, duration_sec=time.monotonic() - started
                )
            raise self._failed("exec", exc) from exc
        return ExecResult(
            exit_code=code,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            # Modal reports an exec that ran past its deadline as return code -1.
            timed_out=code == -1 and timeout is not None,
            truncated=out_cut or err_cut,
            duration_sec=time.monotonic() - started,
        )

    async def _fs(self) -> Any:
        if self._closed:
            raise SandboxFailed("file access on a closed modal sandbox")
        return self._sdk.prop(self._sb, "Sandbox.filesystem")

    async def _check(self, command: str, what: str) -> ExecResult:
        res = await self.exec(["sh", "-c", command], timeout=600, cwd="/")
        if not res.ok:
            raise SandboxFailed(
                f"modal sandbox {what} failed ({res.exit_code}): {res.stderr.strip()[:500]}"
            )
        return res

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        path = self._abs(path)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        fs = await self._fs()
        try:
            await self._sdk.aio(fs, "SandboxFilesystem.write_bytes", payload, path)
        except Exception as exc:
            raise self._failed(f"write_file {path}", exc) from exc
        await self._check(f"chmod {mode & 0o7777:o} {shlex.quote(path)}", f"chmod {path}")

    async def read_file(self, path: str) -> bytes:
        path = self._abs(path)
        fs = await self._fs()
        try:
            data = await self._sdk.aio(fs, "SandboxFilesystem.read_bytes", path)
        except Exception as exc:
            if self._sdk.is_exc(exc, "SandboxFilesystemNotFoundError"):
                raise FileNotFoundError(path) from None
            if self._sdk.is_exc(exc, "SandboxFilesystemIsADirectoryError"):
                raise IsADirectoryError(path) from None
            if self._sdk.is_exc(exc, "SandboxFilesystemFileTooLargeError"):
                return await self._read_large(fs, path)
            raise self._failed(f"read_file {path}", exc) from exc
        return bytes(data)

    async def _read_large(self, fs: Any, path: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="crucible-modal-") as tmp:
            local = Path(tmp) / "file"
            try:
                await self._sdk.aio(fs, "SandboxFilesystem.copy_to_local", path, str(local))
            except Exception as exc:
                raise self._failed(f"read_file {path}", exc) from exc
            return local.read_bytes()

    async def upload_dir(self, src: Path, dst: str) -> None:
        dst = self._abs(dst)
        remote_tar = f"/tmp/.crucible-up-{uuid.uuid4().hex}.tar"
        with tempfile.TemporaryDirectory(prefix="crucible-modal-") as tmp:
            local_tar = Path(tmp) / "up.tar"
            await asyncio.to_thread(_tar_dir, Path(src), local_tar)
            fs = await self._fs()
            try:
                await self._sdk.aio(
                    fs, "SandboxFilesystem.copy_from_local", str(local_tar), remote_tar
                )
            except Exception as exc:
                raise self._failed(f"upload_dir {dst}", exc) from exc
        q, t = shlex.quote(dst), shlex.quote(remote_tar)
        await self._check(
            f"mkdir -p {q} && tar -xf {t} -C {q} --no-same-owner; rc=$?; rm -f {t}; exit $rc",
            f"upload_dir {dst}",
        )

    async def download_dir(self, src: str, dst: Path) -> None:
        src = self._abs(src)
        remote_tar = f"/tmp/.crucible-down-{uuid.uuid4().hex}.tar"
        q, t = shlex.quote(src), shlex.quote(remote_tar)
        res = await self.exec(
            ["sh", "-c", f"[ -d {q} ] || exit 44; tar -cf {t} -C {q} ."], timeout=600, cwd="/"
        )
        if res.exit_code == 44:
            raise FileNotFoundError(src)
        if not res.ok:
            raise SandboxFailed(
                f"modal sandbox download_dir {src} failed: {res.stderr.strip()[:500]}"
            )
        try:
            with tempfile.TemporaryDirectory(prefix="crucible-modal-") as tmp:
                local_tar = Path(tmp) / "down.tar"
                fs = await self._fs()
                try:
                    await self._sdk.aio(
                        fs, "SandboxFilesystem.copy_to_local", remote_tar, str(local_tar)
                    )
                except Exception as exc:
                    raise self._failed(f"download_dir {src}", exc) from exc
                await asyncio.to_thread(_untar, local_tar, Path(dst))
        finally:
            with contextlib.suppress(CrucibleError):
                await self.exec(["rm", "-f", remote_tar], timeout=60, cwd="/")

    async def kill_all(self) -> None:
        # As root, kill -1 signals every process but the sandbox's init and the caller.
        await self.exec(["sh", "-c", "kill -9 -1 2>/dev/null; true"], timeout=60, cwd="/")

    async def close(self) -> None:
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.ensure_future(self._provider._terminate(self._sb))
        # Shielded: a cancelled trial still waits for (and never abandons) the terminate.
        await asyncio.shield(self._close_task)


def _tar_dir(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise FileNotFoundError(str(src))
    with tarfile.open(out, "w") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)


def _untar(archive: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        # "data" refuses absolute paths, links out of dst and device files.
        tar.extractall(dst, filter="data")


def _scrub_env(env: dict[str, str], secrets: set[str]) -> dict[str, str]:
    """Never let Modal credentials into a sandbox, whatever asked for them."""
    out: dict[str, str] = {}
    for key, value in env.items():
        if key.upper().startswith(_RESERVED_ENV_PREFIX) or (value and value in secrets):
            log.warning("dropped env var %s: Modal credentials never enter a sandbox", key)
            continue
        out[key] = value
    return out


# ---------------------------------------------------------------------------
# The provider.


class ModalProvider(Provider):
    """Sandboxes on Modal: elastic, GPUs, network blocked or allowlisted."""

    name = "modal"
    default_concurrency = 64

    def __init__(self, *, sdk: Any = None, **params: str) -> None:
        self.params = ModalParams.parse(dict(params))
        self._sdk_module = sdk
        self._sdk: _Sdk | None = None
        self._creds: ModalCredentials | None = None
        self._client: Any = None
        self._app: Any = None
        self._app_lock = asyncio.Lock()
        self._images: dict[str, Any] = {}
        self._image_errors: dict[str, CrucibleError] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}
        self.gate = StartGate(self.params.create_rate, self.params.max_starting)
        self.backoff = Backoff(attempts=self.params.create_attempts)
        self._background: set[asyncio.Task[Any]] = set()
        self.created = 0
        self.retried = 0

    # -- plumbing -----------------------------------------------------------

    def _sdk_checked(self) -> _Sdk:
        if self._sdk is None:
            self._sdk = _Sdk(self._sdk_module if self._sdk_module is not None else load_sdk())
        return self._sdk

    def _secret_values(self) -> set[str]:
        return {self._creds.token_secret, self._creds.token_id} if self._creds else set()

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(
            gpus=MAX_GPUS,
            gpu_types=list(KNOWN_GPU_TYPES),
            network_allowlist=True,
            isolation="Modal Sandbox (gVisor container on Modal's cloud); cpu and memory reserved by Modal",
        )

    def _map_error(self, what: str, exc: BaseException) -> CrucibleError:
        sdk = self._sdk_checked()
        if sdk.is_exc(exc, "AuthError", "PermissionDeniedError"):
            return AuthError(
                f"Modal refused the credentials from {self._creds.source if self._creds else '?'} during {what}: {exc}",
                hint="check the token with `modal token info`, or make a new one with `modal token new`",
            )
        if sdk.is_exc(exc, "ImageBuildError"):
            return TaskInvalid(f"Modal image build failed: {exc}")
        if sdk.is_exc(exc, "InvalidError"):
            return ResourcesUnavailable(f"Modal rejected the {what} request: {exc}")
        return SandboxFailed(f"Modal {what} failed: {type(exc).__name__}: {exc}")

    def _retryable(self, exc: BaseException) -> bool:
        """Rate limits, capacity and transport blips; never auth or invalid requests."""
        sdk = self._sdk_checked()
        if sdk.is_exc(exc, "AuthError", "PermissionDeniedError", "InvalidError", "ImageBuildError"):
            return False
        if sdk.is_exc(
            exc, "ResourceExhaustedError", "ConnectionError", "InternalError", "ServiceError"
        ):
            return True
        return isinstance(exc, OSError | TimeoutError)

    # -- lifecycle ----------------------------------------------------------

    async def preflight(self) -> None:
        """Credentials first (no network); then a client. Creates nothing."""
        sdk = self._sdk_checked()
        if self._client is not None:
            return
        self._creds = resolve_credentials(self.params.config)
        log.info("modal credentials from %s", self._creds.source)
        try:
            self._client = await sdk.aio(
                None, "Client.from_credentials", self._creds.token_id, self._creds.token_secret
            )
        except Exception as exc:
            raise self._map_error("client connection", exc) from exc

    async def _ensure_app(self) -> Any:
        await self.preflight()
        async with self._app_lock:
            if self._app is None:
                environment = self.params.environment or (
                    self._creds.environment if self._creds else None
                )
                try:
                    self._app = await retry(
                        lambda: self._sdk_checked().aio(
                            None,
                            "App.lookup",
                            self.params.app_name,
                            create_if_missing=True,
                            environment_name=environment,
                            client=self._client,
                        ),
                        retryable=self._retryable,
                        backoff=self.backoff,
                    )
                except RetriesExhausted as exc:
                    raise self._map_error("app lookup", exc.last) from exc
                except Exception as exc:
                    raise self._map_error("app lookup", exc) from exc
        return self._app

    async def _image_for(self, spec: SandboxSpec) -> Any:
        """The built image for a spec (built at most once per key), or None for Modal's default."""
        key = _image_key(spec, self.params.image)
        if key is None:
            return None
        lock = self._image_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self._image_errors:
                raise self._image_errors[key]
            if key in self._images:
                return self._images[key]
            sdk = self._sdk_checked()
            app = await self._ensure_app()
            try:
                if key.startswith("registry:"):
                    image = sdk.sync(None, "Image.from_registry", key.removeprefix("registry:"))
                else:
                    assert spec.dockerfile_dir is not None
                    ctx = Path(spec.dockerfile_dir)
                    if not (ctx / "Dockerfile").is_file():
                        raise TaskInvalid(f"{ctx}/Dockerfile does not exist")
                    image = sdk.sync(
                        None, "Image.from_dockerfile", str(ctx / "Dockerfile"), context_dir=str(ctx)
                    )
                built = await asyncio.wait_for(
                    sdk.aio(image, "Image.build", app), spec.build_timeout_sec
                )
            except CrucibleError as exc:
                self._image_errors[key] = exc
                raise
            except TimeoutError:
                late = TaskInvalid(
                    f"Modal image {key} did not build within {spec.build_timeout_sec:.0f}s"
                )
                self._image_errors[key] = late
                raise late from None
            except Exception as exc:
                err = self._map_error("image build", exc)
                if isinstance(err, TaskInvalid | ResourcesUnavailable):
                    self._image_errors[key] = err  # deterministic: do not rebuild per trial
                raise err from exc
            self._images[key] = built if built is not None else image
            return self._images[key]

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        """Build each distinct image once, before the fan-out. A failed build is
        remembered and fails only the trials that need it (task_invalid)."""
        await self._ensure_app()
        firsts: dict[str, SandboxSpec] = {}
        for spec in specs:
            key = _image_key(spec, self.params.image)
            if key is not None:
                firsts.setdefault(key, spec)
        sem = asyncio.Semaphore(4)

        async def build(spec: SandboxSpec) -> None:
            async with sem:
                with contextlib.suppress(TaskInvalid, ResourcesUnavailable, SandboxFailed):
                    await self._image_for(spec)

        await asyncio.gather(*(build(s) for s in firsts.values()))

    def _create_kwargs(self, spec: SandboxSpec, image: Any, app: Any) -> dict[str, Any]:
        p = self.params
        env = _scrub_env({**spec.env, **p.env}, self._secret_values())
        kwargs: dict[str, Any] = {
            "app": app,
            "image": image,
            "tags": {
                TAG_MANAGED: "1",
                TAG_JOB: spec.job_id,
                TAG_TRIAL: spec.trial_id,
                TAG_TASK: spec.task_name[:200],
            },
            "env": env or None,
            "timeout": p.timeout,
            "workdir": spec.workdir,
            "cpu": p.cpu if p.cpu is not None else float(spec.cpus),
            "memory": p.memory if p.memory is not None else int(spec.memory_mb),
            "client": self._client,
        }
        gpu = gpu_request(spec, p.gpu)
        if gpu is not None:
            kwargs["gpu"] = gpu
        if p.idle_timeout is not None:
            kwargs["idle_timeout"] = p.idle_timeout
        if p.region:
            kwargs["region"] = p.region[0] if len(p.region) == 1 else p.region
        kwargs.update(network_kwargs(spec))
        return kwargs

    async def create(self, spec: SandboxSpec) -> Sandbox:
        sdk = self._sdk_checked()
        app = await self._ensure_app()
        image = await self._image_for(spec)
        kwargs = self._create_kwargs(spec, image, app)

        calling = False  # a Sandbox.create request is in flight
        abandoned = False  # the trial was cancelled: no further tries

        async def attempt() -> Any:
            nonlocal calling
            async with self.gate.starting():
                calling = True
                try:
                    return await sdk.aio(None, "Sandbox.create", **kwargs)
                finally:
                    calling = False

        def retryable(exc: BaseException) -> bool:
            return not abandoned and self._retryable(exc)

        def on_retry(n: int, exc: BaseException, delay: float) -> None:
            self.retried += 1
            log.info(
                "modal create for %s: try %d failed (%s); retrying in %.1fs",
                spec.trial_id,
                n,
                type(exc).__name__,
                delay,
            )

        # The create runs as its own task so that, if this trial is cancelled
        # while a request is in flight, a sandbox that still comes into being
        # is terminated rather than left running until its timeout. Cancelled
        # while merely queued (start cap, rate limit, backoff), it just stops.
        task = asyncio.ensure_future(
            retry(attempt, retryable=retryable, backoff=self.backoff, on_retry=on_retry)
        )
        try:
            handle = await asyncio.shield(task)
        except asyncio.CancelledError:
            abandoned = True
            if not calling:
                task.cancel()
            task.add_done_callback(self._reap_late)
            self._background.add(task)
            raise
        except RetriesExhausted as exc:
            raise SandboxFailed(
                f"Modal Sandbox.create gave up after {exc.attempts} tries: "
                f"{type(exc.last).__name__}: {exc.last}",
                hint="lower --env-param create_rate / max_starting, or retry the job later",
            ) from exc
        except CrucibleError:
            raise
        except Exception as exc:
            raise self._map_error("Sandbox.create", exc) from exc
        self.created += 1
        sandbox = ModalSandbox(self, handle, spec)
        try:
            dirs = " ".join(
                shlex.quote(d)
                for d in (spec.workdir, "/logs/agent", "/logs/verifier", "/logs/artifacts")
            )
            await sandbox._check(f"mkdir -p {dirs}", "setup")
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _reap_late(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if task.cancelled() or task.exception() is not None:
            return
        reaper = asyncio.ensure_future(self._terminate(task.result()))
        self._background.add(reaper)
        reaper.add_done_callback(self._background.discard)

    async def _terminate(self, handle: Any) -> None:
        try:
            await self._sdk_checked().aio(handle, "Sandbox.terminate")
        except Exception as exc:  # already gone, or the API blinked: the timeout still ends it
            log.warning("modal terminate failed: %s: %s", type(exc).__name__, exc)

    async def cleanup(self, job_id: str | None = None) -> int:
        """Terminate sandboxes of this app tagged with `job_id` (all crucible ones if None)."""
        sdk = self._sdk_checked()
        app = await self._ensure_app()
        tags = {TAG_JOB: job_id} if job_id else {TAG_MANAGED: "1"}
        app_id = sdk.prop(app, "App.app_id")
        handles: list[Any] = []
        try:
            listing = await self._list(app_id, tags)
        except Exception as exc:
            raise self._map_error("Sandbox.list", exc) from exc
        handles.extend(listing)
        await asyncio.gather(*(self._terminate(h) for h in handles))
        return len(handles)

    async def _list(self, app_id: str, tags: dict[str, str]) -> list[Any]:
        gen = self._sdk_checked().agen(
            None, "Sandbox.list", app_id=app_id, tags=tags, client=self._client
        )
        return [h async for h in gen]

    async def aclose(self) -> None:
        # A late create's done-callback adds its terminate here, so loop until quiet.
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
            await asyncio.sleep(0)
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await self._sdk_checked().aio(client, "Client.close")
