"""Pulling a dataset: its tasks' folders, fetched once into the datasets folder.

Checkouts are keyed by repository and commit (`<datasets-dir>/git/<repo>-<hash>/<commit>`),
so a task pinned to a commit is fetched once, whoever asks; HEAD is resolved to a
commit first. A checkout is sparse (only the task folders asked for) and widened when
a later dataset asks for more of the same commit. A file lock keeps two pulls of one
checkout apart.

A task folder is taken only if every component of its path, from the checkout's root
down, is a real folder (lstat, never followed): a task folder that is a link, or lies
under one, is refused, wherever it points. The task loader then reads the folder
without following links (tasks/taskfs.py). A local repository path (or file:// URL),
and a task without git_url, are read only from a local registry, relative to its
folder: a registry from the network may not point crucible at the host's own files.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from crucible.tasks.registry.errors import DatasetError
from crucible.tasks.registry.git import add_paths, new_checkout, resolve_head
from crucible.tasks.registry.models import DatasetSpec, RegistryTask
from crucible.tasks.registry.source import Registry


@dataclass(frozen=True)
class PulledTask:
    """A task of a dataset, on disk: `path` is the folder to load."""

    name: str
    path: Path
    git_url: str | None
    git_commit_id: str | None  # the commit it was fetched at (HEAD resolved)
    source_path: str


def pull_dataset(
    registry: Registry,
    dataset: DatasetSpec,
    datasets_dir: Path,
    *,
    on_fetch: Callable[[str, str], None] | None = None,
) -> list[PulledTask]:
    """Every task of `dataset` on disk, in the registry's order. `on_fetch(url, commit)`
    is called before each git fetch (for a status line)."""
    local = registry.local_root is not None
    heads: dict[str, str] = {}
    groups: dict[tuple[str, str], list[RegistryTask]] = {}
    for task in dataset.tasks:
        what = f"{dataset.ref} task {task.name!r}"
        if task.git_url is None:
            if not local:
                raise DatasetError(f"{what}: no git_url, and a registry from the network "
                                   f"cannot name local folders ({registry.origin})")  # fmt: skip
            continue
        url = _repo_url(registry, task)
        commit = task.git_commit_id
        if commit is None:
            if url not in heads:
                heads[url] = resolve_head(url, _protocols(url, local, what))
            commit = heads[url]
        groups.setdefault((url, commit), []).append(task)

    found: dict[RegistryTask, PulledTask] = {}
    for (url, commit), tasks in groups.items():
        protocols = _protocols(url, local, f"{dataset.ref} task {tasks[0].name!r}")
        paths = sorted({t.path for t in tasks})
        root = _checkout(datasets_dir, url, commit, paths, protocols, on_fetch)
        for task in tasks:
            path = contained(root, task.path, f"{dataset.ref} task {task.name!r}")
            found[task] = PulledTask(task.name, path, task.git_url, commit, task.path)
    out: list[PulledTask] = []
    for task in dict.fromkeys(dataset.tasks):  # an entry listed twice is one task
        if task.git_url is None:
            assert registry.local_root is not None
            path = contained(registry.local_root, task.path, f"{dataset.ref} task {task.name!r}")
            out.append(PulledTask(task.name, path, None, None, task.path))
        else:
            out.append(found[task])
    return out


def _repo_url(registry: Registry, task: RegistryTask) -> str:
    url = task.git_url or ""
    if task.kind == "file" and "://" not in url and registry.local_root is not None:
        return str((registry.local_root / url).resolve()) if not os.path.isabs(url) else url
    return url


def _protocols(url: str, local: bool, what: str) -> list[str]:
    from crucible.tasks.registry.models import url_kind

    kind = url_kind(url)
    if kind == "file" and not local:
        raise DatasetError(f"{what}: git_url {url!r} is a local repository, and a registry from "
                           "the network cannot name the host's files")  # fmt: skip
    return ["https", "ssh"] + (["file"] if local else [])


def checkout_dir(datasets_dir: Path, url: str, commit: str) -> Path:
    """Where `url` at `commit` is checked out: readable, and unique per URL."""
    tail = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", tail)[:40].strip(".-") or "repo"
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return datasets_dir / "git" / f"{slug}-{digest}" / commit


def _checkout(
    datasets_dir: Path,
    url: str,
    commit: str,
    paths: list[str],
    protocols: list[str],
    on_fetch: Callable[[str, str], None] | None,
) -> Path:
    root = checkout_dir(datasets_dir, url, commit)
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.with_name(commit + ".lock")):
        if (root / ".git").is_dir():
            missing = [p for p in paths if not os.path.lexists(root / p)]
            if missing:
                if on_fetch:
                    on_fetch(url, commit)
                add_paths(root, missing, protocols, f"fetching {url} at {commit}")
            return root
        if on_fetch:
            on_fetch(url, commit)
        tmp = root.with_name(f"{commit}.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            new_checkout(tmp, url, commit, paths, protocols)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        tmp.rename(root)
    return root


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def contained(root: Path, rel: str, what: str) -> Path:
    """`root/rel`, a folder reached through real folders only; DatasetError otherwise."""
    here = root
    for part in PurePosixPath(rel).parts:
        if part in ("", ".", "..") or "/" in part:
            raise DatasetError(f"{what}: path {rel!r} leaves {root}")
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            raise DatasetError(f"{what}: {rel!r} does not exist at {root}") from None
        if stat.S_ISLNK(st.st_mode):
            raise DatasetError(f"{what}: {rel!r} goes through a link ({here} -> "
                               f"{os.readlink(here)}); task folders are never reached through links")  # fmt: skip
        if not stat.S_ISDIR(st.st_mode):
            raise DatasetError(f"{what}: {rel!r} is not a folder")
    return here
