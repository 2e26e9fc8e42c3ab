"""The terminal agent's trajectory: every message, command, output and usage, as JSON.

Rewritten atomically after every turn (agent/trajectory.json), so a crash or
a kill loses at most the turn in flight.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crucible.agents.models.usage import Usage
from crucible.engine.results import AgentError, utcnow
from crucible.store.layout import write_json_atomic

TRAJECTORY_FILE = "trajectory.json"
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
    actions: list[Action] = Field(default_factory=list)


class Event(BaseModel):
    at: datetime = Field(default_factory=utcnow)
    kind: str  # mode_switch | context_trim | context_overflow | ...
    detail: str = ""


class Trajectory(BaseModel):
    schema_version: int = 1
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

    def save(self, logs_dir: Path) -> Path:
        self.updated_at = utcnow()
        logs_dir.mkdir(parents=True, exist_ok=True)
        path = logs_dir / TRAJECTORY_FILE
        write_json_atomic(path, self.model_dump_json(indent=1))
        return path
