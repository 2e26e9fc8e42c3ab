"""Serving sandbox files from the host through a directory fd on the sandbox's
root, without ever following a symlink the agent may have planted.

The root fd comes from /proc/<sandbox init>/root, opened once while the
sandbox is known to be alive (so a recycled pid can never redirect us). Every
path is walked one component at a time with O_NOFOLLOW from a held directory
fd, so a symlink (or a swap race) anywhere raises `Unsafe` and the caller falls
back to doing the work inside the sandbox, where symlinks resolve within the
sandbox's own view. Paths are plain lists of names: no pathlib on the hot path.
Copying out of a sandbox is not done here: that is a collection
(sandboxes/collect), which never makes a link on the host.

What the host creates there (dirs, files, links) is created as the sandbox's
host owner (`owner`, see hostuid.py) so that its root owns it; host sources
are still read as ourselves.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from crucible.sandboxes.local.hostuid import Owner, files_as

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Unsafe(Exception):
    """A symlink or a non-directory stands in the way: use the in-sandbox path."""


class OverBudget(Exception):
    """An inline copy grew past its budget: redo it off the event loop."""


class Budget:
    """Bytes and entries an inline (event-loop) copy may move before it gives up."""

    def __init__(self, nbytes: int | None, entries: int | None) -> None:
        self.nbytes = nbytes
        self.entries = entries

    def take(self, nbytes: int) -> None:
        if self.nbytes is None or self.entries is None:
            return
        self.nbytes -= nbytes
        self.entries -= 1
        if self.nbytes < 0 or self.entries < 0:
            raise OverBudget


UNLIMITED = Budget(None, None)


def split(path: str) -> list[str]:
    """Names of a normalised absolute path, '..' refused."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Unsafe("path contains ..")
    return parts


def _open_dir(parent_fd: int, name: str, *, create: bool, owner: Owner | None = None) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError), _owned(owner):
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        return _open_dir(parent_fd, name, create=False)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(name) from exc
        raise


def _owned(owner: Owner | None) -> contextlib.AbstractContextManager[None]:
    return files_as(owner) if owner is not None else contextlib.nullcontext()


