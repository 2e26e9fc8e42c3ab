"""Saving the terminal agent's trajectory as an append-only log (the record is crucible.records.trajectory).

After every turn the new messages, the turn, any new events and a status
line are appended to agent/trajectory.jsonl and flushed, so a crash or a kill
loses at most the turn in flight, and a rollout writes O(turns) bytes. Past
`cap_bytes` one `truncated` line is written and only the final status after
it; the in-memory Trajectory stays whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crucible.records.trajectory import TRAJECTORY_LOG, Trajectory, header_line, status_line
from crucible.records.trial import utcnow

__all__ = ["TRAJECTORY_LOG", "TrajectoryLog"]

_RESERVE = 4096  # bytes kept for the truncation line and the final status


class TrajectoryLog:
    def __init__(self, logs_dir: Path, cap_bytes: int) -> None:
        self.path = logs_dir / TRAJECTORY_LOG
        self.cap = cap_bytes
        self.bytes_written = 0
        self.truncated = False
        self._messages = 0
        self._turns = 0
        self._events = 0
        self._system: Any = None
        self._started = False

    def _write(self, lines: list[dict[str, Any]], final: bool) -> None:
        out: list[bytes] = []
        size = self.bytes_written
        for line in lines:
            data = (json.dumps(line) + "\n").encode()
            is_status = line["type"] == "status"
            if self.truncated and not (is_status and final):
                continue
            if not is_status and size + len(data) > self.cap - _RESERVE:
                self.truncated = True
                note = {"type": "truncated", "at_bytes": size, "cap_bytes": self.cap}
                data = (json.dumps(note) + "\n").encode()
            out.append(data)
            size += len(data)
        if not out:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as fh:
            fh.write(b"".join(out))
        self.bytes_written = size

    def sync(self, traj: Trajectory, finished: bool = False) -> None:
        """Append what `traj` gained since the last call."""
        traj.updated_at = utcnow()
        lines: list[dict[str, Any]] = []
        if not self._started:
            self.path.unlink(missing_ok=True)  # a rerun of the same trial starts afresh
            lines.append(header_line(traj))
            self._started = True
        elif traj.messages and traj.messages[0] != self._system:  # the prompt changed (mode switch)
            lines.append({"type": "message_set", "index": 0, "message": traj.messages[0]})
        if traj.messages:
            self._system = traj.messages[0]
        lines += [{"type": "message", "message": m} for m in traj.messages[self._messages :]]
        lines += [
            {"type": "turn", "turn": t.model_dump(mode="json")} for t in traj.turns[self._turns :]
        ]
        lines += [
            {"type": "event", "event": e.model_dump(mode="json", exclude_none=True)}
            for e in traj.events[self._events :]
        ]
        lines.append(status_line(traj))
        self._messages, self._turns, self._events = (
            len(traj.messages),
            len(traj.turns),
            len(traj.events),
        )
        self._write(lines, finished)
