"""Reading training runs' folders (records/train.py): the run, its metrics per step, its
sampled responses, and what `crucible runs get` shows of one (TrainDetail).

Every file is read within a byte cap and line by line; a line that does not parse (a
run killed mid-write) is left out and counted, never fatal. The run's folder is written
by crucible's own process, but samples hold model output: readers print it escaped.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from crucible.records.train import (
    METRICS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    Checkpoint,
    SampleRecord,
    StepMetrics,
    TrainRun,
)

M = TypeVar("M", bound=BaseModel)
MAX_RUN_BYTES = 4 << 20
MAX_JSONL_BYTES = 256 << 20  # a long run's samples; past this the rest is left out


def read_run(folder: Path) -> TrainRun:
    path = folder / RUN_FILE
    with path.open("rb") as f:
        data = f.read(MAX_RUN_BYTES + 1)
    if len(data) > MAX_RUN_BYTES:
        raise ValueError(f"{path} is over {MAX_RUN_BYTES} bytes")
    return TrainRun.model_validate_json(data)


def read_jsonl(path: Path, model: type[M]) -> tuple[list[M], int]:
    """The records of a JSON Lines file, and how many lines were left out (bad or past
    the cap)."""
    out: list[M] = []
    bad = 0
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return out, 0
    with f:
        data = f.read(MAX_JSONL_BYTES + 1)
    if len(data) > MAX_JSONL_BYTES:
        data = data[:MAX_JSONL_BYTES].rsplit(b"\n", 1)[0]
        bad += 1
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            out.append(model.model_validate_json(line))
        except ValidationError:
            bad += 1
    return out, bad


def read_metrics(folder: Path) -> tuple[list[StepMetrics], int]:
    return read_jsonl(folder / METRICS_FILE, StepMetrics)


def read_samples(folder: Path) -> tuple[list[SampleRecord], int]:
    return read_jsonl(folder / SAMPLES_FILE, SampleRecord)


class StepPoint(BaseModel):
    """One step of `runs get --verbose`: its reward, components and time."""

    step: int
    reward_mean: float | None
    reward_std: float | None
    components: dict[str, float] = Field(default_factory=dict)
    step_time_s: float | None
    n_samples: int


class TrainDetail(BaseModel):
    """`crucible runs get ID` of a training run."""

    run_id: str
    kind: str = "train"
    status: str
    interrupted: bool = False
    hint: str | None = None
    recipe: str
    model: str
    dataset: str
    reward: str
    smoke: bool
    step: int
    total_steps: int | None
    reward_mean: float | None  # the last recorded step's
    components: dict[str, float] = Field(default_factory=dict)  # the last step's
    checkpoints: list[Checkpoint]
    n_samples: int
    error: str | None
    knobs: dict[str, Any]
    path: str
    pid: int | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    reward_per_step: list[StepPoint] | None = None  # with --verbose
    skipped_lines: int = 0  # metric or sample lines that did not parse


def train_detail(folder: Path, *, status: str, interrupted: bool, hint: str | None,
                 verbose: bool = False) -> TrainDetail:  # fmt: skip
    run = read_run(folder)
    metrics, bad_m = read_metrics(folder)
    samples, bad_s = read_samples(folder)
    last = metrics[-1] if metrics else None
    points = [StepPoint(step=m.step, reward_mean=m.reward_mean, reward_std=m.reward_std,
                        components=m.components, step_time_s=m.step_time_s,
                        n_samples=m.n_samples) for m in metrics]  # fmt: skip
    return TrainDetail(
        run_id=run.id, status=status, interrupted=interrupted, hint=hint, recipe=run.recipe,
        model=run.model, dataset=run.dataset, reward=run.reward, smoke=run.smoke,
        step=run.step, total_steps=run.total_steps,
        reward_mean=last.reward_mean if last else None,
        components=last.components if last else {}, checkpoints=run.checkpoints,
        n_samples=len(samples), error=run.error, knobs=run.knobs, path=str(folder),
        pid=run.pid, created_at=run.created_at, started_at=run.started_at,
        finished_at=run.finished_at, reward_per_step=points if verbose else None,
        skipped_lines=bad_m + bad_s,
    )  # fmt: skip
