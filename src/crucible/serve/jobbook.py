"""The service's job as `crucible runs`, `report` and `view` see it: job.json, the
index's job row and trial rows (written as a JobRunner writes them, through a
BatchWriter), and result.json's summary, rewritten as grades finish. The job's size
is its number of grades so far, not tasks x attempts.

A service's job grows without end, and the summary is computed over every grade
(O(n): ~8 ms a thousand grades), on the event loop that answers requests. So it is
rewritten every SUMMARY_INTERVAL_SEC, or less often once it costs more than
SUMMARY_SHARE of the loop's time; close() writes the final one whatever the interval."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from crucible.engine.job import _other_run_alive
from crucible.engine.summary import summarize
from crucible.records.job import JobConfig, JobSummary
from crucible.records.trial import TrialResult, utcnow
from crucible.store.index import BatchWriter, Index
from crucible.store.layout import dump, iter_trial_results, write_json_atomic

SUMMARY_INTERVAL_SEC = 1.0
SUMMARY_SHARE = 0.02  # the most of the event loop's time the running summary may take


def next_summary_in(cost_s: float) -> float:
    """Seconds to the next running summary, after one that took `cost_s`."""
    return max(SUMMARY_INTERVAL_SEC, cost_s / SUMMARY_SHARE)


class JobBusy(Exception):
    """Another live process serves this job."""


class JobBook:
    def __init__(self, cfg: JobConfig, jobs_dir: Path) -> None:
        self.cfg = cfg
        self.jobs_dir = jobs_dir
        self.job_dir = jobs_dir / cfg.job_id
        self.results: dict[str, TrialResult] = {}  # final trial records, by trial name
        self._index: Index | None = None
        self._writer: BatchWriter | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def open(self) -> bool:
        return self._index is not None

    def start(self, finished: set[str], unfinished: list[str], n_grades: int) -> bool:
        """Write job.json and the job's rows: the `finished` trials' rows from their
        folders, the `unfinished` ones' removed. Whether an earlier run of this job left
        things to clean up (it was recorded before, and no other live process serves it).
        Raises JobBusy when one does."""
        resuming = (self.job_dir / "job.json").exists()
        self.job_dir.mkdir(parents=True, exist_ok=True)
        index = Index(self.jobs_dir)
        if resuming and _other_run_alive(index, self.cfg.job_id):
            index.close()
            raise JobBusy(f"job {self.cfg.job_id!r} is being served by another process")
        write_json_atomic(self.job_dir / "job.json", dump(self.cfg))
        self._index = index
        self._upsert("running", n_grades)
        trials = [r for r in iter_trial_results(self.job_dir) if r.trial_name in finished]
        self.results = {r.trial_name: r for r in trials}
        index.write_trials(trials)
        index.delete_trials(self.cfg.job_id, unfinished)
        self._writer = BatchWriter(index)
        self._writer.start()
        return resuming

    def follow(self, n_grades: Callable[[], int], attempts: Callable[[], int]) -> None:
        """Keep result.json, the job row and job.json's `attempts` (the most grades of
        one task, which reports plan by) current while the service runs."""
        self._task = asyncio.create_task(self._follow(n_grades, attempts))

    def set_attempts(self, attempts: int) -> None:
        if attempts > self.cfg.attempts:
            self.cfg.attempts = attempts
            write_json_atomic(self.job_dir / "job.json", dump(self.cfg))

    def add(self, result: TrialResult) -> None:
        self.results[result.trial_name] = result
        if self._writer is not None:
            self._writer.add(result)

    async def close(self, status: str, n_grades: int) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._index is None:
            return
        if self._writer is not None:
            await self._writer.close()
        write_json_atomic(self.job_dir / "result.json", dump(self.summary(status, n_grades)))
        self._upsert(status, n_grades)
        self._index.close()
        self._index = None

    def summary(self, status: str, n_grades: int) -> JobSummary:
        s = summarize(self.cfg.job_id, status, list(self.results.values()), n_grades)
        s.started_at = self.cfg.created_at
        s.finished_at = utcnow() if status != "running" else None
        return s

    def _upsert(self, status: str, n_grades: int) -> None:
        assert self._index is not None
        self._index.upsert_job(self.cfg, status=status, path=self.job_dir, pid=os.getpid(),
                               n_trials=n_grades)  # fmt: skip

    async def _follow(self, n_grades: Callable[[], int], attempts: Callable[[], int]) -> None:
        last, wait = (-1, -1), SUMMARY_INTERVAL_SEC
        while True:
            await asyncio.sleep(wait)
            self.set_attempts(attempts())
            now = (len(self.results), n_grades())
            if now != last:
                last, t0 = now, time.monotonic()
                write_json_atomic(self.job_dir / "result.json",
                                  dump(self.summary("running", now[1])))  # fmt: skip
                self._upsert("running", now[1])
                wait = next_summary_in(time.monotonic() - t0)
