"""The terminal agent's trajectory record: every message, command, output and usage.

Written as an append-only event log (agent/trajectory.jsonl, one JSON object
a line: a header, then messages, turns, events and status lines, capped in
bytes with any truncation recorded); older runs wrote one agent/trajectory.json.
`load_trajectory` reads either into the `Trajectory` aggregate.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crucible.records.trial import AgentError, utcnow
from crucible.records.usage import Usage

RAW_OUTPUT_CAP = 100_000  # characters of a command's output kept beyond what the model saw


class Action(BaseModel):
    tool: str  # bash | docs | submit | invalid
    arguments: dict[str, Any] | str
    tool_call_id: str | None = None
    output: str = ""  # what the model was shown
    raw_output: str | None = None  # the command's output before the budget cut, capped
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False
    started_at: datetime = Field(default_factory=utcnow)
    duration_sec: float = 0.0


class Turn(BaseModel):
    index: int
    started_at: datetime
    finished_at: datetime | None = None
    mode: str  # tools | text
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    latency_sec: float = 0.0
    attempts: int = 1
    prompt_messages: int = 0
    estimated_prompt_tokens: int = 0
    assistant: dict[str, Any] = Field(default_factory=dict)
    finish_reason: str | None = None
    reasoning_content: str | None = None
    nudge: str | None = None  # the note sent back when the reply had no usable action
    format_error: bool = False  # no usable action: counted toward max_format_errors
    # For RL: what the server returned for training (prompt_token_ids, token_ids, logprobs),
    # the JSON values exactly as sent; empty unless collect_tokens is on.
    metrics: dict[str, Any] = Field(default_factory=dict)
    actions: list[Action] = Field(default_factory=list)


class Event(BaseModel):
    at: datetime = Field(default_factory=utcnow)
    kind: str  # mode_switch | context_trim | context_summary | context_overflow | ...
    detail: str = ""
    # context_trim / context_summary: the messages the model saw after it
    messages: list[dict[str, Any]] | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class Trajectory(BaseModel):
    schema_version: int = 2  # 2: turn metrics, nudges, trim records; the append-only log
    agent: str
    agent_version: str
    model: str
    base_url: str
    task: str
    mode: str
    config: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    status: str = "running"  # running | submitted | turn_limit | timeout | context_overflow | model_failed | ...
    error: AgentError | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    n_turns: int = 0
    messages: list[dict[str, Any]] = Field(
        default_factory=list
    )  # the whole conversation, untrimmed
    turns: list[Turn] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    # Set by load_trajectory when the log hit its byte cap: {"at_bytes", "cap_bytes"}.
    truncation: dict[str, Any] | None = None


TRAJECTORY_LOG = "trajectory.jsonl"  # in the trial's agent/ folder
TRAJECTORY_JSON = "trajectory.json"  # the whole record, rewritten per turn (older runs)
_STATUS_FIELDS = (
    "status",
    "error",
    "usage",
    "cost_usd",
    "n_turns",
    "mode",
    "updated_at",
    "finished_at",
)


def status_line(traj: Trajectory) -> dict[str, Any]:
    return {"type": "status", **traj.model_dump(mode="json", include=set(_STATUS_FIELDS))}


def header_line(traj: Trajectory) -> dict[str, Any]:
    return {
        "type": "header",
        **traj.model_dump(mode="json", exclude={"messages", "turns", "events", "truncation"}),
    }


def load_trajectory(path: Path) -> Trajectory:
    """The record at `path`: an agent/ folder, its trajectory.jsonl, or an old trajectory.json.

    Raises FileNotFoundError when there is none and ValueError when it is not a
    trajectory; a log cut short (a crash mid-line) loads up to its last whole line.
    """
    if path.is_dir():
        path = (
            path / TRAJECTORY_LOG if (path / TRAJECTORY_LOG).is_file() else path / TRAJECTORY_JSON
        )
    if path.suffix == ".json":
        return Trajectory.model_validate_json(path.read_bytes())
    traj: Trajectory | None = None
    with path.open("rb") as fh:
        for raw in fh:
            try:
                line = json.loads(raw)
            except ValueError:
                break  # the line in flight when the writer stopped
            kind = line.pop("type", None) if isinstance(line, dict) else None
            if kind == "header":
                traj = Trajectory.model_validate(line)
                continue
            if traj is None:
                raise ValueError(f"{path}: the log does not start with a header")
            if kind == "message":
                traj.messages.append(line["message"])
            elif kind == "message_set":
                traj.messages[int(line["index"])] = line["message"]
            elif kind == "turn":
                traj.turns.append(Turn.model_validate(line["turn"]))
            elif kind == "event":
                traj.events.append(Event.model_validate(line["event"]))
            elif kind == "status":
                status = Trajectory.model_validate({**_identity(traj), **line})
                for key in _STATUS_FIELDS:
                    if key in line:
                        setattr(traj, key, getattr(status, key))
            elif kind == "truncated":
                traj.truncation = line
    if traj is None:
        raise ValueError(f"{path}: an empty trajectory log")
    return traj


def _identity(traj: Trajectory) -> dict[str, Any]:
    return traj.model_dump(
        mode="json", include={"agent", "agent_version", "model", "base_url", "task", "mode"}
    )
