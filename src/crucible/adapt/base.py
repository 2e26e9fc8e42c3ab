"""The adapter interface: a source's rows in, Harbor task folders out.

An adapter turns one row of its source (a SWE-bench instance, a prompt and its answer)
into a `TaskFiles`: the task's name and its files. `write_tasks` writes them under the
output folder and checks what it wrote exactly as `crucible tasks check` does
(engine/checks.check_written): a task that fails the check is reported invalid,
never reported written. Adapters are found by name (adapt/registry.py), built-ins and
the `crucible.adapters` entry points alike.
"""

from __future__ import annotations

import re
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from crucible.errors import CrucibleError, ErrorKind

TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class AdaptError(CrucibleError):
    """A source that cannot be read or a row that cannot become a task (exit 1)."""

    kind = ErrorKind.task_invalid


class AdapterOptions(BaseModel):
    """An adapter's options; each adapter extends it (unknown keys are an error)."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class TaskFiles:
    """One task to write: its folder name, its files (relative path -> text) and which
    of them are executable."""

    name: str
    files: dict[str, str]
    executable: set[str] = field(default_factory=set)


class Adapter(ABC):
    """Rows of a source -> tasks. `name` is the adapter's registry name."""

    name: ClassVar[str]
    summary: ClassVar[str]
    options_type: ClassVar[type[AdapterOptions]] = AdapterOptions

    def __init__(self, options: AdapterOptions) -> None:
        self.options = options

    @abstractmethod
    def rows(self, source: str) -> list[dict[str, Any]]:
        """The rows of `source` this adapter makes tasks of (AdaptError when unreadable)."""

    @abstractmethod
    def task(self, row: dict[str, Any]) -> TaskFiles:
        """The task of one row (AdaptError naming what is missing)."""


class TaskWritten(BaseModel):
    """One task of an adapter's run, as `--json` reports it."""

    name: str
    path: str
    valid: bool
    problems: list[str] = []
    metadata: dict[str, Any] = {}


class AdaptReport(BaseModel):
    schema_version: int = 1
    adapter: str
    source: str
    out: str
    tasks: list[TaskWritten]

    @property
    def invalid(self) -> list[TaskWritten]:
        return [t for t in self.tasks if not t.valid]


def write_task(out: Path, task: TaskFiles) -> Path:
    """Write `task` as out/NAME (replacing a folder of that name an earlier run wrote)."""
    if not TASK_NAME.fullmatch(task.name):
        raise AdaptError(f"task name {task.name!r} is not a folder name ([A-Za-z0-9._-])")
    folder = out / task.name
    if folder.is_symlink():
        raise AdaptError(f"{folder} is a link: not written through")
    if folder.exists():
        shutil.rmtree(folder)
    for rel, text in sorted(task.files.items()):
        path = folder / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise AdaptError(f"{task.name}: file {rel!r} lies outside the task")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if rel in task.executable else 0o644)
    return folder


def write_tasks(
    adapter: Adapter, source: str, out: Path, tasks: Iterable[TaskFiles]
) -> AdaptReport:
    """Write every task under `out`, then check them as `crucible tasks check` does."""
    from crucible.engine.checks import check_written

    out.mkdir(parents=True, exist_ok=True)
    folders = [write_task(out, t) for t in tasks]
    written: list[TaskWritten] = []
    for folder, check in zip(folders, check_written(folders), strict=True):
        written.append(
            TaskWritten(
                name=check.name,
                path=str(folder),
                valid=check.valid,
                problems=[p.message for p in check.problems if p.severity == "error"],
                metadata={} if check.task is None else _brief(check.task.metadata),
            )
        )
    return AdaptReport(adapter=adapter.name, source=source, out=str(out), tasks=written)


def _brief(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k != "crucible" and not isinstance(v, dict)}
