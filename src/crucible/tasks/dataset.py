"""Datasets: the ordered, filtered tasks found under the paths a user names.

A path holding task.toml is a task; a dataset manifest (crucible-dataset.json, written
by `dataset split` and `dataset mix`) stands for the tasks it lists, each of which must
still have the digest recorded; any other directory is searched below for task directories. The order is deterministic (by name, then path). Invalid
tasks and paths that hold no task are returned with their problems, never
dropped; two tasks with the same name are both invalid, since the name is
their identity in a job.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from crucible.records.dataset_manifest import MANIFEST_NAME
from crucible.tasks.hostvars import NO_HOST, HostEnv
from crucible.tasks.loader import check_task
from crucible.tasks.manifest import CurateError, manifest_task_dirs
from crucible.tasks.models import Task
from crucible.tasks.problems import Problem, TaskCheck
from crucible.tasks.task_toml import TASK_TOML

# Folders never searched for tasks: VCS data, virtualenvs, caches.
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages"})


def find_task_dirs(paths: Iterable[Path]) -> tuple[list[Path], list[TaskCheck]]:
    """Task directories at or below `paths` (each once), and the paths that hold none."""
    found: list[Path] = []
    seen: set[Path] = set()
    empty: list[TaskCheck] = []

    def add(task_dir: Path) -> None:
        key = task_dir.resolve()
        if key not in seen:
            seen.add(key)
            found.append(task_dir)

    for path in map(Path, paths):
        if path.name == MANIFEST_NAME and path.is_file():
            listed, problem = _manifest_dirs(path)
            if problem is not None:
                empty.append(problem)
            for task_dir in listed:
                add(task_dir)
        elif not path.exists():
            empty.append(_path_problem(path, "no such file or directory"))
        elif (path / TASK_TOML).is_file() or not path.is_dir():
            add(path)  # a file (or a broken task) is reported by check_task
        else:
            below = _search(path)
            if not below:
                empty.append(_path_problem(path, "no task directories (holding task.toml) below"))
            for task_dir in below:
                add(task_dir)
    return found, empty


def _manifest_dirs(path: Path) -> tuple[list[Path], TaskCheck | None]:
    try:
        return [d for d, _ in manifest_task_dirs(path)], None
    except CurateError as exc:
        return [], _path_problem(path, exc.message)


def _recorded_digests(paths: Iterable[Path]) -> dict[Path, str]:
    """Task folder (resolved) -> the digest a manifest among `paths` recorded for it."""
    out: dict[Path, str] = {}
    for path in map(Path, paths):
        if path.name == MANIFEST_NAME and path.is_file():
            try:
                out.update((d.resolve(), digest) for d, digest in manifest_task_dirs(path))
            except CurateError:
                continue  # reported by find_task_dirs
    return out


def _search(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if TASK_TOML in filenames and Path(dirpath) != root:
            out.append(Path(dirpath))
            dirnames[:] = []  # tasks do not nest
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
    return sorted(out)


def _path_problem(path: Path, message: str) -> TaskCheck:
    return TaskCheck(
        path=path,
        name=path.name or str(path),
        problems=[Problem(path=path, message=message)],
        not_found=True,
    )


def selected(name: str, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> bool:
    """fnmatch filters on task names: any include must match (when given), no exclude may."""
    if include and not any(fnmatch.fnmatchcase(name, pat) for pat in include):
        return False
    return not any(fnmatch.fnmatchcase(name, pat) for pat in exclude)


def check_tasks(
    paths: Iterable[Path],
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    host: HostEnv = NO_HOST,
) -> list[TaskCheck]:
    """Check every task at or below `paths`; valid tasks first by name, then invalid ones by path.

    Filters apply to task names (the directory name where task.toml cannot be read).
    A path that holds no task is reported as an invalid entry of its own. `host`: the
    host variables the tasks may read (none by default).
    """
    paths = list(paths)
    task_dirs, checks = find_task_dirs(paths)
    recorded = _recorded_digests(paths)
    for task_dir in task_dirs:
        check = check_task(task_dir, host)
        want = recorded.get(task_dir.resolve())
        if check.task is not None and want is not None and check.task.digest != want:
            check.problems.append(Problem(path=task_dir, message=f"changed since {MANIFEST_NAME} "
                                          f"recorded it (digest {want[:12]}, now "
                                          f"{check.task.digest[:12]})"))  # fmt: skip
            check.task = None
        if selected(check.name, include, exclude):
            checks.append(check)

    by_name: dict[str, list[TaskCheck]] = {}
    for check in checks:
        if check.task is not None:
            by_name.setdefault(check.name, []).append(check)
    for name, same in by_name.items():
        if len(same) < 2:
            continue
        for check in same:
            others = ", ".join(str(o.path) for o in same if o is not check)
            check.problems.append(
                Problem(path=check.path, message=f"duplicate task name {name!r}: also at {others}")
            )
            check.task = None

    return sorted(
        checks, key=lambda c: (not c.valid, c.name if c.valid else "", str(c.path), c.name)
    )


def discover_tasks(
    paths: Sequence[Path],
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    host: HostEnv = NO_HOST,
) -> tuple[list[Task], list[tuple[Path, list[Problem]]]]:
    """Valid tasks sorted by name, and (path, problems) for everything invalid."""
    tasks: list[Task] = []
    invalid: list[tuple[Path, list[Problem]]] = []
    for check in check_tasks(paths, include, exclude, host):
        if check.valid and check.task is not None:
            tasks.append(check.task)
        else:
            invalid.append((check.path, check.problems))
    return tasks, invalid
