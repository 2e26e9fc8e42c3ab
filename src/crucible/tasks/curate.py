"""What `dataset split` and `dataset mix` share: loading the valid tasks of a folder, the
lineage in their `[metadata]`, writing plain task folders safely and the manifest beside them.

The output is built in a fresh folder next to `out` and moved into place when complete, so a
refused or failed build leaves nothing at `out`. An existing `out` is replaced only with
`force`, and only when it is a folder holding a manifest this wrote. Task folders are copied
file by file, without following links: a task that holds a link (which could point anywhere
on the host) is refused, and so is anything that is not a regular file or folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crucible.errors import ExitCode
from crucible.records.dataset_manifest import MANIFEST_NAME, DatasetManifest, Lineage, ManifestTask
from crucible.tasks.manifest import CurateError
from crucible.tasks.models import Task

LINEAGE_KEYS = ("root", "parent", "operator", "generation", "source", "category", "mode")


def load_valid(paths: Sequence[Path]) -> list[Task]:
    """The tasks at or below `paths`, all valid (else CurateError naming the invalid ones)."""
    from crucible.tasks.dataset import check_tasks

    checks = check_tasks(paths)
    bad = [c for c in checks if not c.valid or c.task is None]
    if bad:
        listed = "; ".join(
            f"{c.path}: {c.problems[0] if c.problems else 'invalid'}" for c in bad[:5]
        )
        raise CurateError(ExitCode.USAGE, "task_invalid",
                          f"{len(bad)} invalid task(s) or empty path(s): {listed}")  # fmt: skip
    tasks = [c.task for c in checks if c.task is not None]
    if not tasks:
        raise CurateError(ExitCode.NOT_FOUND, "not_found", "no tasks found")
    return tasks


def lineage_of(task: Task) -> Lineage:
    meta = task.metadata
    values: dict[str, str | int | None] = {}
    for key in LINEAGE_KEYS:
        value = meta.get(key)
        if key == "generation":
            values[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
        elif isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            values[key] = str(value)
    return Lineage.model_validate(values)


def staging(out: Path, force: bool) -> Path:
    """A fresh folder beside `out` to build into (checked: `out` may be replaced)."""
    if out.is_symlink():
        raise CurateError(ExitCode.USAGE, "usage", f"{out} is a symbolic link: not replaced")
    if out.exists():
        if not force:
            raise CurateError(ExitCode.USAGE, "usage", f"{out} exists",
                              hint="pass --force to replace it, or another -o")  # fmt: skip
        if not (out.is_dir() and (out / MANIFEST_NAME).is_file()):
            raise CurateError(ExitCode.USAGE, "usage",
                              f"{out} is not a dataset folder (no {MANIFEST_NAME}): not replaced")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def finish(stage: Path, out: Path, manifest: DatasetManifest) -> None:
    """Write the manifest into `stage` and move it to `out` (replacing an old one)."""
    (stage / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=1) + "\n", encoding="utf-8")
    if out.exists():
        old = stage.with_name(stage.name + ".old")
        os.replace(out, old)
        os.replace(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)


def write_dataset(
    out: Path,
    placed: Sequence[tuple[Task, str, str | None]],
    *,
    force: bool,
    link: bool,
    **fields: Any,
) -> DatasetManifest:
    """Write each (task, part, group) to OUT/<part>/<task folder>/ and the manifest (made of
    `fields` and the entries), all or nothing."""
    stage = staging(out, force)
    try:
        entries: list[ManifestTask] = []
        for task, part, group in placed:
            rel = f"{part}/{task.path.name}"
            if any(e.path == rel for e in entries):
                raise CurateError(ExitCode.USAGE, "usage",
                                  f"two tasks of {part} are in folders named {task.path.name!r}")  # fmt: skip
            copy_task(task.path, stage / rel, link=link)
            entries.append(ManifestTask(name=task.name, path=rel, digest=task.digest, part=part,
                                        group=group, lineage=lineage_of(task)))  # fmt: skip
        manifest = DatasetManifest(tasks=entries, **fields)
        finish(stage, out, manifest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return manifest


def copy_task(src: Path, dst: Path, *, link: bool = False) -> None:
    """Copy the task folder `src` to `dst` (hard links for files with `link`, where the file
    system allows them), refusing links and special files."""
    src_fd_root = src.resolve()
    for dirpath, dirnames, filenames in os.walk(src_fd_root, followlinks=False):
        here = Path(dirpath)
        rel = here.relative_to(src_fd_root)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in [*dirnames, *filenames]:
            path = here / name
            if path.is_symlink():
                raise CurateError(ExitCode.USAGE, "task_unsafe",
                                  f"{src}: {(rel / name).as_posix()} is a symbolic link: not copied",
                                  hint="tasks in a dataset hold plain files only")  # fmt: skip
            if name in filenames:
                if not path.is_file():
                    raise CurateError(ExitCode.USAGE, "task_unsafe",
                                      f"{src}: {(rel / name).as_posix()} is not a regular file")  # fmt: skip
                target = dst / rel / name
                if link:
                    try:
                        os.link(path, target, follow_symlinks=False)
                        continue
                    except OSError:
                        pass
                shutil.copy2(path, target, follow_symlinks=False)
