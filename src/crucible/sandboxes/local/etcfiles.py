"""Each image-mode sandbox's own, writable /etc/hosts, /etc/resolv.conf and /etc/hostname.

Docker (and so Harbor's docker environment) gives every container its own copies of these
three files, writable by its root: an image's entrypoint may add names to /etc/hosts (the
dns-blacklisting recipe of Harbor's cookbook points blocked names at 0.0.0.0 before its
service starts), and an agent may edit them. Here they are written, before the sandbox
starts, into the sandbox's own overlay upper layer (imagemode.py): a fresh host directory
that crucible made and nothing else has touched, so nothing is followed on the way in
(every open is relative to a directory fd, O_NOFOLLOW | O_EXCL). Whatever the sandbox then
writes there stays in that layer: never the host's /etc, never the shared etc snapshot
(bwrap.etc_snapshot), never the image cache nor another sandbox's layer. A link the image
plants at one of these paths is hidden by the upper layer's plain file, never written
through.

Contents: /etc/hosts is the curated snapshot's (the host's names, as host mode shows them)
with the sandbox's hostname added; /etc/resolv.conf, with network, names slirp's DNS
forwarder (usernet.resolv_conf) as before; without network the image keeps its own (already
writable in its layer). /etc/hostname holds the UTS hostname bwrap sets.
"""

from __future__ import annotations

import os
from pathlib import Path

HOSTNAME = "sandbox"  # bwrap's --hostname (bwrap.build_argv)
ETC_FILES = ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname")
_MODE = 0o644
_LOCALHOST = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def texts(etc_dir: Path, network: bool) -> dict[str, bytes]:
    """What each of the sandbox's own /etc files starts with (name -> bytes)."""
    hosts = _read(etc_dir / "hosts")
    hosts = _LOCALHOST if hosts is None else hosts
    if hosts and not hosts.endswith(b"\n"):
        hosts += b"\n"
    out = {
        "hosts": hosts + f"127.0.1.1\t{HOSTNAME}\n".encode(),
        "hostname": f"{HOSTNAME}\n".encode(),
    }
    resolv = _read(etc_dir / "resolv.conf") if network else None
    if resolv is not None:
        out["resolv.conf"] = resolv
    return out


def _read(path: Path) -> bytes | None:
    """A file of crucible's own etc snapshot (never a link there: bwrap.etc_snapshot)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def write_own(upper: Path, files: dict[str, bytes], owner: int | None, etc_mode: int) -> None:
    """`files` into upper/etc/, made here (the upper layer is fresh and crucible's): a
    folder of mode `etc_mode` (the image's /etc's: overlayfs shows the upper folder's), each
    file 0644, all owned by `owner` (the host uid of the sandbox's one mapped uid) when given."""
    root = os.open(upper, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.mkdir("etc", etc_mode & 0o7777, dir_fd=root)
        etc = os.open(
            "etc", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root
        )
    finally:
        os.close(root)
    try:
        os.fchmod(etc, etc_mode & 0o7777)  # the umask may have cut it
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for name, data in files.items():
            fd = os.open(name, flags, _MODE, dir_fd=etc)
            try:
                os.write(fd, data)
                os.fchmod(fd, _MODE)
                if owner is not None:
                    os.fchown(fd, owner, owner)
            finally:
                os.close(fd)
        if owner is not None:
            os.fchown(etc, owner, owner)
    finally:
        os.close(etc)
