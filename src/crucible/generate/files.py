"""Writing a proposal's files: every path the model sends is hostile.

A path is refused unless it is relative, made of plain names (no `..`, no `.`,
no empty part, no backslash, no control character), under one of the folders a
Harbor task has, and within the caps on depth, entries and bytes. Files are
written into a folder this module makes fresh, each with O_CREAT|O_EXCL|
O_NOFOLLOW, so nothing the model names can be a link or reach outside it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MAX_ENTRIES = 64
MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 1024 * 1024
MAX_DEPTH = 6
TOP_FILES = frozenset({"task.toml", "instruction.md"})
TOP_DIRS = frozenset({"environment", "solution", "tests"})
FAILURES_DIR = "solution/failures"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]{0,99}$")


class HostilePath(ValueError):
    """A path (or the set of files) the proposal may not write."""


def check_paths(files: dict[str, str]) -> list[str]:
    """Every reason the file set is refused (empty: it may be written)."""
    problems: list[str] = []
    if len(files) > MAX_ENTRIES:
        problems.append(f"{len(files)} files, more than {MAX_ENTRIES}")
    total = 0
    for rel, text in files.items():
        size = len(text.encode("utf-8", "surrogatepass"))
        total += size
        if size > MAX_FILE_BYTES:
            problems.append(f"{rel!r}: {size} bytes, more than {MAX_FILE_BYTES}")
        if (why := path_problem(rel)) is not None:
            problems.append(f"{rel!r}: {why}")
    if total > MAX_TOTAL_BYTES:
        problems.append(f"{total} bytes in all, more than {MAX_TOTAL_BYTES}")
    return problems


def path_problem(rel: str) -> str | None:
    if not rel or rel.startswith(("/", "~")) or "\\" in rel or ":" in rel[:3]:
        return "not a relative path"
    parts = rel.split("/")
    if len(parts) > MAX_DEPTH:
        return f"deeper than {MAX_DEPTH}"
    for part in parts:
        if part in ("", ".", ".."):
            return "holds an empty, '.' or '..' part"
        if not _NAME.match(part):
            return f"part {part[:40]!r} is not a plain file name"
    if len(parts) == 1 and parts[0] not in TOP_FILES:
        return f"only {sorted(TOP_FILES)} may sit at the top"
    if len(parts) > 1 and parts[0] not in TOP_DIRS:
        return f"top folder {parts[0]!r} is not one of {sorted(TOP_DIRS)}"
    return None


def write_files(dest: Path, files: dict[str, str]) -> None:
    """Write `files` into `dest`, which must not exist; raises HostilePath first if any
    path or size is refused (then nothing is written)."""
    problems = check_paths(files)
    if problems:
        raise HostilePath("; ".join(problems))
    dest.mkdir(parents=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for rel, text in sorted(files.items()):
        parts = rel.split("/")
        folder = dest
        for part in parts[:-1]:
            folder = folder / part
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                raise HostilePath(f"{rel!r}: {part!r} is already a file")
            folder.mkdir(exist_ok=True)
        mode = 0o755 if rel.endswith(".sh") else 0o644
        fd = os.open(folder / parts[-1], flags, mode)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(text)


def read_files(root: Path) -> dict[str, str]:
    """A written task folder as {relpath: text} (links and non-files left out)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        out[path.relative_to(root).as_posix()] = path.read_text(errors="replace")
    return out


def failure_names(files: dict[str, str]) -> list[str]:
    prefix = FAILURES_DIR + "/"
    return sorted(
        rel[len(prefix) : -3]
        for rel in files
        if rel.startswith(prefix) and rel.endswith(".sh") and rel.count("/") == 2
    )
