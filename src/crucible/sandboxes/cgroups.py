"""Per-sandbox resource limits through cgroups (v1 or v2), and how to detect
which are usable here. Without writable cgroups the local provider falls back
to rlimits; `describe()` says which and why (shown by `crucible doctor`)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_NAME = "crucible"
V1_CONTROLLERS = ("memory", "pids", "cpu")
CFS_PERIOD_US = 100_000


@dataclass
class CgroupSupport:
    version: str  # "v1", "v2" or "none"
    controllers: list[str] = field(default_factory=list)  # writable ones
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.version != "none" and {"memory", "pids"} <= set(self.controllers)


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def detect() -> CgroupSupport:
    if not CGROUP_ROOT.is_dir():
        return CgroupSupport("none", reason=f"{CGROUP_ROOT} is absent")
    v1: list[str] = [
        c
        for c in V1_CONTROLLERS
        if _writable_dir(CGROUP_ROOT / c) and (CGROUP_ROOT / c / "cgroup.procs").exists()
    ]
    if v1:
        sup = CgroupSupport("v1", v1)
        if not sup.usable:
            missing = sorted({"memory", "pids"} - set(v1))
            sup.reason = f"cgroup v1 controllers not writable: {', '.join(missing)}"
        else:
            sup.reason = f"cgroup v1 hierarchies writable under {CGROUP_ROOT}"
        return sup
    ctl = CGROUP_ROOT / "cgroup.controllers"
    if ctl.exists():
        avail = ctl.read_text().split()
        if not os.access(CGROUP_ROOT / "cgroup.subtree_control", os.W_OK):
            return CgroupSupport(
                "none", reason="cgroup v2 is mounted but not writable (not root, or no delegation)"
            )
        have: list[str] = [c for c in ("memory", "pids", "cpu") if c in avail]
        sup = CgroupSupport("v2", have)
        sup.reason = (
            f"cgroup v2 writable at {CGROUP_ROOT}"
            if sup.usable
            else "cgroup v2 lacks the memory or pids controller"
        )
        return sup
    return CgroupSupport("none", reason="no cgroup v1 hierarchies or v2 mount found")


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class SandboxCgroup:
    """One sandbox's cgroups: created with limits, processes added, removed on close."""

    def __init__(self, support: CgroupSupport, name: str) -> None:
        self.support = support
        self.name = name
        if support.version == "v1":
            self.dirs = {c: CGROUP_ROOT / c / GROUP_NAME / name for c in support.controllers}
        else:
            self.dirs = {"unified": CGROUP_ROOT / GROUP_NAME / name}
        self.memory_mb = 0

    @property
    def paths(self) -> list[str]:
        return [str(p) for p in self.dirs.values()]

    def create(self, *, memory_mb: int, pids: int, cpus: float) -> None:
        self.memory_mb = memory_mb
        mem = str(memory_mb * 1024 * 1024)
        if self.support.version == "v1":
            for c, d in self.dirs.items():
                d.mkdir(parents=True, exist_ok=True)
                if c == "memory":
                    _write(d / "memory.limit_in_bytes", mem)
                    sw = d / "memory.memsw.limit_in_bytes"
                    if sw.exists():  # no swap escape: mem+swap capped at the same figure
                        _write(sw, mem)
                elif c == "pids":
                    _write(d / "pids.max", str(pids))
                elif c == "cpu" and cpus > 0:
                    _write(d / "cpu.cfs_period_us", str(CFS_PERIOD_US))
                    _write(d / "cpu.cfs_quota_us", str(max(1000, int(cpus * CFS_PERIOD_US))))
            return
        parent = CGROUP_ROOT / GROUP_NAME
        ctrls = " ".join(f"+{c}" for c in self.support.controllers)
        if not parent.exists():
            parent.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            _write(CGROUP_ROOT / "cgroup.subtree_control", ctrls)
        with contextlib.suppress(OSError):
            _write(parent / "cgroup.subtree_control", ctrls)
        d = self.dirs["unified"]
        d.mkdir(exist_ok=True)
        _write(d / "memory.max", mem)
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(pids))
        if "cpu" in self.support.controllers and cpus > 0:
            _write(d / "cpu.max", f"{max(1000, int(cpus * CFS_PERIOD_US))} {CFS_PERIOD_US}")

    def add(self, pid: int) -> None:
        for d in self.dirs.values():
            _write(d / "cgroup.procs", str(pid))

    def procs(self) -> list[int]:
        d = self.dirs.get("pids") or self.dirs.get("unified") or next(iter(self.dirs.values()))
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer took in this group so far."""
        if self.support.version == "v1":
            d = self.dirs.get("memory")
            if d is None:
                return 0
            text = _safe_read(d / "memory.oom_control")
            key = "oom_kill"
        else:
            text = _safe_read(self.dirs["unified"] / "memory.events")
            key = "oom_kill"
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
        return 0

    def try_remove(self) -> bool:
        """One pass of rmdir over the groups; True when all are gone (EBUSY while procs exit)."""
        left = False
        for d in self.dirs.values():
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left = True
        return not left


def _safe_read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def remove_paths(paths: list[str]) -> None:
    """Remove cgroup directories recorded by a sandbox that is gone (cleanup)."""
    for p in paths:
        with contextlib.suppress(OSError):
            for pid in Path(p, "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
    deadline = time.monotonic() + 2.0
    for p in paths:
        while True:
            try:
                os.rmdir(p)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
