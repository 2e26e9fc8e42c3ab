"""Whether a live `local` sandbox is idle: nothing left in it but pid 1 and its worker,
as a new worker would be. Then kill_all (sweep.py) has nothing to kill, and spares the
worker rather than have pid 1 start another (an exec, twice a trial).

Nothing the agent started can pass for the worker. The worker is pid 1's child and
its stdin is the request pipe, which only pid 1, the worker and an exec's wrapper in
the moment after its fork hold (the wrapper then takes /dev/null before anything
runs): nothing inside can reopen it, as pid 1 and the worker are not dumpable.

Sparing it is as safe as a new one only if the agent left it as a new one would be.
A process of the same uid may change some things on another: its rlimits (prlimit),
nice, scheduling policy, CPU affinity, I/O priority, a raised oom_score_adj, a stop.
A new worker inherits them from pid 1 (oom_score_adj: it sets its own where it may),
so each must match pid 1's, else kill_all kills the worker as before. A stop still pending when
the agent's last process went is undone: the worker is sent SIGCONT.

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

from crucible.sandboxes import proc
from crucible.sandboxes.local.init import WORKER_OOM_ADJ

_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())  # syscall numbers
_IOPRIO_WHO_PROCESS = 1
_STAT_KEPT = (15, 16, 37, 38)  # /proc/PID/stat after the comm: priority, nice, rt_priority, policy


def spare_worker(candidates: list[int], init_pid: int, pipe: os.stat_result) -> bool:
    """True when `candidates` hold, besides `init_pid` and zombies, only its worker,
    untouched (then resumed, if a stop was pending); False: sweep as ever."""
    others = [p for p in candidates if p != init_pid and proc.state_of(p) not in (None, "Z")]
    if len(others) != 1:
        return False
    worker = others[0]
    try:
        fd = os.pidfd_open(worker)
    except OSError:
        return False
    try:
        if not (_is_worker(worker, init_pid, pipe) and _as_new(worker, init_pid)):
            return False
        if _exited(fd):  # gone while we looked: the pid may be another's now
            return False
        signal.pidfd_send_signal(fd, signal.SIGCONT)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _is_worker(pid: int, init_pid: int, pipe: os.stat_result) -> bool:
    stat = _fields(pid)
    if stat is None or stat[0] not in ("R", "S") or stat[1] != str(init_pid):
        return False
    st = os.stat(f"/proc/{pid}/fd/0")
    return (st.st_dev, st.st_ino) == (pipe.st_dev, pipe.st_ino)


def _as_new(pid: int, init_pid: int) -> bool:
    """What the agent could have changed on the worker is as pid 1 would hand it on."""
    mine, its = _fields(pid), _fields(init_pid)
    if mine is None or its is None or any(mine[i] != its[i] for i in _STAT_KEPT):
        return False
    if _read(f"/proc/{pid}/limits") != _read(f"/proc/{init_pid}/limits"):
        return False
    if os.sched_getaffinity(pid) != os.sched_getaffinity(init_pid):
        return False
    prio = _ioprio(pid)
    if prio is None or prio != _ioprio(init_pid):
        return False
    # a new worker sets its own, where the kernel lets it (not where /proc/self is
    # root's, as for a non-dumpable process in a user namespace): else it has pid 1's
    adj = _read(f"/proc/{pid}/oom_score_adj")
    return adj is not None and adj in (
        f"{WORKER_OOM_ADJ}\n",
        _read(f"/proc/{init_pid}/oom_score_adj"),
    )


def _fields(pid: int) -> list[str] | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()  # comm may hold spaces and parentheses
    return rest if len(rest) > max(_STAT_KEPT) else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


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
