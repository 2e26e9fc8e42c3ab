"""Reading a task folder without following its links: a task folder is untrusted input.

The files crucible itself reads (task.toml, instruction.md, each step's instruction,
environment/Dockerfile, the compose file, a separate verifier's Dockerfile) are opened
one path component at a time from the task folder, each with O_NOFOLLOW: a link anywhere
on the way (the file itself, `environment -> /root`, `steps/a -> ../..`) is refused with
its path, whether it points in or out of the folder, so the host never reads through one.
This matches tests/ and solution/, which reach the sandbox with their links kept as links
and are never read through on the host. The final open is O_NONBLOCK and checked S_ISREG
on the fd, so a fifo or a device cannot hang or feed the loader; the size is capped.

A build context (environment/, a compose service's context, a bundled tests/ context) is
sent to a builder, which sees its links as links. One whose target is absolute, or that
resolves out of the context, is refused with its path before any build, as is anything
but files, folders and links. Hard links are plain files here: their content is the
task's own, whatever other name it has on this filesystem.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from crucible.tasks.problems import Problem, TaskCheck

MAX_TASK_FILE = 8 << 20  # task.toml, an instruction, a Dockerfile, a compose file
# The whole task folder: crucible hashes every byte of it (the task's digest) and sends
# environment/ to a builder, so a 1 TB sparse file (made in an instant) or a million
# files would hold the host for hours before any check said no.
MAX_TASK_BYTES = 4 << 30  # apparent sizes: a sparse file is read and sent at full size
MAX_TASK_ENTRIES = 200_000
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class TaskFileRefused(OSError):
    """A task file crucible will not read: a link on its way, not a regular file, too big."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(errno.EPERM, why, str(path))
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _parts(rel: str | PurePosixPath, root: Path) -> list[str]:
    pure = PurePosixPath(rel)
    if pure.is_absolute() or any(p in ("..", "") for p in pure.parts):
        raise TaskFileRefused(root / str(rel), "leaves the task folder")
    return [p for p in pure.parts if p != "."]


def _refusal(dfd: int, name: str, path: Path, err: OSError) -> OSError:
    """The error to raise for a failed open of `name`: a link is named with its target."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return err
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=dfd)
        return TaskFileRefused(
            path, f"is a symbolic link (to {target!r}); task files are never read through links"
        )
    return err


@contextlib.contextmanager
def _open(root: Path, rel: str | PurePosixPath) -> Iterator[tuple[int, Path]]:
    """An fd on root/rel, opened without following any link below root."""
    parts = _parts(rel, root)
    if not parts:
        raise TaskFileRefused(root, "not a file")
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the operator's path
    path = root
    try:
        for i, name in enumerate(parts):
            path = path / name
            last = i == len(parts) - 1
            try:
                fd = os.open(name, _FILE if last else _DIR, dir_fd=dfd)
            except OSError as err:
                raise _refusal(dfd, name, path, err) from err
            os.close(dfd)
            dfd = fd
        yield dfd, path
    finally:
        os.close(dfd)


def read_task_bytes(root: Path, rel: str | PurePosixPath, cap: int = MAX_TASK_FILE) -> bytes:
    """The bytes of root/rel, never through a link. FileNotFoundError when absent,
    `TaskFileRefused` for a link on the way, a non-regular file or one over `cap`."""
    with _open(Path(root), rel) as (fd, path):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TaskFileRefused(path, "not a regular file")
        if st.st_size > cap:
            raise TaskFileRefused(path, f"larger than {cap} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > cap:
                raise TaskFileRefused(path, f"larger than {cap} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def task_entry(root: Path, rel: str | PurePosixPath) -> str:
    """What root/rel is, its links not followed: file, dir, link, missing or other."""
    path = Path(root)
    for name in _parts(rel, path):
        path = path / name
        try:
            st = path.lstat()
        except FileNotFoundError:
            return "missing"
        except NotADirectoryError:
            return "missing"
        if stat.S_ISLNK(st.st_mode):
            return "link"
    mode = path.lstat().st_mode
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def tree_problem(root: Path) -> str | None:
    """Why the folder `root` is too big to hash or send (its entries, or the apparent
    bytes of its files, past the caps), or None. Stops at the cap; links not followed."""
    entries = size = 0
    for dirpath, dirnames, filenames in os.walk(root):  # never enters a linked folder
        for name in [*dirnames, *filenames]:
            entries += 1
            if entries > MAX_TASK_ENTRIES:
                return f"it holds more than {MAX_TASK_ENTRIES} files and folders"
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if size > MAX_TASK_BYTES:
                return (
                    f"its files add up to more than {MAX_TASK_BYTES} bytes "
                    "(sizes as read: a sparse file counts in full)"
                )
    return None


def context_problems(context: Path) -> list[tuple[Path, str]]:
    """Why build context `context` may not be sent to a builder: each entry that is a link
    leaving it (absolute, or resolving outside), or neither file, folder nor link."""
    top = Path(context)
    if top.is_symlink():
        return [(top, f"the build context is a symbolic link (to {os.readlink(top)!r})")]
    real = top.resolve()
    out: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(top):  # never enters a linked folder
        for name in sorted([*dirnames, *filenames]):
            entry = Path(dirpath) / name
            st = entry.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(entry)
                if os.path.isabs(target):
                    out.append(
                        (entry, f"a link to an absolute path ({target!r}) in a build context")
                    )
                elif not Path(os.path.realpath(entry)).is_relative_to(real):
                    out.append((entry, f"a link out of the build context ({target!r})"))
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                out.append((entry, "neither a file, a folder nor a link, in a build context"))
    return out


def refuse_context(context: Path) -> None:
    """TaskInvalid naming every entry of `context` that may not reach a builder (the
    providers call it before every build, whatever loaded the task)."""
    from crucible.errors import TaskInvalid

    problems = context_problems(context)
    if problems:
        said = "; ".join(f"{p}: {why}" for p, why in problems[:10])
        raise TaskInvalid(
            f"its image cannot be built: {said}",
            hint="a build context holds no link to a path outside it (see `crucible tasks check`)",
        )


def read_task_text(
    root: Path, rel: str, check: TaskCheck, *, missing: str, prefix: str = ""
) -> str | None:
    """root/rel as UTF-8 text, or None with the problem recorded in `check`
    (`missing`: what to say when it is absent; `prefix` names the step)."""
    path = Path(root) / rel
    try:
        return read_task_bytes(root, rel).decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        why = missing
    except TaskFileRefused as exc:
        path, why = exc.path, exc.why
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 text: {exc}"
    except OSError as exc:
        why = f"cannot be read: {exc.strerror or exc}"
    check.problems.append(Problem(path=path, message=prefix + why))
    return None
