"""Processes on this host, known by more than their pid.

A pid is reused once its process is gone: the index's pid of a job may name an unrelated
process by the time someone reads it. So the runner's start time is recorded beside its
pid (`process_start`: the boot and the clock tick it started at, from /proc/PID/stat),
and a process is the job's only when both match. Without procfs nothing can be told
apart, and nothing is signalled.
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as dead)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): kill(0) is all we can know
    # The state follows the parenthesised command name, which may contain spaces.
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else ""
    return state not in ("Z", "X")


def pid_cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def process_start(pid: int | None) -> str | None:
    """`BOOT_ID:TICKS`, when process `pid` started (field 22 of /proc/PID/stat, clock
    ticks since boot) and on which boot: with the pid, it names one process for good.
    None without procfs, or when there is no such process."""
    if not pid or pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # Fields after the parenthesised name (which may hold spaces or parentheses) start
    # at field 3 (the state): the start time, field 22, is the 20th of them.
    fields = stat.rsplit(")", 1)[-1].split()
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def same_process(pid: int | None, start: str | None) -> bool:
    """Whether `pid` still names the process that started at `start` (a process_start)."""
    return start is not None and pid_alive(pid) and process_start(pid) == start
