"""One row of an exported prompt set (`crucible dataset export`, export/dataset.py): a task
as a trainer's prompt, and the columns that lead a completion back to the task the grading
service grades (trainers/ reads them: TRL passes every dataset column to a reward function
by name).

Columns:
- `prompt`: chat messages, `[{"role": "system", ...}, {"role": "user", ...}]` (the system
  message only when one is given): TRL's conversational `prompt` column;
- `label`: the task's expected answer, a `[metadata]` key's value as text ("" when none);
- `task_id`: the task's name, what `POST /v1/grade` calls `task.id`;
- `task_hash`: the task's digest (sha256 over its folder), sent as `task.hash` so the
  service refuses to grade against a task that changed since the export;
- `metadata`: the task's category, difficulty and tags ("" and [] when not set), and its
  `task_id` and `task_hash` again, for trainers that hand a reward only a row's metadata
  (slime's `--metadata-key`, verl's `extra_info`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PROMPT = "prompt"
LABEL = "label"
TASK_ID = "task_id"
TASK_HASH = "task_hash"
METADATA = "metadata"
COLUMNS = (PROMPT, LABEL, TASK_ID, TASK_HASH, METADATA)


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user"]
    content: str


class RowMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str = ""
    difficulty: str = ""
    tags: list[str] = Field(default_factory=list)
    task_id: str = ""
    task_hash: str = ""


class PromptRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: list[Message] = Field(min_length=1)
    label: str = ""
    task_id: str = Field(min_length=1)
    task_hash: str = Field(min_length=1)
    metadata: RowMetadata = Field(default_factory=RowMetadata)
