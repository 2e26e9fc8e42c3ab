"""The memory limit of a one-shot run (oneshot/run.py) where there are no cgroups: a watchdog
on the host that sums the proportional set size (Pss) of every process in the run's
tree and ends the run past its `memory_mb`.

Why: without cgroups the run's only memory limit was `ulimit -v`, which is per process:
a run of `pids` processes could hold `pids` times `memory_mb` (measured: 4 processes of
400 MB held 1.6 GB under memory_mb = 512). Pss counts a page shared by n processes as
1/n in each, so forked or exec'd workers that share libraries are not charged twice.
The sum is sampled (every INTERVAL seconds), so a run may pass its limit briefly before
it is ended: a bound on what the host gives it, not an exact one (cgroups are that).
Every process of the run descends from its sandbox's pid 1 (bwrap's init, `root`):
orphans are reparented to it inside its pid namespace.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

INTERVAL = 0.1
HAS_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children(pid: int) -> list[int]:
    """`pid`'s children, from its threads' `children` files (CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        pass  # gone meanwhile
    return out


def _parent_table() -> dict[int, list[int]]:
    """Every process's children, from one scan of every process's parent."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _tree(root: int) -> list[int]:
    """`root` and its descendants: only the run's processes are read where the kernel
    lists children; else from one scan of every process's parent."""
    table = None if HAS_CHILDREN else _parent_table()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children(pid) if table is None else table.get(pid, [])
    return out


def _pss(pid: int) -> int:
    """Bytes of `pid`'s proportional set size (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_pss(root: int) -> int:
    return sum(_pss(p) for p in _tree(root))


async def watch_memory(root: int, limit: int, on_over: Callable[[], None]) -> None:
    """Call `on_over` once the run's tree holds more than `limit` bytes; runs until
    cancelled (the caller cancels it when the run ends)."""
    while True:
        if await asyncio.to_thread(tree_pss, root) > limit:
            on_over()
            return
        await asyncio.sleep(INTERVAL)
