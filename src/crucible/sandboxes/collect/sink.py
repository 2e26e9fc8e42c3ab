"""The host side of a collection: one fresh host folder, written fd-relative.

Every folder is made with mkdirat and reopened O_DIRECTORY|O_NOFOLLOW, every
file with O_CREAT|O_EXCL|O_NOFOLLOW, always relative to a folder fd this sink
made itself. Only folders and regular files are ever created, so there is no
link on the host for a later write to go through, and a name already taken is
refused, never overwritten. Copies go in chunks, skip zero runs (the host file
stays sparse) and stop at the caps of the budget, which the sink also charges
for every entry.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

from crucible.records.text import storable_text
from crucible.sandboxes.collect.manifest import (
    CHUNK,
    LINK_TEXT,
    NOTES,
    Budget,
    Collected,
    EntryType,
    Note,
)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_BLOCK = 64 << 10  # the unit of sparseness on the host
_ZEROS = bytes(_BLOCK)
NAME_MAX = 255
Verdict = Literal["ok", "skip", "full"]


class Full(Exception):
    """The budget's entries are spent: the collection stops here."""


class Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


def entry_type(mode: int) -> EntryType:
    for test, name in (
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "char_device"),
        (stat.S_ISBLK, "block_device"),
    ):
        if test(mode):
            return name  # type: ignore[return-value]
    return "other"


def host_name_ok(name: str) -> bool:
    """A single name the host can hold as it is (a tar member's names are anything)."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        return False
    return len(os.fsencode(name)) <= NAME_MAX


class Sink:
    """One sandbox folder `src` collected into the host folder `dst` (made when first needed)."""

    def __init__(
        self,
        src: str,
        dst: Path,
        budget: Budget,
        shown: str | None = None,
        *,
        only: str | None = None,
        exclude: Sequence[str] = (),
    ) -> None:
        """`only`: take nothing of `src` but the entry of that name (one declared artifact
        out of its folder). `exclude`: glob patterns of entries left out, matched against
        each name and each path below `only` (or `src`), as tar's --exclude does."""
        self.src = posixpath.normpath("/" + src.lstrip("/"))
        self.only = only
        self.exclude = tuple(exclude)
        self.dst = dst
        self.budget = budget
        self.limits = budget.limits
        self.record = Collected(src=self.src, dst=shown or str(dst))
        self._root: int | None = None
        self._counts: dict[tuple[str, ...], int] = {}
        self._taken: set[tuple[str, ...]] = {()}  # folders taken, for `known` entries
        self._start = (budget.entries_left, budget.bytes_left)
        self._made = False  # dst made by this sink

    def restart(self) -> None:
        """Undo this sink's copy so far (a stream that broke off is read again from the
        start): the host folder it made is removed, its charges go back to the budget."""
        self.close()
        if self._made:
            shutil.rmtree(self.dst)
            self._made = False  # only folders and regular files of ours are in it
        entries, size = self._start
        self.budget.entries_left, self.budget.bytes_left = entries, size
        self.record = Collected(src=self.record.src, dst=self.record.dst)
        self._counts, self._taken = {}, {()}

    # -- the record --------------------------------------------------------------

    def path(self, rel: Sequence[str]) -> str:
        return posixpath.join(self.src, *rel)

    def note(
        self,
        rel: Sequence[str],
        kind: EntryType,
        reason: str,
        *,
        size: int | None = None,
        target: str | None = None,
        truncated: bool = False,
    ) -> None:
        if truncated:
            self.record.truncated = True
        if len(self.record.notes) >= NOTES:
            self.record.notes_dropped += 1
            return
        if target is not None:
            target = storable_text(target[:LINK_TEXT]) + ("…" if len(target) > LINK_TEXT else "")
        self.record.notes.append(
            Note(
                path=storable_text(self.path(rel)),
                type=kind,
                size=size,
                target=target,
                truncated=truncated,
                reason=reason,
            )
        )

    def take_entry(
        self, rel: Sequence[str], *, is_dir: bool = False, known: bool = False
    ) -> Verdict:
        """Charge one entry at `rel`: "ok", "skip" it (too deep, or in a folder not
        taken), its folder is "full", or raise Full when the budget has no entries left.

        `known`: only entries of folders taken before count (a tar stream, whose
        members could otherwise make a refused folder again as an implicit parent).
        """
        if self._left_out(rel):
            return "skip"  # not asked for: neither charged nor noted
        if self.budget.entries_left <= 0:
            self.note(
                (), "dir", f"stopped: {self.limits.entries} entries collected", truncated=True
            )
            raise Full
        parent = tuple(rel[:-1])
        if known and parent not in self._taken:
            return "skip"  # its folder was refused (and noted) or never listed
        n = self._counts.get(parent, 0) + 1
        self._counts[parent] = n
        if n > self.limits.dir_entries:
            if n == self.limits.dir_entries + 1:
                msg = f"folder cut at {self.limits.dir_entries} entries"
                self.note(parent, "dir", msg, truncated=True)
            return "full"
        if len(rel) > self.limits.depth:
            self.note(rel, "other", f"deeper than {self.limits.depth} folders", truncated=True)
            return "skip"
        self.budget.entries_left -= 1
        if is_dir and known:
            self._taken.add(tuple(rel))
        return "ok"

    def _left_out(self, rel: Sequence[str]) -> bool:
        if self.only is not None and (not rel or rel[0] != self.only):
            return True
        if not self.exclude:
            return False
        below = list(rel[1:] if self.only is not None else rel)
        if not below:
            return False
        path = "/".join(below)
        return any(
            fnmatch.fnmatchcase(below[-1], pat) or fnmatch.fnmatchcase(path, pat.strip("/"))
            for pat in self.exclude
        )

    # -- host folders and files -----------------------------------------------------

    def root(self) -> int:
        """The fd of `dst`, made on first use (an empty sandbox folder costs no mkdir)."""
        if self._root is None:
            try:
                parent = os.open(self.dst.parent, _DIR)
            except FileNotFoundError:
                self.dst.parent.mkdir(parents=True, exist_ok=True)  # crucible's own folders
                parent = os.open(self.dst.parent, _DIR)
            try:
                self._root = mkdir_at(parent, self.dst.name)
                self._made = True
            finally:
                os.close(parent)
        return self._root

    def subdir(self, parent_fd: int, name: str) -> int:
        fd = mkdir_at(parent_fd, name)
        self.record.dirs += 1
        return fd

    def dir_of(self, rel: Sequence[str]) -> int:
        """A new fd on the host folder for `rel` (relative to dst), making what is missing."""
        fd = os.dup(self.root())
        for name in rel:
            try:
                nfd = mkdir_at(fd, name)
            finally:
                os.close(fd)
            fd = nfd
        return fd

    def allowance(self, size: int) -> int:
        return max(0, min(size, self.limits.file_bytes, self.budget.bytes_left))

    def write_file(
        self, parent_fd: int, rel: Sequence[str], size: int, executable: bool, fill: Filler
    ) -> None:
        """Create rel's file under parent_fd and let `fill(out_fd, n)` copy up to n bytes."""
        try:
            out = os.open(rel[-1], _NEW, 0o755 if executable else 0o644, dir_fd=parent_fd)
        except FileExistsError:
            self.note(rel, "file", "a name already taken on the host: skipped", size=size)
            return
        try:
            n = self.allowance(size)
            length = fill(out, n)
        finally:
            os.close(out)
        self.budget.bytes_left -= length
        self.record.bytes += length
        self.record.files += 1
        if n < size:
            cap = "file cap" if n == self.limits.file_bytes else "byte cap of the budget"
            self.note(rel, "file", f"cut at {n} bytes ({cap})", size=size, truncated=True)

    def add_file(self, rel: Sequence[str], size: int, executable: bool, f: Readable) -> None:
        """A file at `rel` (its folders made as needed), copied from a stream."""
        parent = self.dir_of(rel[:-1])
        try:
            self.write_file(parent, rel, size, executable, lambda out, n: copy_stream(f, out, n))
        finally:
            os.close(parent)

    def close(self) -> None:
        if self._root is not None:
            os.close(self._root)
            self._root = None


