"""Unpacking image tars into directories: a flattened one (a `docker export` stream) into a
rootfs, or one layer (extract_layer) into an overlay lower directory.

The tar comes from a task's image, which its author controls: no member may
land outside `dest`, whether by `..`, an absolute name, or a path through a
symlink an earlier member planted (`lib -> /etc`, then `lib/passwd`), and no
hard link may point outside. Symlinks themselves may point anywhere (a rootfs
is full of absolute ones): they are stored, never followed here. Owners,
modes and setuid bits are kept (the tree is only ever used as a sandbox's
read-only lower layer); device nodes and FIFOs are skipped (bwrap gives the
sandbox its own /dev).

A layer's OCI whiteouts become what overlayfs reads in a lower directory: `.wh.NAME` a
whiteout at NAME (a 0/0 character device, or where this process may not make one an empty
file with the `user.overlay.whiteout` xattr, its folder marked `user.overlay.opaque=x`),
`.wh..wh..opq` its folder made opaque (`user.overlay.opaque=y`; bwrap mounts with
`userxattr`). No other xattr of the tar is ever set: Python's tarfile sets none, so a
layer cannot plant overlay redirects or metacopy files of its own.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from crucible.sandboxes.streams import ChunkReader


def _inside(dest: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == dest or real.startswith(dest + os.sep)


class RealDirs:
    """Folders of one tree being unpacked known to be real, with no link on their way from
    its root: inside it until something on that way is replaced (forget()). Spares a
    realpath (an lstat per component) for every member of a big tree."""

    def __init__(self) -> None:
        self.known: set[str] = set()

    def inside(self, dest: str, path: str) -> bool:
        if path in self.known:
            return True
        real = os.path.realpath(path)
        ok = real == dest or real.startswith(dest + os.sep)
        if ok and real == path and os.path.isdir(path):
            self.known.add(path)
        return ok

    def forget(self, path: str) -> None:
        self.known = {d for d in self.known if d != path and not d.startswith(path + os.sep)}


def member_filter(
    member: tarfile.TarInfo, dest: str, dirs: RealDirs | None = None
) -> tarfile.TarInfo | None:
    """The member as it may be extracted, or None to skip it; raises on an escape."""
    name = os.path.normpath(member.name.lstrip("/"))
    if name in (".", ""):
        return None
    if name.startswith(".."):
        raise tarfile.OutsideDestinationError(member, os.path.join(dest, name))
    target = os.path.join(dest, name)
    # realpath resolves the links extracted so far: the member's parent must stay inside.
    parent = os.path.dirname(target)
    if not (dirs.inside(dest, parent) if dirs is not None else _inside(dest, parent)):
        raise tarfile.OutsideDestinationError(member, target)
    if member.ischr() or member.isblk() or member.isfifo():
        return None
    if member.islnk():
        link = os.path.normpath(member.linkname.lstrip("/"))
        if link.startswith("..") or not _inside(dest, os.path.join(dest, link)):
            raise tarfile.LinkOutsideDestinationError(member, os.path.join(dest, link))
        return member.replace(name=name, linkname=link, deep=False)
    return member.replace(name=name, deep=False)


def extract_stream(chunks: Iterable[bytes], dest: Path) -> None:
    """Extract a tar stream into the existing, empty directory `dest`."""
    root = os.path.realpath(dest)
    reader = io.BufferedReader(ChunkReader(chunks), buffer_size=1 << 20)
    dirs = RealDirs()
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        for member in tar:
            kept = member_filter(member, root, dirs)
            if kept is None:
                continue
            # A name that exists as a link is replaced, never written through.
            path = os.path.join(root, kept.name)
            if os.path.islink(path) or (os.path.isfile(path) and not kept.isdir()):
                dirs.forget(path)
                os.unlink(path)
            tar.extract(kept, root, numeric_owner=True, filter="fully_trusted")


WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "user.overlay.opaque"
WHITEOUT_XATTR = "user.overlay.whiteout"


def is_whiteout(path: str, st: os.stat_result) -> bool:
    """A whiteout of a lower directory, in either form extract_layer makes."""
    if stat.S_ISCHR(st.st_mode):
        return st.st_rdev == 0
    if not stat.S_ISREG(st.st_mode) or st.st_size:
        return False
    try:
        os.getxattr(path, WHITEOUT_XATTR, follow_symlinks=False)
    except OSError:
        return False
    return True


def _clear(path: str, dirs: RealDirs) -> None:
    """Remove what a later member replaces, never following a link."""
    dirs.forget(path)
    if _real_dir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _whiteout(path: str, dirs: RealDirs) -> None:
    _clear(path, dirs)
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    except PermissionError:  # no CAP_MKNOD: the xattr form (kernel 6.7+)
        with open(path, "xb"):
            pass
        os.setxattr(path, WHITEOUT_XATTR, b"", follow_symlinks=False)
        parent = os.path.dirname(path)
        try:
            os.getxattr(parent, OPAQUE_XATTR)
        except OSError:
            os.setxattr(parent, OPAQUE_XATTR, b"x")


def _parent_dir(root: str, name: str, dirs: RealDirs) -> str:
    """The member's folder (made when the layer lacks it), checked to stay inside."""
    parent = os.path.join(root, os.path.dirname(name))
    os.makedirs(parent, exist_ok=True)
    if not dirs.inside(root, parent) or os.path.islink(parent):
        raise tarfile.OutsideDestinationError(tarfile.TarInfo(name), parent)
    return parent


def extract_layer(fileobj: IO[bytes], dest: Path) -> None:
    """Extract one layer's tar (read to its end) into the existing, empty directory `dest`,
    its whiteouts and opaque markers made for overlayfs (see above)."""
    root = os.path.realpath(dest)
    dirs = RealDirs()
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            kept = member_filter(member, root, dirs)
            if kept is None:
                continue
            base = os.path.basename(kept.name)
            if base.startswith(WHITEOUT):
                parent = _parent_dir(root, kept.name, dirs)
                if base == OPAQUE:
                    os.setxattr(parent, OPAQUE_XATTR, b"y")
                elif not base.startswith(OPAQUE[:8]) and base[4:] not in ("", ".", ".."):
                    _whiteout(os.path.join(parent, base[4:]), dirs)
                continue  # other .wh..wh. names (aufs metadata) mean nothing here
            path = os.path.join(root, kept.name)
            if os.path.lexists(path) and not (kept.isdir() and _real_dir(path)):
                _clear(
                    path, dirs
                )  # a whiteout or a file of this layer replaced, never written through
            tar.extract(kept, root, numeric_owner=True, filter="fully_trusted")
    while fileobj.read(1 << 20):  # the tar's zero blocks: all of it is hashed
        pass
