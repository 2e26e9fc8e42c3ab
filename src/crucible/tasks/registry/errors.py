"""The one error of the registry layer, with the exit code the CLI gives it."""

from __future__ import annotations

from crucible.errors import ExitCode, TaskInvalid


class DatasetError(TaskInvalid):
    """A registry that cannot be read, a dataset not in it, a task that cannot be pulled."""

    def __init__(
        self, message: str, *, hint: str | None = None, code: int = ExitCode.ERROR
    ) -> None:
        super().__init__(message, hint=hint)
        self.code = code
