"""What pid 1 of a `local` sandbox hands on to each worker it starts, and so to every
exec (the grading's too), that a process of the sandbox's uid may change on it from
inside: its rlimits (prlimit), nice (setpriority, by process, group or user), I/O
priority (ioprio_set, likewise), CPU affinity and scheduling policy. An agent that set
`--nofile=3`, `--cpu=0` or an address-space limit on pid 1 broke every later exec, the
grading's included, and a nice of 19 or the idle I/O class slowed it.

Settings.of reads them as pid 1 starts, before any exec; the sweep (sweep.py) puts them
back while it holds pid 1 stopped, so the worker pid 1 starts next has none of the
agent's. Limits are read and written as pid 1's own host uid (hostuid.acting_as: root may
lack CAP_SYS_RESOURCE, as on some VMs); a hard limit the agent lowered can then not be
raised again, and stays lowered: grading that breaks for it is the attempt's doing, a
counted verifier_failed in a live sandbox (engine/grading/blame.py), never an excluded
error. nice, I/O priority, affinity and policy are put back as root (CAP_SYS_NICE).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import resource
from dataclasses import dataclass

from crucible.sandboxes.local.hostuid import Owner, acting_as
from crucible.sandboxes.local.hostuid import _libc as hostuid_libc

# ioprio_get / ioprio_set syscall numbers
_IOPRIO = {"x86_64": (252, 251), "aarch64": (31, 30)}.get(platform.machine())
_WHO_PROCESS = 1
# each once (RLIMIT_OFILE is RLIMIT_NOFILE under another name)
_LIMITS = tuple(sorted({getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")}))


@dataclass(frozen=True)
class Settings:
    owner: Owner
    limits: tuple[tuple[int, tuple[int, int]], ...]
    nice: int
    ioprio: int | None
    affinity: frozenset[int]
    policy: int
    priority: int

    @classmethod
    def of(cls, pid: int, owner: Owner) -> Settings | None:
        """`pid`'s (it runs as host `owner`), or None where they cannot be read (then
        none is put back)."""
        try:
            with acting_as(owner):
                limits = tuple((r, resource.prlimit(pid, r)) for r in _LIMITS)
            return cls(
                owner=owner,
                limits=limits,
                nice=os.getpriority(os.PRIO_PROCESS, pid),
                ioprio=_ioprio_get(pid),
                affinity=frozenset(os.sched_getaffinity(pid)),
                policy=os.sched_getscheduler(pid),
                priority=os.sched_getparam(pid).sched_priority,
            )
        except OSError:
            return None

    def restore(self, pid: int) -> None:
        """Put them back on `pid` (stopped: nothing of it runs meanwhile); what the
        kernel refuses (a hard limit without root) is left."""
        with contextlib.suppress(OSError), acting_as(self.owner):
            for r, (soft, hard) in self.limits:
                with contextlib.suppress(OSError, ValueError):
                    now = resource.prlimit(pid, r)
                    if now != (soft, hard):
                        resource.prlimit(pid, r, (soft, hard))
                        continue
                with contextlib.suppress(OSError, ValueError):  # the hard one stays
                    _, cur = resource.prlimit(pid, r)
                    if cur != resource.RLIM_INFINITY and (soft > cur or soft < 0):
                        soft = cur
                    resource.prlimit(pid, r, (soft, cur))
        with contextlib.suppress(OSError):
            if os.getpriority(os.PRIO_PROCESS, pid) != self.nice:
                os.setpriority(os.PRIO_PROCESS, pid, self.nice)
        if self.ioprio is not None and _ioprio_get(pid) != self.ioprio:
            _ioprio_set(pid, self.ioprio)
        with contextlib.suppress(OSError):
            if frozenset(os.sched_getaffinity(pid)) != self.affinity:
                os.sched_setaffinity(pid, self.affinity)
        with contextlib.suppress(OSError):
            if (os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority) != (
                self.policy,
                self.priority,
            ):
                os.sched_setscheduler(pid, self.policy, os.sched_param(self.priority))


_LIBC = functools.cache(hostuid_libc)


def _ioprio_get(pid: int) -> int | None:
    if _IOPRIO is None:
        return None
    got = int(_LIBC().syscall(_IOPRIO[0], _WHO_PROCESS, pid))
    return got if got >= 0 else None


def _ioprio_set(pid: int, value: int) -> None:
    if _IOPRIO is not None:
        _LIBC().syscall(_IOPRIO[1], _WHO_PROCESS, pid, value)
