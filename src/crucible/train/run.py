"""RunHandle: one training run's folder and index row, written by the process that runs it.

The folder (records/train.py) is the record: run.json is rewritten atomically on every
change of state, step or checkpoints; metrics and samples are appended as JSON Lines. The
index row (kind "train") is a copy for `crucible runs list`, carrying the runner's pid so
a reader in another shell can tell a live run from one whose process died. Samples are
capped at the config's `trace_samples` per step; text from the model is stored as it came
(escaped where it is not storable) and printed without control characters by the readers.
"""

from __future__ import annotations

import os
import secrets
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from crucible.records.text import storable_text
from crucible.records.train import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    TERMINAL_STATES,
    TRAIN_LOG,
    Checkpoint,
    SampleRecord,
    StepMetrics,
    TrainRun,
    TrainState,
)
from crucible.records.trial import utcnow
from crucible.store.index import Index
from crucible.store.layout import CANCEL_FILE, write_json_atomic
from crucible.store.logs import format_line
from crucible.store.train_runs import read_run


def new_run_id(now: datetime | None = None) -> str:
    now = now or utcnow()
    return f"train-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


class RunHandle:
    """Writes one run's records; thread-safe (a trainer's callbacks may run off-thread)."""

    def __init__(self, jobs_dir: Path, record: TrainRun, *, trace_samples: int = 16) -> None:
        self.jobs_dir = jobs_dir
        self.folder = jobs_dir / record.id
        self.record = record
        self.trace_samples = trace_samples
        self._lock = threading.Lock()
        self._samples_at: dict[int, int] = {}

    # -- creation ------------------------------------------------------------------
    @classmethod
    def create(cls, jobs_dir: Path, record: TrainRun, *, trace_samples: int = 16) -> RunHandle:
        handle = cls(jobs_dir, record, trace_samples=trace_samples)
        handle.folder.mkdir(parents=True, exist_ok=False)
        (handle.folder / CHECKPOINTS_DIR).mkdir()
        handle.save()
        return handle

    @classmethod
    def open(cls, folder: Path) -> RunHandle:
        """The handle of an existing run (the detached worker's)."""
        rec = read_run(folder)
        return cls(folder.parent, rec, trace_samples=int(rec.knobs.get("trace_samples", 16)))

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def checkpoints_dir(self) -> Path:
        return self.folder / CHECKPOINTS_DIR

    def save(self) -> None:
        """Rewrite run.json and the index row from `record`."""
        write_json_atomic(self.folder / RUN_FILE, self.record.model_dump_json(indent=2))
        idx = Index(self.jobs_dir)
        try:
            r = self.record
            idx.upsert_run(r.id, kind=r.kind, name=r.id, status=r.state, agent=r.recipe,
                           model=r.model, env="local", dataset=r.dataset,
                           n_trials=r.total_steps or 0, path=self.folder,
                           pid=r.pid if r.state == "running" else None,
                           created_at=r.created_at)  # fmt: skip
        finally:
            idx.close()

    # -- the run's life ------------------------------------------------------------------
    def start(self, total_steps: int | None = None) -> None:
        with self._lock:
            self.record.state = "running"
            self.record.pid = os.getpid()
            self.record.started_at = utcnow()
            self.record.total_steps = total_steps or self.record.total_steps
            self.save()
        self.log(f"started (pid {os.getpid()})")

    def finish(self, state: TrainState, error: str | None = None) -> None:
        with self._lock:
            if self.record.state in TERMINAL_STATES:
                return
            self.record.state = state
            self.record.error = storable_text(error[:4000]) if error else None
            self.record.finished_at = utcnow()
            self.save()
        self.log(f"finished: {state}" + (f": {error.splitlines()[-1]}" if error else ""))

    def cancel_requested(self) -> bool:
        return (self.folder / CANCEL_FILE).exists()

    # -- what a recipe records ---------------------------------------------------------
    def log(self, line: str, level: str = "INFO") -> None:
        with self._lock, (self.folder / TRAIN_LOG).open("a", encoding="utf-8") as f:
            f.write(format_line(level, str(line)))

    def add_step(self, metrics: StepMetrics) -> None:
        with self._lock:
            _append(self.folder / METRICS_FILE, metrics.model_dump_json())
            self.record.step = max(self.record.step, metrics.step)
            self.save()

    def add_samples(self, samples: list[SampleRecord]) -> int:
        """Record at most `trace_samples` per step in all; how many were kept."""
        kept = 0
        with self._lock:
            for s in samples:
                have = self._samples_at.get(s.step, 0)
                if have >= self.trace_samples:
                    continue
                self._samples_at[s.step] = have + 1
                clean = s.model_copy(update={"prompt": storable_text(s.prompt),
                                             "response": storable_text(s.response)})  # fmt: skip
                _append(self.folder / SAMPLES_FILE, clean.model_dump_json())
                kept += 1
        return kept

    def add_checkpoint(self, step: int, path: Path) -> None:
        try:
            shown = str(path.resolve().relative_to(self.folder.resolve()))
        except ValueError:
            shown = str(path)
        with self._lock:
            self.record.checkpoints.append(Checkpoint(step=step, path=shown))
            self.save()
        self.log(f"checkpoint at step {step}: {shown}")


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def summary(record: TrainRun) -> dict[str, Any]:
    return record.model_dump(mode="json", include={"id", "kind", "state", "recipe", "model",
                                                   "step", "total_steps"})  # fmt: skip
