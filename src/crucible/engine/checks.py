"""The static check of `crucible tasks check`: every task's files and format
(tasks/dataset.check_tasks), then its verifier stages as launch reads them
(verifiers/pipeline.stage_problems: tasks/ does not read [metadata.crucible]). One
function, so what `tasks check` says and what an adapter reports written never differ."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from crucible.tasks.dataset import check_tasks
from crucible.tasks.hostvars import NO_HOST, HostEnv
from crucible.tasks.problems import Problem, TaskCheck
from crucible.verifiers.pipeline import stage_problems


def checked_tasks(
    paths: Iterable[Path],
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    host: HostEnv = NO_HOST,
) -> list[TaskCheck]:
    """check_tasks, each valid task's stage problems added (which make it invalid)."""
    checks = check_tasks(paths, include, exclude, host)
    for c in checks:
        if c.task is not None:
            c.problems += [
                Problem(path=c.path / "task.toml", message=m) for m in stage_problems(c.task)
            ]
    return checks


def check_written(folders: Sequence[Path]) -> list[TaskCheck]:
    """The check of each task folder in `folders`, in their order."""
    by_path = {c.path.resolve(): c for c in checked_tasks(folders)}
    return [by_path[f.resolve()] for f in folders]
