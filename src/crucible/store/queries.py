"""What a jobs dir holds: its jobs as records, id resolution, liveness, trial rows and counts.

Two sources, read-only: the SQLite index (the running job is its only writer)
and the job folders (job.json, result.json, trial result.json). The index is
preferred, read through `Index`'s read methods (its SQL stays in index.py); a
job that has a folder but no index row (index deleted, a job that died before
its first write) is still found through its folder. What `runs list|get` make
of these records is in job_views.py.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crucible.records.reward_range import BOUND
from crucible.records.trial import TrialResult, counted_as
from crucible.store.index import TRIAL_COLUMNS, Index, trial_row
from crucible.store.layout import (
    INDEX_NAME,
    JobConfig,
    JobSummary,
    iter_trial_results,
    read_job_config,
    read_job_summary,
)
from crucible.store.procs import pid_alive, same_process
from crucible.store.trial_load import RESULT, Skipped


class JobNotFound(LookupError):
    def __init__(self, job_id: str, jobs_dir: Path) -> None:
        super().__init__(f"no job matches {job_id!r} in {jobs_dir}")
        self.job_id = job_id
        self.jobs_dir = jobs_dir


class AmbiguousJobId(LookupError):
    def __init__(self, prefix: str, matches: list[str]) -> None:
        shown = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
        super().__init__(f"{prefix!r} matches {len(matches)} jobs: {shown}")
        self.prefix = prefix
        self.matches = matches


# -- time -------------------------------------------------------------------


def parse_dt(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        dt = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


# -- records ----------------------------------------------------------------


@dataclass
class JobRecord:
    """One job as found on disk, before its trials are counted."""

    job_id: str
    path: Path
    name: str
    recorded_status: str  # as stored by the runner
    agent: str
    model: str | None
    env: str
    dataset: list[str]
    n_trials: int
    pid: int | None
    created_at: datetime | None
    updated_at: datetime | None
    in_index: bool
    summary: JobSummary | None = None
    alive: bool | None = None  # None: no pid to check
    pid_start: str | None = None  # when the pid's process started (store/procs.py)
    kind: str = "eval"  # JobConfig.kind: eval, generate, train

    @property
    def interrupted(self) -> bool:
        """Recorded as running, but its process is gone: it crashed or was killed."""
        return self.recorded_status == "running" and self.alive is False

    @property
    def status(self) -> str:
        return "failed" if self.interrupted else self.recorded_status

    @property
    def running(self) -> bool:
        return self.status == "running"


class TrialStats(BaseModel):
    n_done: int = 0  # finished: graded or ended in an error (cancelled trials are not)
    n_cancelled: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)
    n_rewarded: int = 0
    reward_sum: float = 0.0

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.n_rewarded if self.n_rewarded else None

    def add(self, outcome: str, reward: float | None, count: int = 1) -> None:
        if outcome == "cancelled":  # not finished: a resume runs it again
            self.n_cancelled += count
        else:
            self.n_done += count
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + count
        if outcome == "graded" and reward is not None:
            self.n_rewarded += count
            self.reward_sum += reward * count
        elif counted_as(outcome) is not None:  # verifier_failed counts as 0
            self.n_rewarded += count


@dataclass
class JobsDir:
    """A read-only view of a jobs dir; open with `JobsDir.open(path)`, then close."""

    root: Path
    index: Index | None
    _records: dict[str, JobRecord] | None = field(default=None, repr=False)
    # Bad trial records the reads so far left out (store/trial_load.py), for the CLI to warn.
    skipped: list[Skipped] = field(default_factory=list)

    @classmethod
    def open(cls, root: Path) -> JobsDir:
        index = None
        if (root / INDEX_NAME).exists():
            try:
                index = Index(root, readonly=True)
                index.check_readable()
            except sqlite3.Error:
                # A half-created index (the first job is creating it): fall back to folders.
                if index is not None:
                    index.close()
                index = None
        return cls(root=root, index=index)

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None

    def __enter__(self) -> JobsDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs ---------------------------------------------------------------
    def records(self) -> dict[str, JobRecord]:
        if self._records is None:
            self._records = self._load_records()
        return self._records

    def _load_records(self) -> dict[str, JobRecord]:
        out: dict[str, JobRecord] = {}
        if self.index is not None:
            for row in self.index.list_jobs():
                rec = self._from_index_row(row)
                out[rec.job_id] = rec
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.name in out or not (child / "job.json").is_file():
                    continue
                rec_f = self._from_folder(child)
                if rec_f is not None:
                    out[rec_f.job_id] = rec_f
        for rec in out.values():
            if rec.recorded_status == "running" and rec.pid:
                # A reused pid is not the job's process: alive only if it started then.
                start = rec.pid_start
                rec.alive = same_process(rec.pid, start) if start else pid_alive(rec.pid)
        return out

    def _from_index_row(self, row: sqlite3.Row) -> JobRecord:
        path = Path(row["path"])
        if not path.is_absolute() or not path.exists():
            # The index keeps the path as the job saw it; the folder beside the index wins.
            local = self.root / row["job_id"]
            if local.exists():
                path = local
        summary = _safe_summary(path)
        return JobRecord(
            job_id=row["job_id"],
            path=path,
            name=row["name"],
            recorded_status=row["status"],
            agent=row["agent"],
            model=row["model"],
            env=row["env"],
            dataset=[d for d in (row["dataset"] or "").split(",") if d],
            n_trials=int(row["n_trials"]),
            pid=row["pid"],
            pid_start=row["pid_start"] if "pid_start" in row.keys() else None,  # older index
            kind=row["kind"] if "kind" in row.keys() else "eval",
            created_at=parse_dt(row["created_at"]),
            updated_at=parse_dt(row["updated_at"]),
            in_index=True,
            summary=summary,
        )

    def _from_folder(self, jdir: Path) -> JobRecord | None:
        try:
            cfg = read_job_config(jdir)
        except (OSError, ValueError):
            return None
        summary = _safe_summary(jdir)
        updated = None
        for name in ("result.json", "job.json"):
            p = jdir / name
            if p.exists():
                updated = datetime.fromtimestamp(p.stat().st_mtime, UTC)
                break
        return JobRecord(
            job_id=cfg.job_id,
            path=jdir,
            name=cfg.name,
            recorded_status=summary.status if summary else "unknown",
            agent=cfg.agent,
            model=cfg.model,
            env=cfg.env,
            dataset=list(cfg.dataset),
            n_trials=summary.n_trials if summary else len(cfg.tasks) * cfg.attempts,
            pid=None,
            created_at=parse_dt(cfg.created_at),
            updated_at=updated,
            in_index=False,
            summary=summary,
            kind=cfg.kind,
        )

    def resolve(self, job_id: str) -> JobRecord:
        """The job named by a full id or a unique prefix of one."""
        recs = self.records()
        if job_id in recs:
            return recs[job_id]
        matches = sorted(k for k in recs if k.startswith(job_id)) if job_id else []
        if not matches:
            raise JobNotFound(job_id, self.root)
        if len(matches) > 1:
            raise AmbiguousJobId(job_id, matches)
        return recs[matches[0]]

    # -- trials -------------------------------------------------------------
    def trial_stats(self) -> dict[str, TrialStats]:
        """Counts per job in one query (index), plus folder scans for jobs not indexed."""
        stats: dict[str, TrialStats] = {}
        if self.index is not None:
            for job_id, outcome, n, reward_sum, n_rewarded in self.index.outcome_totals():
                st = stats.setdefault(job_id, TrialStats())
                st.add(outcome, None, n)
                if outcome == "graded":
                    st.n_rewarded += n_rewarded
                    st.reward_sum += reward_sum or 0.0
        for rec in self.records().values():
            if not rec.in_index:
                stats[rec.job_id] = _stats_of(iter_trial_results(rec.path, self.skipped))
        return stats

    def trial_rows(self, rec: JobRecord) -> list[dict[str, Any]]:
        """Every finished trial of a job, as flat rows (index columns)."""
        if rec.in_index and self.index is not None:
            rows = []
            for row in map(dict, self.index.trials(rec.job_id)):
                problem = _row_problem(row)
                if problem is None:
                    rows.append(row)
                else:  # a row written before rewards were range-checked
                    path = rec.path / str(row["trial_name"]) / RESULT
                    self.skipped.append(Skipped(path, f"index row: {problem}"))
            return rows
        cols = [c.strip() for c in TRIAL_COLUMNS.split(",")]
        return [
            dict(zip(cols, trial_row(r), strict=True))
            for r in iter_trial_results(rec.path, self.skipped)
        ]

    def config(self, rec: JobRecord) -> JobConfig | None:
        try:
            return read_job_config(rec.path)
        except (OSError, ValueError):
            return None


def _row_problem(row: dict[str, Any]) -> str | None:
    """Why an index row's rewards cannot be counted (not finite, or past BOUND), or None."""
    values: list[tuple[str, float | None]] = [("reward", row.get("reward"))]
    try:
        stored = json.loads(row["rewards_json"]) if row.get("rewards_json") else {}
    except ValueError:
        return "rewards_json is not valid JSON"
    if isinstance(stored, dict):
        values += [(str(k), v) for k, v in stored.items() if isinstance(v, int | float)]
    for key, v in values:
        if v is not None and not (math.isfinite(v) and abs(v) <= BOUND):
            return f"reward {key!r} is {v!r}"
    return None


def _safe_summary(jdir: Path) -> JobSummary | None:
    try:
        return read_job_summary(jdir)
    except (OSError, ValueError):
        return None  # being rewritten; the index has the counts


def _stats_of(results: list[TrialResult]) -> TrialStats:
    st = TrialStats()
    for r in results:
        st.add(r.outcome, r.reward)
    return st


def current_status(jobs_dir: Path, job_id: str) -> JobRecord | None:
    """A fresh read of one job (for polling loops: follow, cancel --wait)."""
    with JobsDir.open(jobs_dir) as jd:
        try:
            return jd.resolve(job_id)
        except LookupError:
            return None
