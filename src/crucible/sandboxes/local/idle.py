"""Whether a live `local` sandbox is idle: nothing left in it but pid 1 and its worker,
as it started. Then kill_all (sweep.py) has nothing to kill, and spares the worker
rather than have pid 1 start another (an exec, twice a trial).

Nothing the agent started can pass for the worker. The worker is pid 1's child and
its stdin is the request pipe, which only pid 1, the worker and an exec's wrapper in
the moment after its fork hold (the wrapper then takes /dev/null before anything
runs): nothing inside can reopen it, as pid 1 and the worker are not dumpable.

Sparing it is as safe as a new one only if the agent left it as it started. A process
of the same uid may change some things on another, which what the worker runs next
(the grading) would inherit: its rlimits (prlimit), nice, scheduling policy, CPU
affinity, I/O priority, a stop. Each must be what pid 1 had when the sandbox became
ready (`inherited`, taken before any exec: what the worker inherited), else kill_all
kills the worker as before. A stop still pending when the agent's last process went
is undone: the worker is sent SIGCONT. (oom_score_adj is not checked: where the
kernel lets the agent write it at all, it only orders the OOM killer's choices among
the worker and what it runs, as the agent could on pid 1, which a new worker inherits.)

The check reads one moment: pid 1 and the worker alone. With no agent process left
none can appear (pid 1 starts only workers, the worker only our requests), so
whatever the agent did to the worker was done before, and is seen.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import select
import signal
from typing import NamedTuple

_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())  # syscall numbers
_IOPRIO_WHO_PROCESS = 1
_SCHED = (15, 16, 37, 38)  # /proc/PID/stat after the comm: priority, nice, rt_priority, policy


class Inherited(NamedTuple):
    """What a worker inherits from pid 1, and another process of its uid may change."""

    sched: tuple[bytes, ...]
    limits: bytes
    affinity: frozenset[int]
    ioprio: int


def inherited(pid: int) -> Inherited | None:
    """`pid`'s, or None (then no worker is ever spared)."""
    stat = _fields(pid)
    return None if stat is None else _inherited(pid, stat)


def _inherited(pid: int, stat: list[bytes]) -> Inherited | None:
    limits = _read(f"/proc/{pid}/limits")
    prio = _ioprio(pid)
    if limits is None or prio is None:
        return None
    try:
        affinity = frozenset(os.sched_getaffinity(pid))
    except OSError:
        return None
    return Inherited(tuple(stat[i] for i in _SCHED), limits, affinity, prio)


def spare_worker(
    candidates: list[int], init_pid: int, pipe: os.stat_result, start: Inherited | None
) -> bool:
    """True when `candidates` hold, besides `init_pid` and zombies, only its worker,
    as it started (`start`: pid 1's `inherited` at the start), then resumed if a stop
    was pending; False: sweep as ever."""
    if start is None:
        return False
    worker = None
    for pid in candidates:
        if pid == init_pid:
            continue
        stat = _fields(pid)
        if stat is None or stat[0] == b"Z":  # gone, or dead and not yet reaped
            continue
        if worker is not None:
            return False
        worker, wstat = pid, stat
    if worker is None or wstat[0] not in (b"R", b"S") or wstat[1] != str(init_pid).encode():
        return False
    try:
        fd = os.pidfd_open(worker)
    except OSError:
        return False
    try:
        st = os.stat(f"/proc/{worker}/fd/0")
        if (st.st_dev, st.st_ino) != (pipe.st_dev, pipe.st_ino):
            return False  # not the worker
        if _inherited(worker, wstat) != start or _exited(fd):
            return False  # changed, or gone while we looked (the pid may be another's)
        signal.pidfd_send_signal(fd, signal.SIGCONT)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _fields(pid: int) -> list[bytes] | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    rest = stat[stat.rfind(b")") + 2 :].split()  # comm may hold spaces and parentheses
    return rest if len(rest) > max(_SCHED) else None


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return None
    finally:
        os.close(fd)


def _ioprio(pid: int) -> int | None:
    if _IOPRIO_GET is None:  # an arch we have no number for: never spared
        return None
    with contextlib.suppress(OSError, AttributeError):
        got = int(_libc().syscall(_IOPRIO_GET, _IOPRIO_WHO_PROCESS, pid))
        return got if got >= 0 else None
    return None


_LIBC: list[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _exited(pidfd: int) -> bool:
    poller = select.poll()  # a pidfd turns readable when its process exits
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))
