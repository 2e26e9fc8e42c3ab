"""What checking a task finds: each problem (file, line, severity) and the check's outcome."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from crucible.tasks.hostvars import HostRead
from crucible.tasks.models import Task

Severity = Literal["error", "warning"]
Report = Callable[..., None]  # (loc, message, severity="error")


class Problem(BaseModel):
    """One thing wrong with a task: where, why, and whether it stops the task from running."""

    path: Path
    line: int | None = None
    message: str
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def __str__(self) -> str:
        return f"{self.location()}: {self.severity}: {self.message}"


@dataclass
class TaskCheck:
    """What checking one task directory found."""

    path: Path
    name: str
    task: Task | None = None
    problems: list[Problem] = field(default_factory=list)
    # Every host variable the task names (task.toml's env tables, the compose file).
    host_reads: list[HostRead] = field(default_factory=list)
    # True for a path that names no task (no such file, no task.toml below): exit 3.
    not_found: bool = False

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]

    @property
    def valid(self) -> bool:
        return self.task is not None and not self.errors
