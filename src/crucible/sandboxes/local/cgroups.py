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
# v1 pids: the sandbox's pid 1 sits in the slot's group, with this many pids
# more than the limit, and every exec in its child group INNER, which has the
# limit itself: a fork bomb fills INNER and pid 1 can still fork the next exec.
INNER = "x"
PID1_HEADROOM = 16
# Likewise memory: INNER has the limit, the slot's group this much more, so
# files and processes of the execs (the agent's, the verifier's) can never push
# pid 1 into the OOM killer: a lost sandbox would be an excluded error, not a 0.
MEM_HEADROOM = 16 << 20


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
    """One pooled slot's cgroups: created once, limits rewritten only when they
    change, processes added, emptied between sandboxes, removed with the pool."""

    def __init__(self, support: CgroupSupport, name: str) -> None:
        self.support = support
        self.name = name
        if support.version == "v1":
            self.dirs = {c: CGROUP_ROOT / c / GROUP_NAME / name for c in support.controllers}
        else:
            self.dirs = {"unified": CGROUP_ROOT / GROUP_NAME / name}
        # str paths of the files touched per sandbox (pathlib costs on the hot path)
        self._procs = [str(d / "cgroup.procs") for d in self.dirs.values()]
        pids_dir = (
            self.dirs.get("pids") or self.dirs.get("unified") or next(iter(self.dirs.values()))
        )
        self._pids_procs = str(pids_dir / "cgroup.procs")
        self.inner: Path | None = None
        if support.version == "v1" and "pids" in self.dirs:
            self.inner = self.dirs["pids"] / INNER
            self._inner_procs = str(self.inner / "cgroup.procs")
        self.mem_inner: Path | None = None
        if support.version == "v1" and "memory" in self.dirs:
            self.mem_inner = self.dirs["memory"] / INNER
        mem = self.dirs.get("memory") or self.dirs.get("unified")
        if mem is None:
            self._oom_file = ""
        elif support.version == "v1":
            self._oom_file = str(mem / "memory.oom_control")
        else:
            self._oom_file = str(mem / "memory.events")
        self.memory_mb = 0
        self._limits: tuple[int, int, float] | None = None

    @property
    def paths(self) -> list[str]:
        """Every directory, children before parents (the order they can be removed in)."""
        inner = [str(p) for p in (self.inner, self.mem_inner) if p is not None]
        return inner + [str(p) for p in self.dirs.values()]

    def create(self, *, memory_mb: int, pids: int, cpus: float) -> None:
        if self.support.version == "v1":
            for d in self.dirs.values():
                d.mkdir(parents=True, exist_ok=True)
            for inner in (self.inner, self.mem_inner):
                if inner is not None:
                    inner.mkdir(exist_ok=True)
        else:
            parent = CGROUP_ROOT / GROUP_NAME
            ctrls = " ".join(f"+{c}" for c in self.support.controllers)
            if not parent.exists():
                parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):
                _write(CGROUP_ROOT / "cgroup.subtree_control", ctrls)
            with contextlib.suppress(OSError):
                _write(parent / "cgroup.subtree_control", ctrls)
            self.dirs["unified"].mkdir(exist_ok=True)
        self._limits = None
        self.set_limits(memory_mb=memory_mb, pids=pids, cpus=cpus)

    def set_limits(self, *, memory_mb: int, pids: int, cpus: float) -> None:
        """Write the limits, skipping the writes when the slot already has them."""
        want = (memory_mb, pids, cpus)
        if want == self._limits:
            return
        self._limits = None  # a failure halfway leaves the slot "unknown"
        self.memory_mb = memory_mb
        mem = str(memory_mb * 1024 * 1024)
        if self.support.version == "v1":
            for c, d in self.dirs.items():
                if c == "memory":
                    if self.mem_inner is not None:
                        _memory_limit(d, memory_mb * 1024 * 1024 + MEM_HEADROOM)
                        _memory_limit(self.mem_inner, memory_mb * 1024 * 1024)
                    else:
                        _memory_limit(d, memory_mb * 1024 * 1024)
                elif c == "pids":
                    if self.inner is not None:
                        _write(d / "pids.max", str(pids + PID1_HEADROOM))
                        _write(self.inner / "pids.max", str(pids))
                    else:
                        _write(d / "pids.max", str(pids))
                elif c == "cpu":
                    _write(d / "cpu.cfs_period_us", str(CFS_PERIOD_US))
                    quota = max(1000, int(cpus * CFS_PERIOD_US)) if cpus > 0 else -1
                    _write(d / "cpu.cfs_quota_us", f"{quota}")
        else:
            d = self.dirs["unified"]
            _write(d / "memory.max", mem)
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", str(pids))
            if "cpu" in self.support.controllers:
                cpu_max = str(max(1000, int(cpus * CFS_PERIOD_US))) if cpus > 0 else "max"
                _write(d / "cpu.max", f"{cpu_max} {CFS_PERIOD_US}")
        self._limits = want

    def self_join_files(self) -> list[str]:
        """Files a process joins these groups through by writing "0" to them itself:
        v1 `tasks` (one thread, the writer: the kernel then skips the global
        threadgroup lock, which otherwise waits for an RCU grace period). Empty
        on v2, where only a whole process moves (use add())."""
        if self.support.version != "v1":
            return []
        return [str(d / "tasks") for d in self.dirs.values()]

    def add(self, pid: int, *, inner: bool = False) -> None:
        """Move `pid` into the sandbox's groups; with `inner`, on v1 into INNER too,
        where the run's own limits are (a one-shot run's command, oneshot/run.py)."""
        paths = list(self._procs)
        if inner:
            paths += [str(p / "cgroup.procs") for p in (self.inner, self.mem_inner) if p]
        data = str(pid).encode()
        for path in paths:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def inner_join_files(self) -> list[str]:
        """The `tasks` files through which an exec's subshell moves itself into INNER."""
        return [str(p / "tasks") for p in (self.inner, self.mem_inner) if p is not None]

    def procs(self) -> list[int]:
        """Every process of the sandbox (the slot's group and INNER)."""
        pids = _read_pids(self._pids_procs)
        if self.inner is not None:
            pids += _read_pids(self._inner_procs)
        return pids

    def exists(self) -> bool:
        return all(os.path.isdir(p) for p in self.paths)

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer took in this group so far."""
        if not self._oom_file:
            return 0
        try:
            fd = os.open(self._oom_file, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            text = os.read(fd, 4096).decode()
        except OSError:
            return 0
        finally:
            os.close(fd)
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return int(parts[1]) + (self._inner_oom_kills() if self.mem_inner else 0)
        return 0

    def _inner_oom_kills(self) -> int:
        """INNER's own count (an OOM inside INNER is INNER's event, not the parent's)."""
        text = _safe_read(self.mem_inner / "memory.oom_control") if self.mem_inner else ""
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return int(parts[1])
        return 0

    def try_remove(self) -> bool:
        """One pass of rmdir over the groups; True when all are gone (EBUSY while procs exit)."""
        left = False
        for d in self.paths:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                left = True
        return not left


def _memory_limit(d: Path, nbytes: int) -> None:
    """v1 memory limit with mem+swap capped at the same figure (no swap escape)."""
    sw = d / "memory.memsw.limit_in_bytes"
    has_sw = sw.exists()
    if has_sw:  # mem+swap must stay >= mem: lift it before lowering mem
        _write(sw, "-1")
    _write(d / "memory.limit_in_bytes", str(nbytes))
    if has_sw:
        _write(sw, str(nbytes))


def _read_pids(path: str) -> list[int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return [int(x) for x in os.read(fd, 1 << 20).split()]
    except OSError:
        return []
    finally:
        os.close(fd)


def _safe_read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def remove_paths(paths: list[str]) -> None:
    """Remove cgroup directories (and their child groups) of a sandbox that is gone."""
    ordered: list[str] = []
    for p in paths:
        with contextlib.suppress(OSError):
            ordered += [e.path for e in os.scandir(p) if e.is_dir(follow_symlinks=False)]
        ordered.append(p)
    for p in ordered:
        with contextlib.suppress(OSError):
            for pid in Path(p, "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
    deadline = time.monotonic() + 2.0
    for p in ordered:
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
