"""A build's log: its last lines, and the error that quotes them when the build fails."""

from __future__ import annotations

import collections
from pathlib import Path

from crucible.errors import TaskInvalid

LOG_TAIL_LINES = 30


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as fh:
            tail = collections.deque((ln.rstrip("\n") for ln in fh if ln.strip()), maxlen=lines)
    except OSError:
        return ""
    return "\n".join(tail)


def build_failed(what: str, log: Path) -> TaskInvalid:
    return TaskInvalid(
        f"its image cannot be built: {what}\n--- build log (last lines; all of it in {log}) ---\n"
        f"{log_tail(log)}"
    )
