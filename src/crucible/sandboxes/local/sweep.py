"""The end of the agent phase in a live `local` sandbox (a mixin of LocalExecs): kill_all.

pid 1 is stopped (only the host can stop it) while every other process in the
sandbox's cgroup (or, without cgroups, its pid namespace) is stopped, then killed,
round after round until none is left: a fork bomb cannot outrun it, and pid 1
cannot start a new worker until the sweep is done. It stays stopped (parked) until the
next exec: nothing at all runs in the sandbox between a sweep and the next exec, and the
sweep that ends a trial costs no new worker. Killed processes are waited
for on pidfds, not polled. A thread group whose leader exited alone reads "Z" while its
other threads run: it is killed like any process. What the agent set on pid 1 (rlimits,
nice, I/O priority, affinity, policy: pid1.py) is put back while pid 1 is still stopped,
before the next exec lets it go on, so the worker it starts then (the grading's) has none
of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from crucible.errors import SandboxFailed
from crucible.sandboxes import proc
from crucible.sandboxes.local import pid1
from crucible.sandboxes.local.cgroups import SandboxCgroup


class Sweep:
    cgroup: SandboxCgroup | None
    init_pid: int
    _init_fd: int
    _pid1: pid1.Settings | None = None  # pid 1's at the start, before any exec
    _execs: dict[str, Any]  # id -> PendingExec (execs.py)
    _lost: str | None
    _closed: bool
    _loop: asyncio.AbstractEventLoop
    # Execs started so far, and that count when the last kill_all swept: execs are the
    # only way a process starts in the sandbox, so with none since, a sweep is a no-op.
    _exec_seq: int = 0
    _swept_at: int = -1
    _parked = False  # pid 1 left stopped by the last sweep, until an exec needs it

    def _check(self) -> None:
        if self._closed or self._lost:
            raise SandboxFailed(self._lost or "sandbox closed")

    def _candidates(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.procs()
        ns = proc.pid_ns_of(self.init_pid)
        return proc.pids_in_ns(ns) if ns else []

    async def kill_all(self) -> None:
        self._check()
        seq = self._exec_seq
        if seq == self._swept_at:  # nothing ran since the last sweep (ends the agent
            return  # phase, then grading's own kill_all): pid 1 is still parked
        # pid 1 stays stopped while we sweep (only the host can stop it), so it
        # cannot start a new worker until everything else is gone; and after, until
        # the next exec needs one (_unpark). A trial's last sweep (before /logs/verifier
        # is collected) is then never followed by a worker nobody uses.
        self._parked = True
        try:
            deadline = time.monotonic() + 30
            again = False
            while True:
                self._signal_init(signal.SIGSTOP)
                if again:  # nothing of the agent's is left to wake it: it stops now
                    await self._init_stopped(deadline)
                await self._kill_all_but_init()
                # SIGCONT from inside wakes even a namespace's init (the kernel wakes a
                # stopped task before it drops the signal): an agent's loop of them can let
                # pid 1 run mid-sweep and fork a worker with the agent's settings. Only we
                # stop pid 1, so still stopped now means stopped throughout; else again.
                if proc.state_of(self.init_pid) in ("T", None):
                    break
                if time.monotonic() > deadline:
                    raise SandboxFailed("kill_all: pid 1 kept being woken for 30s")
                again = True
        except BaseException:
            self._unpark()
            raise
        self._check()  # the server itself survived (it always should: it is pid 1)
        self._swept_at = seq

    def _unpark(self) -> None:
        """Before an exec: what the agent set on pid 1 put back while it is still
        stopped (so the worker it starts next has none of it), then pid 1 let go on."""
        if not self._parked:
            return
        self._parked = False
        try:
            if self._pid1 is not None:
                self._pid1.restore(self.init_pid)
        finally:
            self._signal_init(signal.SIGCONT)

    async def _init_stopped(self, deadline: float) -> None:
        """Until pid 1 is stopped (a signal takes a moment): the sweep that follows then
        sees every worker it forked while the agent kept it awake."""
        delay = 0.0001
        while proc.state_of(self.init_pid) not in ("T", None) and time.monotonic() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.005)

    def _signal_init(self, sig: int) -> None:
        if self._init_fd >= 0:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._init_fd, sig)

    async def _kill_all_but_init(self) -> None:
        keep = self.init_pid
        ns = None if self.cgroup is not None else proc.pid_ns_of(self.init_pid)
        stopped: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            victims = {
                p
                for p in self._candidates()
                if p != keep and _running(p) and (ns is None or proc.pid_ns_of(p) == ns)
            }
            new = victims - stopped
            if not new:
                if not victims:
                    break
                await self._kill_and_wait(victims)
                stopped.clear()
                continue
            # Stop before killing so a fork bomb cannot outrun us.
            proc.signal_pids(new, signal.SIGSTOP)
            stopped |= new
        else:
            raise SandboxFailed("kill_all: processes kept appearing for 30s")
        for ex in self._execs.values():
            if not ex.done.done():
                ex.done.set_result(128 + signal.SIGKILL)

    async def _kill_and_wait(self, victims: set[int]) -> None:
        """SIGKILL the stopped victims and wait on pidfds for their exits (50 ms at most;
        the caller looks again): the sweep goes on the moment they are gone, no poll."""
        fds = [fd for fd in map(_pidfd, victims) if fd >= 0]
        gone = [self._loop.create_future() for _ in fds]
        try:
            proc.signal_pids(victims, signal.SIGKILL)
            for fd, fut in zip(fds, gone, strict=True):
                self._loop.add_reader(fd, _resolve, fut)
            if gone:
                await asyncio.wait(gone, timeout=0.05)
        finally:
            for fd in fds:
                self._loop.remove_reader(fd)
                os.close(fd)


def _running(pid: int) -> bool:
    """Not gone, and not a zombie unless a thread of it still runs: a leader that ended
    alone (SYS_exit in the main thread) reads "Z" while its other threads go on under its
    pid, and must be killed like any process (the signal reaches the whole group)."""
    state = proc.state_of(pid)
    if state is None:
        return False
    if state != "Z":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _pidfd(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except OSError:  # already gone
        return -1


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
