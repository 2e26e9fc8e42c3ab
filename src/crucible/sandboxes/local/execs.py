"""The exec transport of a live `local` sandbox (a mixin of LocalSandbox).

Each exec is a request line on pid 1's stdin pipe naming a script in the
control dir; its stdout and stderr come back through two FIFOs there, and the
server reports "start ID NSPID" and "ID EXITCODE" on its stdout (init.py).
Timeouts kill the exec's process tree; kill_all ends the agent phase.

Exit codes: a timed-out exec reports `exit_code=124`, `timed_out=True`; a
process killed by a signal reports 128+signal (137 for SIGKILL, e.g. the OOM
killer, with a "memory limit exceeded" note appended to stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shlex
import signal
import time
from typing import Any

from crucible.errors import SandboxFailed
from crucible.sandboxes import proc
from crucible.sandboxes.base import DEFAULT_OUTPUT_CAP, ExecResult, SandboxSpec
from crucible.sandboxes.local.cgroups import SandboxCgroup
from crucible.sandboxes.local.files import write_new
from crucible.sandboxes.local.hostuid import Owner
from crucible.sandboxes.local.init import CTL
from crucible.sandboxes.local.pool import Slot
from crucible.sandboxes.local.sweep import Sweep

TIMEOUT_EXIT = 124
EOF_GRACE_SEC = 0.1  # after the command exits, how long to wait for background holders of stdout

ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIFO_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class PendingExec:
    """Bookkeeping for one in-flight exec."""

    __slots__ = ("done", "err", "nspid", "out")

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int) -> None:
        self.done: asyncio.Future[int] = loop.create_future()
        self.nspid: int | None = None
        self.out = proc.CappedBuffer(cap)
        self.err = proc.CappedBuffer(cap)


class LocalExecs(Sweep):
    """exec and the server's report stream (kill_all: sweep.py); LocalSandbox holds the state."""

    spec: SandboxSpec
    slot: Slot
    cgroup: SandboxCgroup | None
    host_owner: Owner
    init_pid: int
    _init_fd: int
    _in_fd: int
    _out_fd: int
    _reading: bool
    _linebuf: bytes
    _execs: dict[str, PendingExec]
    _fds: set[int]
    _lost: str | None
    _closed: bool
    _oom_seen: int
    _joined: bool
    _loop: asyncio.AbstractEventLoop
    _ready: asyncio.Future[None]
    _our_ids: tuple[int, int]

    def _on_server_output(self) -> None:
        try:
            data = os.read(self._out_fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._server_gone()
            return
        self._linebuf += data
        *lines, self._linebuf = self._linebuf.split(b"\n")
        execs = self._execs
        for line in lines:
            parts = line.split()
            if not self._ready.done():
                if parts[:1] == [b"ready"]:
                    self._joined = parts[1:] == [b"1"]
                    self._ready.set_result(None)
            elif len(parts) == 2:
                ex = execs.get(parts[0].decode())
                if ex is not None and not ex.done.done():
                    ex.done.set_result(int(parts[1]))
            elif len(parts) == 3 and parts[0] == b"start":
                ex = execs.get(parts[1].decode())
                if ex is not None:
                    ex.nspid = int(parts[2])

    def _server_gone(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._out_fd)
        self._lost = self._lost or "the sandbox's exec server exited (sandbox lost)"
        if not self._ready.done():
            self._ready.set_exception(SandboxFailed(self._lost))
            self._ready.exception()  # retrieved: start() reports it
        for ex in self._execs.values():
            if not ex.done.done():
                ex.done.set_exception(SandboxFailed(self._lost))

    def _close_fd(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.discard(fd)
            self._loop.remove_reader(fd)
            os.close(fd)

    def _open_fifo(self, name: str, buf: proc.CappedBuffer) -> asyncio.Future[None]:
        fd = os.open(name, _FIFO_FLAGS, dir_fd=self.slot.ctl_fd)
        self._fds.add(fd)
        eof: asyncio.Future[None] = self._loop.create_future()

        def on_ready() -> None:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                buf.feed(data)
                return
            self._close_fd(fd)
            if not eof.done():
                eof.set_result(None)

        # Linux reports no hang-up on a FIFO that never had a writer, so this
        # waits for the server's subshell to open it.
        self._loop.add_reader(fd, on_ready)
        return eof

    async def _run(
        self,
        script: str,
        *,
        input: bytes | None,
        timeout: float | None,
        output_cap: int,
    ) -> tuple[int, bytes, bytes, bool, bool, str]:
        """Run `script` through the server. Returns (rc, out, err, timed_out, truncated, note)."""
        self._check()
        self._unpark()  # pid 1 starts the worker that takes this request (sweep.py)
        self._exec_seq += 1  # before the request exists: a sweep racing it sweeps again
        xid = secrets.token_hex(8)
        dfd = self.slot.ctl_fd
        ex = PendingExec(self._loop, output_cap)
        names = [f"{xid}.sh", f"{xid}.out", f"{xid}.err"]
        if input is not None:
            names.append(f"{xid}.in")
        try:
            write_new(dfd, names[0], script.encode())
            if input is not None:
                write_new(dfd, names[3], input)
            for name in names[1:3]:
                os.mkfifo(name, 0o600, dir_fd=dfd)
                if self.host_owner != self._our_ids:  # the sandbox's root opens them
                    os.chown(name, *self.host_owner, dir_fd=dfd, follow_symlinks=False)
            eofs = [self._open_fifo(names[1], ex.out), self._open_fifo(names[2], ex.err)]
        except OSError as exc:
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
            raise SandboxFailed(f"sandbox control dir failed: {exc}") from exc
        self._execs[xid] = ex
        timed_out = False
        note = ""
        src = f"{CTL}/{xid}.in" if input is not None else "/dev/null"
        try:
            try:
                os.write(self._in_fd, f"{xid} {src}\n".encode())
            except BlockingIOError:
                raise SandboxFailed("the sandbox's exec server stopped reading requests") from None
            try:
                rc = await self._wait(ex, eofs, timeout)
            except TimeoutError:
                timed_out = True
                rc = TIMEOUT_EXIT
                await self._kill_exec(ex)
                note = f"crucible: timed out after {timeout:g}s; its process tree was killed\n"
            # Background children may hold stdout open; don't wait for them (their
            # output keeps draining, discarded, until they exit or the sandbox closes).
            if not (eofs[0].done() and eofs[1].done()):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*eofs), EOF_GRACE_SEC)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise SandboxFailed(self._lost or f"sandbox exec transport failed: {exc}") from exc
        finally:
            self._execs.pop(xid, None)
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
        if rc != 0 and self.cgroup is not None:
            oom = self.cgroup.oom_kills()
            if oom > self._oom_seen:
                self._oom_seen = oom
                note += (
                    f"crucible: killed: memory limit {self.cgroup.memory_mb} MiB exceeded (OOM)\n"
                )
        truncated = ex.out.truncated or ex.err.truncated
        return rc, ex.out.getvalue(), ex.err.getvalue(), timed_out, truncated, note

    async def _wait(
        self, ex: PendingExec, eofs: list[asyncio.Future[None]], timeout: float | None
    ) -> int:
        """The exit code the server reports; 137 when the command's wrapper subshell
        was itself killed from inside (`kill -9 -1`), which no one would report."""
        loop = self._loop
        deadline = None if timeout is None else loop.time() + timeout
        both: asyncio.Future[None] = loop.create_future()

        def on_eof(_: object) -> None:
            if not both.done() and eofs[0].done() and eofs[1].done():
                both.set_result(None)

        for e in eofs:
            e.add_done_callback(on_eof)
        first: list[asyncio.Future[Any]] = [ex.done, both]
        await asyncio.wait(first, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        grace = 0.05  # the report normally trails the streams' EOF by a moment
        while not ex.done.done():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError
            if not both.done():  # only a timeout ends the first wait without either
                raise TimeoutError
            await asyncio.wait([ex.done], timeout=grace if left is None else min(grace, left))  # type: ignore[type-var]
            if ex.done.done():
                break
            self._on_server_output()  # a report already in the pipe
            if ex.done.done() or ex.nspid is None:
                continue
            if not self._wrapper_alive(ex.nspid):
                self._on_server_output()
                if not ex.done.done():
                    ex.done.set_result(128 + signal.SIGKILL)
            grace = 0.2
        return ex.done.result()

    def _wrapper_alive(self, nspid: int) -> bool:
        host = self._host_pid(nspid)
        return host is not None and proc.state_of(host) not in (None, "Z")

    def _host_pid(self, nspid: int) -> int | None:
        ns = proc.pid_ns_of(self.init_pid)
        for pid in self._candidates():
            nsp = proc.nspid_of(pid)
            if nsp and nsp[-1] == nspid and proc.pid_ns_of(pid) == ns:
                return pid
        return None

    async def _kill_exec(self, ex: PendingExec) -> None:
        if ex.nspid is None:  # the start line may still be in flight
            with contextlib.suppress(TimeoutError, SandboxFailed):
                await asyncio.wait_for(asyncio.shield(ex.done), 0.05)
        if ex.nspid is None:
            return
        host = self._host_pid(ex.nspid)
        if host is not None and host != self.init_pid:
            proc.kill_tree(host, self._candidates)

    def _script(self, command: str | list[str], cwd: str | None, env: dict[str, str] | None) -> str:
        lines = []
        for key, value in (env or {}).items():
            if not ENV_KEY.match(key):
                raise ValueError(f"invalid environment variable name {key!r}")
            lines.append(f"export {key}={shlex.quote(value)}")
        lines.append(f"cd -- {shlex.quote(cwd or self.spec.workdir)} || exit 1")
        lines.append(command if isinstance(command, str) else shlex.join(command))
        return "\n".join(lines) + "\n"

    async def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | str | None = None,
        user: str | None = None,  # only root is mapped in the user namespace; see capabilities()
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        t0 = time.monotonic()
        data = input.encode() if isinstance(input, str) else input
        rc, out, err, timed_out, truncated, note = await self._run(
            self._script(command, cwd, env), input=data, timeout=timeout, output_cap=output_cap
        )
        stderr = proc.decode(err)
        if note:
            stderr = (
                stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + note
            ).rstrip("\n")
        return ExecResult(
            exit_code=rc,
            stdout=proc.decode(out),
            stderr=stderr,
            timed_out=timed_out,
            truncated=truncated,
            duration_sec=time.monotonic() - t0,
        )