def open_dir(
    root_fd: int, parts: list[str], *, create: bool = False, owner: Owner | None = None
) -> int:
    """A new fd on root/parts, refusing symlinks in every component."""
    fd = os.dup(root_fd)
    try:
        for name in parts:
            nfd = _open_dir(fd, name, create=create, owner=owner)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(root_fd: int, parts: list[str]) -> bytes:
    if not parts:
        raise IsADirectoryError("/")
    dfd = open_dir(root_fd, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unsafe(parts[-1]) from exc
            raise
    finally:
        os.close(dfd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise IsADirectoryError("/".join(parts))
            raise Unsafe("not a regular file")  # a FIFO would block the host
        chunks: list[bytes] = []
        while True:
            data = os.read(fd, 1 << 20)
            if not data:
                return b"".join(chunks)
            chunks.append(data)
    finally:
        os.close(fd)


def write_file(
    root_fd: int, parts: list[str], data: bytes, mode: int, owner: Owner | None = None
) -> None:
    if not parts:
        raise IsADirectoryError("/")
    dfd = open_dir(root_fd, parts[:-1], create=True, owner=owner)
    try:
        _write_at(dfd, parts[-1], data, mode, owner)
    finally:
        os.close(dfd)


def _write_at(dfd: int, name: str, data: bytes, mode: int, owner: Owner | None) -> None:
    try:
        with _owned(owner):
            fd = os.open(name, _WRITE_FLAGS, mode & 0o7777, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise Unsafe(name) from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unsafe("not a regular file")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode & 0o7777)
    finally:
        os.close(fd)


def upload_tree(
    src: str,
    root_fd: int,
    parts: list[str],
    budget: Budget = UNLIMITED,
    owner: Owner | None = None,
) -> None:
    """Copy host dir `src`'s contents into root/parts, symlinks in src kept as symlinks."""
    top = open_dir(root_fd, parts, create=True, owner=owner)
    try:
        _upload_into(src, top, budget, owner)
    finally:
        os.close(top)


def _upload_into(src: str, dfd: int, budget: Budget, owner: Owner | None) -> None:
    with os.scandir(src) as it:
        entries = list(it)
    for entry in entries:
        if entry.is_symlink():
            budget.take(0)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=dfd)
            target = os.readlink(entry.path)
            with _owned(owner):
                os.symlink(target, entry.name, dir_fd=dfd)
        elif entry.is_dir():
            budget.take(0)
            sub = _open_dir(dfd, entry.name, create=True, owner=owner)
            try:
                os.fchmod(sub, entry.stat().st_mode & 0o7777)
                _upload_into(entry.path, sub, budget, owner)
            finally:
                os.close(sub)
        elif entry.is_file():
            st = entry.stat()
            budget.take(st.st_size)
            with open(entry.path, "rb") as f:
                data = f.read()
            _write_at(dfd, entry.name, data, st.st_mode, owner)


def make_fresh_dir(
    root_fd: int, parts: list[str], mode: int, files: dict[str, bytes], owner: Owner | None = None
) -> None:
    """Make root/parts a new directory (`mode`) holding `files` (0644): FileExistsError
    when anything stands there, a link included (never followed); its parent must exist."""
    if not parts:
        raise Unsafe("will not make /")
    parent = open_dir(root_fd, parts[:-1])
    try:
        with _owned(owner):
            os.mkdir(parts[-1], 0o700, dir_fd=parent)
        fd = _open_dir(parent, parts[-1], create=False)
        try:
            for name, data in files.items():
                _write_at(fd, name, data, 0o644, owner)
            os.fchmod(fd, mode & 0o7777)
        finally:
            os.close(fd)
    finally:
        os.close(parent)


# ---- resetting a directory (grading) -------------------------------------------------


MAX_RESET_DEPTH = 128  # deeper trees are an attack on the host's fds and stack, not grading


def reset_dir(root_fd: int, parts: list[str], owner: Owner | None = None) -> None:
    """Make root/parts a fresh, empty, plain directory (mode 0755, `owner` when given).

    Whatever stands there is removed without following a link: a symlink or a
    file is unlinked, a directory is emptied depth-first through fds opened
    with O_NOFOLLOW (modes such as 0311 or 0555 are lifted first where needed).
    A directory is emptied in place rather than replaced, so a mount point
    works too. Missing parents are made; a parent that is a link raises
    `Unsafe` (crucible made /logs, and an agent that replaced it has broken
    its own grading).
    """
    if not parts:
        raise Unsafe("will not reset /")
    parent = open_dir(root_fd, parts[:-1], create=True, owner=owner)
    try:
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent)
            st = None
        if st is None:
            with _owned(owner):
                os.mkdir(name, 0o755, dir_fd=parent)
        fd = _open_writable_dir(parent, name)
        try:
            _empty(fd)
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, 0o755)
            if os.listdir(fd):  # nothing can be writing here: every agent process is gone
                raise OSError(errno.ENOTEMPTY, "not empty after its reset", "/".join(parts))
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def _open_writable_dir(parent: int, name: str) -> int:
    """An fd on a real directory, made listable and writable for us if its mode says no."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        # Not root on the host (a 0311 or 0000 dir of our uid): lift the mode
        # through an O_PATH handle, which needs no permission on the dir itself.
        pfd = os.open(
            name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
        try:
            os.chmod(f"/proc/self/fd/{pfd}", 0o700)
        finally:
            os.close(pfd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(name) from exc
        raise
    if not os.access(f"/proc/self/fd/{fd}", os.W_OK | os.X_OK):
        os.fchmod(fd, 0o700)
    return fd


def _empty(dfd: int, depth: int = 0) -> None:
    if depth > MAX_RESET_DEPTH:
        raise OSError(errno.ELOOP, f"a tree deeper than {MAX_RESET_DEPTH} levels")
    for name in os.listdir(dfd):
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = _open_writable_dir(dfd, name)
            try:
                _empty(sub, depth + 1)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)
