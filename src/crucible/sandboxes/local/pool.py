"""The `local` provider's pool of slots (control dirs plus cgroups) and its crash registry.

Per-sandbox host work is kept small on purpose (well under a millisecond of
our CPU): control dirs and cgroups come from a per-job pool of slots reused
across sandboxes (limits rewritten only when they change, never rmdir'd on
the hot path; removed at aclose(), when the provider is collected or the
process exits, and by cleanup()); pid 1 joins its cgroups itself through
inherited fds (cheaper than the host migrating it); and no registry file is
written: after a crash a sandbox is found by the name its bwrap process
carries as argv[0] ("crucible-sandbox:<slot>") and by its slot's cgroups,
both of which start with the job's name.

The control dir lives on the host's tmpfs and is bound read-only (FIFOs stay
writable through a read-only mount), so nothing inside can plant files in it.
Each slot has its own host owner (hostuid.py), which must be able to reach
what bwrap binds: the dirs on the way are 0711 (search, no listing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import stat
import time
from pathlib import Path

from crucible.sandboxes import proc
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local import hostuid
from crucible.sandboxes.local.cgroups import CgroupSupport, SandboxCgroup, remove_paths
from crucible.sandboxes.local.init import INIT_NAME
from crucible.sandboxes.local.usernet import UserNet

MARKER = "crucible-sandbox:"  # argv[0] of a sandbox's bwrap process, then the slot name

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_fast_dir(runtime_dir: Path) -> Path:
    """Where control dirs live: tmpfs when there is one (metadata ops on a journaled
    disk cost ~0.5 ms each, and every exec makes a handful)."""
    env = os.environ.get("CRUCIBLE_SANDBOX_FAST_DIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return (
            shm / f"crucible-sandboxes-{hashlib.sha256(str(runtime_dir).encode()).hexdigest()[:10]}"
        )
    return runtime_dir / ".fast"


def safe_name(name: str) -> str:
    return _SAFE.sub("_", name)[:80] or "_"


class Slot:
    """A reusable control dir plus cgroups; one live sandbox at a time."""

    def __init__(
        self, name: str, ctl: str, cgroup: SandboxCgroup | None, owner: hostuid.Owner
    ) -> None:
        self.name = name
        self.owner = owner  # the host uid/gid its sandboxes run as
        self.ctl = ctl  # host dir, bound read-only at CTL
        self.ctl_fd = os.open(ctl, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.cgroup = cgroup
        self.has_init = False
        self.net: UserNet | None = None  # as root: the netns its sandboxes with network share

    async def network(self) -> UserNet:
        """The slot's namespace with its route out, made on first use (UserNet.for_slot),
        made again if its slirp4netns died; its routes brought up to date."""
        if self.net is not None and not self.net.alive():
            self.net.close_sync()
            self.net = None
        if self.net is None:
            self.net = await UserNet.for_slot()
        else:
            self.net.refresh()
        return self.net

    def close_fd(self) -> None:
        if self.ctl_fd >= 0:
            os.close(self.ctl_fd)
            self.ctl_fd = -1

    def open_errlog(self) -> int:
        """bwrap's stderr, read back by bwrap_errors() when a start fails."""
        return os.open(
            self.ctl + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
        )

    def bwrap_errors(self) -> str:
        try:
            with open(self.ctl + ".err", errors="replace") as f:
                return f.read().strip()[-2000:]
        except OSError:
            return ""


def remove_slot(slot: Slot) -> None:
    """Kill what is left in a slot's cgroups, remove them and its control dir."""
    slot.close_fd()
    if slot.net is not None:
        slot.net.close_sync()
        slot.net = None
    shutil.rmtree(slot.ctl, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.unlink(slot.ctl + ".err")
    if slot.cgroup is not None:
        remove_paths(slot.cgroup.paths)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(slot.ctl))  # the job's dir, once empty


def remove_slots(slots: dict[str, Slot]) -> None:
    """A provider's pool, when the provider is collected or the process exits
    (weakref.finalize runs it then) without an aclose()."""
    for slot in list(slots.values()):
        with contextlib.suppress(Exception):
            remove_slot(slot)
    slots.clear()


