"""Plumbing of a one-shot sandbox's run (oneshot/run.py): its pipes read as they fill, within
caps; its stdin fed and closed; the fds bwrap copies files from; waiting on pidfds."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import resource
from collections.abc import Callable
from pathlib import Path

from crucible.errors import SandboxFailed
from crucible.sandboxes.proc import CappedBuffer

DRAIN_TIMEOUT = 5.0  # after the exit, for the pipes' last bytes (every writer is dead)


class Reader:
    """A pipe read as it fills, into a CappedBuffer; `on_over` once past `kill_at`."""

    def __init__(self, fd: int, cap: int, kill_at: int, on_over: Callable[[Reader], None]) -> None:
        self.fd, self.buf, self.kill_at, self.on_over = fd, CappedBuffer(cap), kill_at, on_over
        self.total = 0
        self.eof = asyncio.get_running_loop().create_future()
        os.set_blocking(fd, False)
        asyncio.get_running_loop().add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self.total += len(data)
        self.buf.feed(data)
        if self.total > self.kill_at:
            self.on_over(self)

    def close(self) -> None:
        if not self.eof.done():
            asyncio.get_running_loop().remove_reader(self.fd)
            os.close(self.fd)
            self.eof.set_result(None)


def room_for_fds() -> None:
    """The soft fd limit raised to the hard one. A run holds an fd per submitted file
    until bwrap has copied it (a folder submission may have 2,000): under a soft limit
    of 1,024 the open or dup failed halfway, a crash (0) or a sandbox_failed (left out
    of the mean) decided by the attempt's file count, never by crucible."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):  # above the kernel's nr_open
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def high_fd(fd: int, opened: list[int]) -> int:
    """`fd` moved to 10 or above, still close-on-exec (the old number is closed)."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    opened.append(new)
    os.close(fd)
    opened.remove(fd)
    return new


def feed(fd: int, data: bytes) -> None:
    """The command's stdin, then EOF (it may never read it: the pipe then breaks)."""
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError:
        pass
    finally:
        os.close(fd)


async def drain(readers: list[Reader]) -> None:
    """The pipes to EOF: every writer is dead once bwrap's pid 1 is (bounded anyway)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(r.eof for r in readers)), DRAIN_TIMEOUT)


async def readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await done
    finally:
        loop.remove_reader(fd)


def source_fd(source: Path | bytes) -> int:
    """An fd bwrap copies a file from: the host file (no link followed), or a memfd."""
    if isinstance(source, bytes):
        fd = os.memfd_create("oneshot-file", os.MFD_CLOEXEC)
        view = memoryview(source)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
    try:
        return os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxFailed(f"io sandbox: cannot read {source}: {exc}") from exc
