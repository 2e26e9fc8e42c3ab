"""Never host root: which host uid a `local` sandbox runs as, and how we get there.

bwrap maps the sandbox's uid 0 to the uid that *runs bwrap*. Run by root, that
is the host's uid 0: writes to /proc/sys are checked against it (an agent once
set kernel.core_pattern to a pipe into its sandbox and had the kernel run its
script as root on the host). So when crucible runs as root, each pool slot gets
its own unprivileged host uid and gid from a high range, and bwrap is started
under them with no supplementary groups: the sandbox's root is then that uid on
the host, with no capability over anything the host owns.

How: the spawning thread alone switches its credentials with raw setgroups /
setresgid / setresuid syscalls (glibc's wrappers would switch every thread of
the process), posix_spawn()s bwrap, and switches back. The saved uid stays 0
meanwhile, so the way back is always allowed; the child's exec makes it drop
every capability. No extra exec (`setpriv` costs ~1 ms of CPU per sandbox) and
no fork of a large Python process. Where the syscall numbers are unknown we
fall back to `setpriv`.

Image mode (imagemode.py) runs every image-backed sandbox as one uid instead,
IMAGE_UID: an image tree is unpacked once, for every trial, and given to the uid
its sandboxes' root stands for, so that uid cannot change per slot or process.

Files the host creates inside a sandbox (uploads, write_file) are made with
the thread's fsuid/fsgid set to the slot's owner: they belong to the sandbox's
root, and a tmpfs mounted in the sandbox's user namespace refuses files owned
by anyone it does not map (EOVERFLOW) anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import shutil
import signal
from collections.abc import Iterator
from typing import Any

# Host uids/gids for sandboxes when crucible runs as root: inside systemd's
# container range (524288-1879048191), far above login users and the usual
# /etc/subuid blocks. A slot's uid is BASE + (pid << 8 | slot number), so two
# live crucible processes never share one; a process's 257th slot reuses its first uid.
UID_BASE = 0x2000_0000
SLOT_BITS = 8
PID_BITS = 22  # PID_MAX_LIMIT is 2**22

# Image mode (imagemode.py): every image-backed sandbox of the machine runs as this one
# uid, just below the slots' range. An image tree is unpacked once and given to the uid
# its sandboxes' root stands for (images.RootfsCache), so that uid cannot be per slot or
# per process; each sandbox still has its own user, pid and mount namespaces.
IMAGE_UID = UID_BASE - 1

# (setgroups, setresuid, setresgid); the generic table (aarch64, riscv64) shares numbers
_SYSCALLS = {
    "x86_64": (116, 117, 119),
    "aarch64": (159, 147, 149),
    "riscv64": (159, 147, 149),
}

Owner = tuple[int, int]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def privileged() -> bool:
    """True when bwrap would otherwise map the sandbox's root to the host's uid 0."""
    return os.geteuid() == 0


def slot_owner(seq: int) -> Owner:
    """The host (uid, gid) the sandbox of slot number `seq` runs as."""
    if not privileged():
        return os.geteuid(), os.getegid()
    pid = os.getpid() & ((1 << PID_BITS) - 1)
    uid = UID_BASE + ((pid << SLOT_BITS) | (seq & ((1 << SLOT_BITS) - 1)))
    return uid, uid


def image_uid() -> int | None:
    """The host uid image-mode sandboxes run as and own their trees (None: ours)."""
    return IMAGE_UID if privileged() else None


def _mapped(path: str, lo: int, hi: int) -> bool:
    try:
        with open(path) as f:
            rows = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= lo and hi < inside + count for inside, _, count in rows)


def check_range() -> str | None:
    """Why this machine cannot drop root for sandboxes (None when it can)."""
    if not privileged():
        return None
    hi = UID_BASE + (1 << (PID_BITS + SLOT_BITS)) - 1
    if not (
        _mapped("/proc/self/uid_map", IMAGE_UID, hi)
        and _mapped("/proc/self/gid_map", IMAGE_UID, hi)
    ):
        return (
            f"crucible runs as root, but host uids {IMAGE_UID}-{hi} are not mapped in its "
            "user namespace, so sandboxes cannot run under an unprivileged uid"
        )
    if platform.machine() not in _SYSCALLS and not shutil.which("setpriv"):
        return f"no per-thread credential switch on {platform.machine()} and no `setpriv`"
    return None


def mechanism() -> str:
    """Words for `crucible doctor` and capabilities()."""
    if not privileged():
        return f"bwrap runs as the invoking user (uid {os.geteuid()}), which is not root"
    how = (
        "per-thread credential switch around posix_spawn"
        if platform.machine() in _SYSCALLS
        else "setpriv"
    )
    hi = UID_BASE + (1 << (PID_BITS + SLOT_BITS)) - 1
    return (
        f"crucible runs as root: each slot's bwrap runs as its own unprivileged host uid/gid "
        f"in {UID_BASE}-{hi} (image mode: uid {IMAGE_UID}) with no supplementary groups ({how})"
    )


def _syscall(nr: int, *args: int) -> None:
    if _libc().syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def _thread_credentials(owner: Owner) -> Iterator[None]:
    """This thread only runs as `owner` (real and effective; saved stays 0)."""
    nr_groups, nr_resuid, nr_resgid = _SYSCALLS[platform.machine()]
    groups = os.getgroups()
    uid, gid = owner
    _syscall(nr_groups, 0, 0)
    try:
        _syscall(nr_resgid, gid, gid, -1)
        try:
            _syscall(nr_resuid, uid, uid, -1)
            try:
                yield
            finally:
                _syscall(nr_resuid, 0, 0, -1)
        finally:
            _syscall(nr_resgid, 0, 0, -1)
    finally:
        arr = (ctypes.c_uint * max(1, len(groups)))(*groups)
        if _libc().syscall(ctypes.c_long(nr_groups), ctypes.c_long(len(groups)), arr) != 0:
            raise OSError(ctypes.get_errno(), "could not restore supplementary groups")


@contextlib.contextmanager
def acting_as(owner: Owner) -> Iterator[None]:
    """This thread acts as `owner` (real and effective uid and gid) where we are root and
    can switch one thread: what the kernel allows a process of the same uid (another's
    rlimits) without a capability root may lack here (CAP_SYS_RESOURCE)."""
    if os.geteuid() == 0 and (0, os.getegid()) != owner and platform.machine() in _SYSCALLS:
        with _thread_credentials(owner):
            yield
    else:
        yield


def no_stray_fds(keep: frozenset[int] = frozenset()) -> None:
    """No descriptor this process inherited (its parent's pipes and sockets: Python makes
    its own close-on-exec) reaches what it spawns: every one above 2 that is not in `keep`
    is made close-on-exec first. posix_spawn passes on each inheritable one, and neither
    bwrap nor pid 1 closes them, so the agent could write to a pipe of the operator's
    shell, or signal through it. One close_range(CLOSE_RANGE_CLOEXEC) call where the kernel
    has it (5.11) and nothing is kept; else each fd in /proc/self/fd."""
    if not keep and _cloexec_from(3):
        return
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)


_CLOSE_RANGE = {"x86_64": 436, "aarch64": 436}.get(platform.machine())
_CLOSE_RANGE_CLOEXEC = 4
_close_range_works = True


def _cloexec_from(first: int) -> bool:
    """Every fd from `first` up made close-on-exec in one call; False where it cannot be."""
    global _close_range_works
    if _CLOSE_RANGE is None or not _close_range_works:
        return False
    rc = _libc().syscall(
        ctypes.c_long(_CLOSE_RANGE),
        ctypes.c_uint(first),
        ctypes.c_uint(0xFFFFFFFF),
        ctypes.c_uint(_CLOSE_RANGE_CLOEXEC),
    )
    if rc != 0:
        _close_range_works = False  # ENOSYS or EINVAL: an older kernel
        return False
    return True


def spawn(
    path: str,
    argv: list[str],
    owner: Owner,
    file_actions: list[tuple[int, int, int]] | None = None,
) -> int:
    """posix_spawn `path` as `owner` (plainly when we are not root). Returns its pid."""
    # Python ignores SIGPIPE and SIGXFSZ; ignored signals survive exec, so without this
    # every process of a sandbox would too (`yes | head` then never ends by SIGPIPE).
    opts: dict[str, Any] = {
        "file_actions": file_actions or [],
        "setsigdef": (signal.SIGPIPE, signal.SIGXFSZ),
    }
    if (os.geteuid(), os.getegid()) == owner:
        return os.posix_spawn(path, argv, {}, **opts)
    if platform.machine() in _SYSCALLS:
        with _thread_credentials(owner):
            return os.posix_spawn(path, argv, {}, **opts)
    setpriv = shutil.which("setpriv") or "setpriv"
    wrap = [setpriv, "--reuid", str(owner[0]), "--regid", str(owner[1]), "--clear-groups", "--"]
    return os.posix_spawn(setpriv, [*wrap, path, *argv[1:]], {}, **opts)


@contextlib.contextmanager
def files_as(owner: Owner) -> Iterator[None]:
    """Files this thread creates meanwhile belong to `owner` (setfsuid is per thread)."""
    if os.geteuid() == owner[0] and os.getegid() == owner[1]:
        yield
        return
    libc = _libc()
    libc.setfsgid(owner[1])
    libc.setfsuid(owner[0])
    try:
        if libc.setfsuid(-1) != owner[0] or libc.setfsgid(-1) != owner[1]:
            raise PermissionError("could not take the sandbox owner's fsuid")
        yield
    finally:
        libc.setfsuid(os.geteuid())
        libc.setfsgid(os.getegid())