class SlotPool:
    """A provider's slots: idle ones per job, and every one made, by name."""

    def __init__(self, fast_dir: Path, cgroups: CgroupSupport, sh: str) -> None:
        self.fast_dir = fast_dir
        self.cgroups = cgroups
        self.sh = sh  # pid 1's shell (init.find_sh), copied unreadable into each slot
        self._unreadable: dict[str, str] = {}  # host binary -> its 0111 copy in fast_dir
        self._token = secrets.token_hex(3)
        self._slot_seq = 0
        self._free: dict[str, list[Slot]] = {}  # per job: idle slots
        self.slots: dict[str, Slot] = {}  # every slot made, by name

    def acquire(self, spec: SandboxSpec) -> Slot:
        job = safe_name(spec.job_id)
        free = self._free.get(job)
        slot = free.pop() if free else None
        if slot is None:
            self._slot_seq += 1
            name = f"{job}.{self._token}{self._slot_seq}"
            ctl = str(self.fast_dir / job / name)
            self.fast_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
            for _ in range(3):  # a cleanup of the same job may rmdir the empty job dir meanwhile
                try:
                    os.makedirs(ctl, mode=0o711, exist_ok=True)
                    break
                except FileNotFoundError:
                    continue
            for d in (self.fast_dir, self.fast_dir / job):
                os.chmod(d, 0o711)
            os.chmod(ctl, 0o755)
            cg = SandboxCgroup(self.cgroups, name) if self.cgroups.usable else None
            slot = Slot(name, ctl, cg, hostuid.slot_owner(self._slot_seq))
            self.slots[name] = slot
            slot.has_init = self.link_unreadable(slot, self.sh, INIT_NAME)
            if cg is not None:
                try:
                    cg.create(memory_mb=spec.memory_mb, pids=spec.pids_limit, cpus=spec.cpus)
                except OSError:
                    self.drop(slot)
                    raise
            return slot
        if slot.cgroup is not None:
            try:
                slot.cgroup.set_limits(
                    memory_mb=spec.memory_mb, pids=spec.pids_limit, cpus=spec.cpus
                )
            except FileNotFoundError:  # removed under us (a cleanup): make it again
                slot.cgroup.create(memory_mb=spec.memory_mb, pids=spec.pids_limit, cpus=spec.cpus)
        return slot

    def link_unreadable(self, slot: Slot, binary: str, name: str) -> bool:
        """Hard-link an unreadable (mode 0111) copy of `binary` into the slot's control dir."""
        try:
            copy = self._unreadable.get(binary)
            if copy is None:
                with open(binary, "rb") as f:
                    data = f.read()
                digest = hashlib.sha256(data).hexdigest()[:16]
                path = self.fast_dir / f".bin-{digest}"
                if not path.exists():
                    self.fast_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
                    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(3)}")
                    tmp.write_bytes(data)
                    os.chmod(tmp, 0o111)
                    os.replace(tmp, path)
                copy = self._unreadable[binary] = str(path)
            os.link(copy, os.path.join(slot.ctl, name))
            return True
        except OSError:
            return False

    async def release(self, slot: Slot) -> None:
        """Back to the pool once empty; dropped if it cannot be emptied or was removed."""
        cg = slot.cgroup
        if cg is not None:
            delay = 0.001
            deadline = time.monotonic() + 5
            while (left := cg.procs()) and time.monotonic() < deadline:
                proc.signal_pids(left, signal.SIGKILL)  # pid 1 is gone, so these are dying
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
            if cg.procs() or not cg.exists():
                self.drop(slot)
                return
        if slot.ctl_fd < 0 or not os.path.isdir(slot.ctl):  # noqa: ASYNC240 (tmpfs stat)
            self.drop(slot)
            return
        for name in os.listdir(slot.ctl_fd):  # a failed start can leave files behind
            if name != INIT_NAME:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=slot.ctl_fd)
        self._free.setdefault(slot.name.rsplit(".", 1)[0], []).append(slot)

    def drop(self, slot: Slot) -> None:
        self.slots.pop(slot.name, None)
        for free in self._free.values():
            if slot in free:
                free.remove(slot)
        remove_slot(slot)

    def close_sync(self) -> None:
        for slot in list(self.slots.values()):
            self.drop(slot)
        self._free.clear()


def slot_of_job(slot: str, job: str | None) -> bool:
    """Whether slot name `slot` ("<job>.<token><n>") is one of `job`'s (any job's if None):
    exact, so that job "a" never takes job "a.b"'s slots."""
    return job is None or slot.rsplit(".", 1)[0] == job


def kill_marked(job: str | None) -> set[str]:
    """SIGKILL the bwrap processes of `job`'s slots (every job's if None;
    --die-with-parent takes each sandbox with its bwrap); their slot names."""
    found: set[str] = set()
    for pid in proc.all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read(512).split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if argv0.startswith(MARKER) and slot_of_job(argv0[len(MARKER) :], job):
            found.add(argv0[len(MARKER) :])
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return found


def remove_stray_cgroups(job: str | None) -> set[str]:
    """Kill what is in `job`'s slot cgroups (every job's if None), remove them, and
    return their names."""
    from crucible.sandboxes.local.cgroups import CGROUP_ROOT, GROUP_NAME, V1_CONTROLLERS

    bases = [CGROUP_ROOT / c / GROUP_NAME for c in V1_CONTROLLERS] + [CGROUP_ROOT / GROUP_NAME]
    paths: list[str] = []
    names: set[str] = set()
    for base in bases:
        if base.is_dir():
            for p in base.iterdir():
                if not ("." in p.name and slot_of_job(p.name, job)):
                    continue
                if p.is_dir() and not stat.S_ISLNK(p.lstat().st_mode):
                    paths.append(str(p))
                    names.add(p.name)
    remove_paths(paths)
    return names
