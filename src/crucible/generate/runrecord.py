"""The generation run as `crucible runs list/get/logs` see it: a run of kind `generate`.

DIR/job.json (a JobConfig, kind "generate"), DIR/result.json (a JobSummary whose
outcomes count accepted tasks and rejections by reason) and DIR/job.log; the row
in the jobs dir's index points at DIR, with this process's pid, so that a killed
run reads as interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from crucible.records.job import JobConfig, JobSummary
from crucible.records.trial import utcnow
from crucible.store.index import Index
from crucible.store.layout import default_jobs_dir, write_json_atomic
from crucible.store.logs import JOB_LOG, FileLog

if TYPE_CHECKING:
    from crucible.generate.state import GenState

KIND = "generate"


def outcomes(state: GenState) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in state.proposals:
        if p.phase != "done" or p.outcome is None:
            continue
        key = f"rejected:{p.reason}" if p.outcome == "rejected" else p.outcome
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


class RunRecord:
    def __init__(
        self, out: Path, state: GenState, *, jobs_dir: Path | None, solver_agent: str, env: str
    ) -> None:
        self.out = out
        self.jobs_dir = jobs_dir or default_jobs_dir()
        self.cfg = JobConfig(
            job_id=state.run_id,
            name=state.run_id,
            kind=KIND,
            agent=solver_agent,
            model=state.setter_model,
            env=env,
            attempts=state.k,
            dataset=[str(out.resolve())],
        )
        self.n_trials = 0
        self.started = utcnow()
        self._log: FileLog | None = None

    def start(self, n_proposals: int) -> None:
        self.n_trials = n_proposals
        if not (self.out / "job.json").exists():
            write_json_atomic(self.out / "job.json", self.cfg.model_dump_json(indent=1))
        self._index("running", os.getpid())

    def _index(self, status: str, pid: int | None) -> None:
        try:
            idx = Index(self.jobs_dir)
        except OSError:
            return  # the run's own folder stays the record
        try:
            idx.upsert_job(
                self.cfg, status=status, path=self.out.resolve(), pid=pid, n_trials=self.n_trials
            )
        finally:
            idx.close()

    def update(self, state: GenState, status: str = "running") -> None:
        done = sum(p.phase == "done" for p in state.proposals)
        summary = JobSummary(
            job_id=state.run_id,
            status=status,
            started_at=self.started,
            finished_at=utcnow() if status != "running" else None,
            n_trials=max(self.n_trials, len(state.proposals)),
            n_done=done,
            outcomes=outcomes(state),
        )
        write_json_atomic(self.out / "result.json", summary.model_dump_json(indent=1))

    def finish(self, state: GenState, status: str) -> None:
        self.update(state, status)
        self._index(status, None)
        if self._log is not None:
            self._log.close()

    def log(self, message: str) -> None:
        if self._log is None:
            self.out.mkdir(parents=True, exist_ok=True)
            self._log = FileLog(self.out / JOB_LOG)
        self._log.info(message)
