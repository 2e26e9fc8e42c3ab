"""Training-run records: run.json (TrainRun), metrics.jsonl (StepMetrics), samples.jsonl
(SampleRecord), all in the run's folder under the jobs dir.

<jobs-dir>/<run-id>/
  run.json          TrainRun, rewritten as the run moves (state, step, checkpoints)
  metrics.jsonl     one StepMetrics per optimizer step: reward mean, per component, timing
  samples.jsonl     sampled responses with their rewards, at most `trace_samples` a step
  job.log           the run's log lines, as a job's (`crucible runs logs`)
  checkpoints/      what the recipe saves (each listed in run.json)
  cancel.request    present when `runs cancel` asked the run to stop
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from crucible.records.trial import utcnow

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
TRAIN_LOG = "job.log"  # the format of every job.log (store/logs.py): `runs logs` reads it
CHECKPOINTS_DIR = "checkpoints"

TrainState = Literal["pending", "running", "completed", "failed", "cancelled"]
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class Checkpoint(BaseModel):
    step: int
    path: str  # relative to the run folder when inside it, else as the recipe gave it
    created_at: datetime = Field(default_factory=utcnow)


class TrainRun(BaseModel):
    """run.json: one training run, as launched and as it goes."""

    schema_version: int = 1
    id: str
    kind: Literal["train"] = "train"
    state: TrainState = "pending"
    recipe: str
    model: str
    dataset: str  # the dataset's description (name, path or repo)
    reward: str  # the reward function's name
    knobs: dict[str, Any] = Field(default_factory=dict)  # TrainConfig's knobs, as run
    source: str | None = None  # the config module the run was launched from
    smoke: bool = False  # a smoke run: one step on a tiny local model
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    step: int = 0
    total_steps: int | None = None
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    pid: int | None = None
    error: str | None = None


class StepMetrics(BaseModel):
    """One line of metrics.jsonl: one optimizer step."""

    schema_version: int = 1
    step: int
    reward_mean: float | None = None
    reward_std: float | None = None
    components: dict[str, float] = Field(default_factory=dict)  # mean of each component
    n_samples: int = 0
    step_time_s: float | None = None
    extra: dict[str, float] = Field(default_factory=dict)  # the trainer's logs: loss, kl, ...
    at: datetime = Field(default_factory=utcnow)


class SampleRecord(BaseModel):
    """One line of samples.jsonl: a sampled response and its reward."""

    schema_version: int = 1
    step: int
    index: int  # its place in the step's batch
    prompt: str
    response: str
    reward: float | None = None
    components: dict[str, float] = Field(default_factory=dict)
    label: Any = None
