"""Log files of a job (job.log) and of a trial (trial.log).

One line per event: `<ISO 8601 UTC timestamp> <LEVEL> <message>`; messages
never contain newlines (they are escaped), so every reader can split lines.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import NamedTuple, TextIO

from crucible.records.text import storable_text
from crucible.records.trial import utcnow

TRIAL_LOG = "trial.log"
JOB_LOG = "job.log"


class LogLine(NamedTuple):
    timestamp: datetime
    level: str
    message: str


def format_line(level: str, message: str, when: datetime | None = None) -> str:
    ts = (when or utcnow()).isoformat(timespec="milliseconds")
    # storable: a message may quote a sandbox's string (a file name that is not UTF-8)
    msg = storable_text(message).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "")
    return f"{ts} {level.upper()} {msg}\n"


def parse_line(line: str) -> LogLine | None:
    parts = line.rstrip("\n").split(" ", 2)
    if len(parts) < 3:
        return None
    try:
        ts = datetime.fromisoformat(parts[0])
    except ValueError:
        return None
    return LogLine(ts, parts[1], parts[2].replace("\\n", "\n").replace("\\\\", "\\"))


class FileLog:
    """Append-only, line-buffered log file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: TextIO | None = None

    def write(self, level: str, message: str) -> None:
        if self._fh is None:
            self._fh = self.path.open("a", buffering=1, encoding="utf-8")
        self._fh.write(format_line(level, message))

    def info(self, message: str) -> None:
        self.write("INFO", message)

    def warning(self, message: str) -> None:
        self.write("WARNING", message)

    def error(self, message: str) -> None:
        self.write("ERROR", message)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_lines(path: Path) -> list[LogLine]:
    if not path.exists():
        return []
    out = []
    with path.open(errors="replace") as fh:
        for raw in fh:
            parsed = parse_line(raw)
            if parsed:
                out.append(parsed)
    return out
