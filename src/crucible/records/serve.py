"""The grading service's wire format (`crucible serve`, serve/): what a trainer sends and
gets back. Shared by the server (serve/) and the client adapters (trainers/).

A grade item's `id` is an idempotency key: the same id with the same submission never
starts a second sandbox; with another submission (or another task hash) it is a 409.

Statuses, and what a trainer does with each:
- `ok`: graded; train on it (a grading failure blamed on the submission counts 0, with
  its reason in `error`);
- `invalid`: the submission is malformed or does not apply; reward 0, the policy's fault;
- `unscorable`: the infrastructure failed after the service's own retries, or the task
  is broken; reward None: mask it;
- `pending`: not done within `wait_s`; poll `GET /v1/grade/{id}`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crucible.records.submission import Submission

SCHEMA_VERSION = "1"
MAX_ID_CHARS = 200
MAX_ITEMS = 1000  # per request
MAX_WAIT_S = 3600.0


class GradeStatus(StrEnum):
    ok = "ok"
    invalid = "invalid"
    unscorable = "unscorable"
    pending = "pending"


class TaskRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=500)  # the task's name
    hash: str | None = Field(default=None, max_length=128)  # its digest, when the client pins it


class GradeItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    task: TaskRef
    submission: Submission
    group_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    meta: dict[str, Any] = Field(default_factory=dict)


class GradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[GradeItem] = Field(min_length=1, max_length=MAX_ITEMS)
    wait_s: float = Field(default=600.0, ge=0.0, le=MAX_WAIT_S)


class GradeResult(BaseModel):
    id: str
    status: GradeStatus
    reward: float | None = None
    rewards: dict[str, float] | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None  # why it is invalid, unscorable, or graded 0 by blame
    task_hash: str | None = None
    cached: bool = False  # answered from a grade that had already started or finished
    trial: str | None = None  # <job id>/<trial name>: `crucible runs` sees it
    group_id: str | None = None


class GradeResponse(BaseModel):
    schema_version: str = SCHEMA_VERSION
    results: list[GradeResult]


# ---- sessions: multi-turn rollouts driven by the trainer's own agent loop ----------


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: TaskRef
    idle_timeout_s: float | None = Field(default=None, gt=0, le=86400)


class SessionInfo(BaseModel):
    id: str
    task_id: str
    task_hash: str
    workdir: str
    created_at: float
    idle_timeout_s: float


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str | list[str]
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    input: str | None = None


class ExecResponse(BaseModel):
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False


class UploadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    content: str  # text, or base64 when `base64` is true
    base64: bool = False
    mode: int = Field(default=0o644, ge=0, le=0o777)


class DownloadResponse(BaseModel):
    path: str
    content: str
    base64: bool = False


class SessionGradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, max_length=MAX_ID_CHARS)  # idempotency key