Filler = Callable[[int, int], int]


def mkdir_at(parent_fd: int, name: str) -> int:
    """A folder `name` under parent_fd, made if missing; never a link (ELOOP/ENOTDIR raise)."""
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        pass  # only this sink makes things here, and it makes no links
    return os.open(name, _DIR, dir_fd=parent_fd)


def _put(out: int, off: int, chunk: bytes) -> None:
    """Write a chunk at `off`, leaving its all-zero blocks as holes."""
    if chunk.count(0) == len(chunk):
        return
    for i in range(0, len(chunk), _BLOCK):
        block = chunk[i : i + _BLOCK]
        if block == _ZEROS[: len(block)]:
            continue
        view, at = memoryview(block), off + i
        while view:
            done = os.pwrite(out, view, at)
            view, at = view[done:], at + done


def copy_fd(src: int, out: int, n: int) -> int:
    """Copy the first n bytes of regular file `src`, reading only its data (SEEK_DATA/SEEK_HOLE)."""
    end, off = n, 0
    while off < end:
        try:
            data = os.lseek(src, off, os.SEEK_DATA)
        except OSError:
            break  # ENXIO: nothing but a hole (or EOF) from here
        if data >= end:
            break
        try:
            hole = min(os.lseek(src, data, os.SEEK_HOLE), end)
        except OSError:
            hole = end
        pos = data
        while pos < hole:
            chunk = os.pread(src, min(CHUNK, hole - pos), pos)
            if not chunk:
                end = pos  # it shrank under us
                break
            _put(out, pos, chunk)
            pos += len(chunk)
        off = pos
    os.ftruncate(out, end)
    return end


def copy_stream(f: Readable, out: int, n: int) -> int:
    """Copy the first n bytes of a stream (a tar member), zero runs left as holes."""
    pos = 0
    while pos < n:
        chunk = f.read(min(CHUNK, n - pos))
        if not chunk:
            break
        _put(out, pos, chunk)
        pos += len(chunk)
    os.ftruncate(out, pos)
    return pos
