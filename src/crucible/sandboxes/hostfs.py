"""Serving sandbox files straight from the host scratch root, without ever
following a symlink the agent may have planted.

Every path is walked one component at a time with O_NOFOLLOW from a held
directory fd, so a symlink (or a swap race) anywhere raises `Unsafe` and the
caller falls back to doing the work inside the sandbox, where symlinks resolve
within the sandbox's own view.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unsafe(Exception):
    """A symlink or a non-directory stands in the way: use the in-sandbox path."""


def _parts(rel: PurePosixPath) -> list[str]:
    parts = [p for p in rel.parts if p not in ("", "/", ".")]
    if any(p == ".." for p in parts):
        raise Unsafe("path contains ..")
    return parts


def _open_dir(parent_fd: int, name: str, *, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        return _open_dir(parent_fd, name, create=False)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(name) from exc
        raise


def open_dir(root: Path, rel: PurePosixPath, *, create: bool = False) -> int:
    """An fd on root/rel, refusing symlinks in every component."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in _parts(rel):
            nfd = _open_dir(fd, name, create=create)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(root: Path, rel: PurePosixPath) -> bytes:
    parts = _parts(rel)
    if not parts:
        raise IsADirectoryError(str(rel))
    dfd = open_dir(root, PurePosixPath(*parts[:-1]))
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unsafe(parts[-1]) from exc
            raise
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            if stat.S_ISDIR(os.fstat(f.fileno()).st_mode):
                raise IsADirectoryError(str(rel))
            raise Unsafe("not a regular file")  # a FIFO would block the host
        return f.read()


def write_file(root: Path, rel: PurePosixPath, data: bytes, mode: int) -> None:
    parts = _parts(rel)
    if not parts:
        raise IsADirectoryError(str(rel))
    dfd = open_dir(root, PurePosixPath(*parts[:-1]), create=True)
    try:
        _write_at(dfd, parts[-1], data, mode)
    finally:
        os.close(dfd)


def _write_at(dfd: int, name: str, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, mode & 0o7777, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise Unsafe(name) from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unsafe("not a regular file")
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fchmod(fd, mode & 0o7777)
    finally:
        os.close(fd)


def upload_tree(src: Path, root: Path, rel: PurePosixPath) -> None:
    """Copy host dir `src`'s contents into root/rel, symlinks in src kept as symlinks."""
    top = open_dir(root, rel, create=True)
    try:
        _upload_into(src, top)
    finally:
        os.close(top)


def _upload_into(src: Path, dfd: int) -> None:
    for entry in os.scandir(src):
        if entry.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=dfd)
            os.symlink(os.readlink(entry.path), entry.name, dir_fd=dfd)
        elif entry.is_dir():
            sub = _open_dir(dfd, entry.name, create=True)
            try:
                os.chmod(sub, entry.stat().st_mode & 0o7777)
                _upload_into(Path(entry.path), sub)
            finally:
                os.close(sub)
        elif entry.is_file():
            _write_at(dfd, entry.name, Path(entry.path).read_bytes(), entry.stat().st_mode)


def _safe_link(target: str, rel_parent: PurePosixPath) -> bool:
    """A link that stays inside the copied tree (what tarfile's 'data' filter allows)."""
    if target.startswith("/"):
        return False
    norm = os.path.normpath(os.path.join(str(rel_parent), target))
    return not (norm == ".." or norm.startswith("../"))


def download_tree(root: Path, rel: PurePosixPath, dst: Path) -> None:
    """Copy root/rel's contents into host dir `dst`; links leaving the tree are skipped."""
    top = open_dir(root, rel)
    try:
        dst.mkdir(parents=True, exist_ok=True)
        _download_from(top, dst, PurePosixPath("."))
    finally:
        os.close(top)


def _download_from(dfd: int, dst: Path, rel: PurePosixPath) -> None:
    for name in os.listdir(dfd):
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        out = dst / name
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=dfd)
            if _safe_link(target, rel):
                with contextlib.suppress(FileNotFoundError):
                    out.unlink()
                out.symlink_to(target)
        elif stat.S_ISDIR(st.st_mode):
            sub = _open_dir(dfd, name, create=False)
            try:
                out.mkdir(exist_ok=True)
                _download_from(sub, out, rel / name)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            if out.is_symlink():
                out.unlink()
            out.write_bytes(data)
            os.chmod(out, st.st_mode & 0o777)
