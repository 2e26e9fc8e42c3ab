"""Spawning bwrap off the event loop (cspawn.py): the loop goes on while a child waits to
exec, a thread's spawn never passes on an fd another spawn made inheritable for its own
child, and a spawn that fails still says why."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from tests.helpers.local_box import local_box

from crucible.errors import SandboxFailed
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local import cspawn
from crucible.sandboxes.local.provider import LocalProvider


async def test_the_loop_runs_while_a_spawned_child_waits_to_exec(tmp_path: Path) -> None:
    """os.posix_spawn held the GIL until the child exec'd: every thread stood still. The
    child here blocks before exec, opening a FIFO, until the event loop itself opens the
    other end; a fallback writer (5 s) frees it, marked, should the loop stand still."""
    fifo, marker = tmp_path / "fifo", tmp_path / "fallback-fired"
    os.mkfifo(fifo)
    # timing-ok: the fallback only frees a spawn that froze the loop (the regression)
    free = 'sleep 5; : > "$1"; exec 3>"$2"'  # timing-ok: as above
    fallback = await asyncio.create_subprocess_exec("sh", "-c", free, "sh", marker, fifo)
    opened = [(os.POSIX_SPAWN_OPEN, 5, str(fifo), os.O_RDONLY, 0)]  # blocks before exec

    def spawn() -> int:
        return cspawn.posix_spawn("/bin/true", ["true"], {}, file_actions=opened)

    pending = asyncio.ensure_future(cspawn.off_loop(spawn))
    try:
        while True:  # the loop opens the writing end once the child waits in its open()
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError:  # ENXIO: no reader yet
                await asyncio.sleep(0)
        assert not marker.exists(), "the event loop stood still while a child started"
        pid = await pending
        assert (await asyncio.to_thread(os.waitpid, pid, 0))[1] == 0
    finally:
        fallback.kill()
        await fallback.wait()


def test_spawn_errors_and_signal_defaults_are_os_posix_spawns(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        cspawn.posix_spawn(str(tmp_path / "absent"), ["absent"], {})
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        pid = cspawn.posix_spawn(
            "/bin/sh", ["sh", "-c", 'grep SigIgn /proc/self/status; echo "$X"'], {"X": "env ok"},
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)], setsigdef=(signal.SIGPIPE,),
        )  # fmt: skip
    finally:
        os.close(fd)
    assert os.waitpid(pid, 0)[1] == 0
    ignored, env = out.read_text().splitlines()
    assert not int(ignored.split()[1], 16) & (1 << (signal.SIGPIPE - 1))  # Python ignores it
    assert env == "env ok"


async def test_a_sandbox_never_inherits_an_fd_another_spawn_made_inheritable() -> None:
    """usernet makes slirp4netns's fds inheritable for its spawn, under cspawn.LOCK; a
    sandbox's bwrap, spawned from cspawn's thread meanwhile, must not pass them on."""
    r, w = os.pipe()
    held = threading.Event()

    def other_spawn() -> None:
        with cspawn.LOCK:  # kept inheritable (no_stray_fds clears it) for half a second
            held.set()
            for _ in range(1000):
                os.set_inheritable(r, True)
                time.sleep(0.0005)  # timing-ok: the window another spawner keeps open
            os.set_inheritable(r, False)

    t = threading.Thread(target=other_spawn)
    t.start()
    try:
        held.wait(5)
        target = os.readlink(f"/proc/self/fd/{r}")
        async with local_box("cspawn") as sb:
            res = await sb.exec(
                "for f in /proc/1/fd/* /proc/self/fd/*; do readlink $f; done", timeout=30
            )
            assert target not in res.stdout, res.stdout
            bwrap_fds = [os.readlink(f"/proc/{sb.bwrap_pid}/fd/{n}")
                         for n in os.listdir(f"/proc/{sb.bwrap_pid}/fd")]  # fmt: skip
            assert target not in bwrap_fds, bwrap_fds
    finally:
        t.join()
        os.close(r)
        os.close(w)


async def test_a_bwrap_that_cannot_start_is_a_sandbox_failure(tmp_path: Path) -> None:
    p = LocalProvider()
    await p.preflight()
    p.bwrap = lambda: str(tmp_path / "no-bwrap")  # type: ignore[method-assign]
    try:
        with pytest.raises(SandboxFailed, match="could not start bwrap"):
            await p.create(SandboxSpec(job_id="cspawn-missing"))
    finally:
        await p.aclose()
