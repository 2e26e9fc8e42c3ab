"""The writable places of a `local` sandbox: which tmpfs mounts it gets (the workdir's
top folder, HOME, /tmp, /logs, /tests, /solution), what is made inside them, and how big
each may grow."""

from __future__ import annotations

import os

from crucible.sandboxes.local.files import MOUNTED
from crucible.sandboxes.local.init import CTL

LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
# Writable places besides the workdir and HOME: each top-level one is a tmpfs mount.
WRITABLE = ("/tmp", "/logs", "/tests", "/solution")


def root_tmpfs_mb(storage_mb: int | None, memory_mb: int, *, cgroups: bool) -> int:
    """Size of each writable tmpfs. Its pages count against the memory limit, so
    it stops short of it: files alone must never leave the sandbox out of memory
    (the OOM killer would then have only pid 1 and the verifier to take); a
    full mount is "no space left", as a full disk would be. Without a memory
    cgroup it is the only bound on what the sandbox keeps in host RAM. (Files
    spread over several mounts can still fill the memory limit: then pid 1 is
    the one process the OOM killer spares, see LocalSandbox.start.)"""
    reserve = min(max(64, memory_mb // 4), 1024) if cgroups else 0
    cap = max(16, memory_mb - reserve)
    return min(storage_mb, cap) if storage_mb else cap


def writable_layout(workdir: str, home: str) -> tuple[list[str], list[str]]:
    """The writable tmpfs mounts (top-level dirs of the workdir, HOME, /tmp, /logs,
    /tests, /solution) and the dirs made inside them. A workdir or HOME of "/" or
    under a system dir gets no mount: the root stays read-only."""
    mounts: list[str] = []
    for path in (workdir, os.path.normpath(home) if home.startswith("/") else "", *WRITABLE):
        top = path.split("/")[1] if path.startswith("/") else ""
        if top and top not in MOUNTED and f"/{top}" != CTL and f"/{top}" not in mounts:
            mounts.append(f"/{top}")
    dirs = [
        d
        for d in (workdir, os.path.normpath(home), *LOG_DIRS)
        if d.startswith("/") and d not in mounts and "/" + d.split("/")[1] in mounts
    ]
    return mounts, dirs
