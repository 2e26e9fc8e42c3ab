"""Collecting a folder the host can open (the local sandbox's root, a staging copy).

The walk holds a directory fd at each level and opens every child relative to
it with O_NOFOLLOW, so no link is followed wherever it points (`l1 -> .`,
`l2 -> l1/../../..`, /etc/passwd): links are recorded as text. A regular file
is opened O_NOFOLLOW|O_NONBLOCK and checked S_ISREG on the fd itself, so a
swap for a fifo or a device between the listing and the open is seen, and
such a file is never read. A folder is listed lazily and only up to its cap.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from crucible.sandboxes.collect.sink import Full, Sink, copy_fd, entry_type, host_name_ok

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Swapped for a link, a fifo or nothing between the listing and the open; or
# not ours to read (crucible not running as root): skipped and noted, never fatal.
_SWAPPED = (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.ENOENT, errno.EACCES, errno.EPERM)


def is_empty(dir_fd: int) -> bool:
    with os.scandir(dir_fd) as it:
        return next(it, None) is None


def is_small(dir_fd: int, entries: int, nbytes: int) -> bool:
    """Only regular files there (no folder, no link), at most `entries` and `nbytes` in
    all: cheap to collect on the spot. A guess, not a limit (the sink's caps are)."""
    total = 0
    with os.scandir(dir_fd) as it:
        for n, entry in enumerate(it):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return False
            total += st.st_size
            if n >= entries or total > nbytes or not stat.S_ISREG(st.st_mode):
                return False
    return True


def collect_tree(src_fd: int, sink: Sink) -> None:
    """Copy the folder open at `src_fd` into the sink. Owns (and closes) src_fd."""
    try:
        _walk(src_fd, sink, (), sink.root)
    except Full:
        pass
    finally:
        os.close(src_fd)
        sink.close()


def collect_host_dir(path: Path, sink: Sink) -> None:
    """The same for a folder on the host (a provider that could only download a copy)."""
    collect_tree(os.open(path, _DIR), sink)


def _walk(sfd: int, sink: Sink, rel: tuple[str, ...], host: Callable[[], int]) -> None:
    with os.scandir(sfd) as it:
        for entry in it:
            name = entry.name
            path = (*rel, name)
            verdict = sink.take_entry(path)
            if verdict == "full":
                break  # never list the rest of a huge folder
            if verdict == "skip":
                continue
            try:
                st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            kind = entry_type(st.st_mode)
            if not host_name_ok(name):
                sink.note(path, kind, "a name the host cannot hold: skipped", size=st.st_size)
            elif kind == "dir":
                _dir(sfd, sink, path, host)
            elif kind == "file":
                _file(sfd, sink, path, host, st.st_size)
            elif kind == "symlink":
                target = ""
                with contextlib.suppress(OSError):
                    target = os.readlink(name, dir_fd=sfd)
                sink.note(path, kind, "a link: recorded, not followed", target=target)
            else:
                sink.note(path, kind, "not a regular file: not read", size=st.st_size)


def _dir(sfd: int, sink: Sink, path: tuple[str, ...], host: Callable[[], int]) -> None:
    try:
        sub = os.open(path[-1], _DIR, dir_fd=sfd)
    except OSError as exc:
        if exc.errno not in _SWAPPED:
            raise
        sink.note(path, "dir", f"could not be opened ({errno.errorcode[exc.errno]}): skipped")
        return
    try:
        hsub = sink.subdir(host(), path[-1])
        try:
            _walk(sub, sink, path, lambda: hsub)
        finally:
            os.close(hsub)
    finally:
        os.close(sub)


def _file(sfd: int, sink: Sink, path: tuple[str, ...], host: Callable[[], int], size: int) -> None:
    try:
        fd = os.open(path[-1], _FILE, dir_fd=sfd)
    except OSError as exc:
        if exc.errno not in _SWAPPED:
            raise
        why = errno.errorcode[exc.errno]
        sink.note(path, "file", f"could not be opened ({why}): skipped", size=size)
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after the listing: never read it
            sink.note(path, entry_type(st.st_mode), "changed type while collected: not read")
            return
        sink.write_file(
            host(),
            path,
            st.st_size,
            bool(st.st_mode & 0o111),
            lambda out, n: copy_fd(fd, out, n),
        )
    finally:
        os.close(fd)
