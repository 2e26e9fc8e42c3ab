"""The SQLite index of jobs and trials (WAL), beside the trial folders.

The trial folder's result.json is the record; the index is a fast, queryable
copy of it, written in batches by the running job (its only writer) and
reconciled from the folders on resume. Readers (`runs`, `report`, the viewer)
open it read-only and never block the writer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from crucible.records.job import JobConfig
from crucible.records.reward_range import BOUND
from crucible.records.text import storable_text
from crucible.records.trial import TrialResult, utcnow
from crucible.store.layout import INDEX_NAME
from crucible.store.procs import process_start

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id      TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    status      TEXT NOT NULL,
    agent       TEXT NOT NULL,
    model       TEXT,
    env         TEXT NOT NULL,
    dataset     TEXT NOT NULL,
    n_trials    INTEGER NOT NULL,
    path        TEXT NOT NULL,
    pid         INTEGER,
    pid_start   TEXT,
    kind        TEXT NOT NULL DEFAULT 'eval',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS trials (
    job_id       TEXT NOT NULL,
    trial_name   TEXT NOT NULL,
    task_name    TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    task_digest  TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    reward       REAL,
    rewards_json TEXT,
    error_kind   TEXT,
    error_message TEXT,
    retries      INTEGER NOT NULL DEFAULT 0,
    cost_usd     REAL,
    started_at   TEXT,
    finished_at  TEXT,
    duration_sec REAL,
    PRIMARY KEY (job_id, trial_name)
);
CREATE INDEX IF NOT EXISTS trials_by_job_finished ON trials(job_id, finished_at);
"""

TRIAL_COLUMNS = (
    "job_id, trial_name, task_name, attempt, task_digest, outcome, reward, rewards_json, "
    "error_kind, error_message, retries, cost_usd, started_at, finished_at, duration_sec"
)


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


def trial_row(r: TrialResult) -> tuple[Any, ...]:
    rewards = r.verifier_result.rewards if r.verifier_result else None
    duration = (
        (r.finished_at - r.started_at).total_seconds() if r.started_at and r.finished_at else None
    )
    # storable: the folders are the record and already are; a row made from a record
    # built in memory (a test's, a caller's) must not take the batch down with it
    return tuple(storable_text(v) if isinstance(v, str) else v for v in (
        r.job_id,
        r.trial_name,
        r.task_name,
        r.attempt,
        r.task_checksum,
        r.outcome,
        r.reward,
        json.dumps(rewards) if rewards is not None else None,  # ASCII: escapes everything
        r.error.kind.value if r.error else None,
        r.error.message[:2000] if r.error else None,
        r.retries,
        r.agent_result.cost_usd if r.agent_result else None,
        _iso(r.started_at),
        _iso(r.finished_at),
        duration,
    ))  # fmt: skip


def connect(jobs_dir: Path, *, readonly: bool = False) -> sqlite3.Connection:
    path = jobs_dir / INDEX_NAME
    if readonly:
        if not path.exists():
            raise FileNotFoundError(path)
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, timeout=10, check_same_thread=False
        )
    else:
        jobs_dir.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
        _add_missing_columns(conn)
    conn.row_factory = sqlite3.Row
    return conn


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """An index made by an older crucible gains the columns added since (pid_start, kind)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
    for column, decl in (("pid_start", "TEXT"), ("kind", "TEXT NOT NULL DEFAULT 'eval'")):
        if column in have:
            continue
        try:
            with conn:
                conn.execute(f"ALTER TABLE jobs ADD COLUMN {column} {decl}")
        except sqlite3.OperationalError as exc:  # another writer added it meanwhile
            if "duplicate column" not in str(exc):
                raise


class Index:
    """Synchronous access to the index; the job writes through `BatchWriter`."""

    def __init__(self, jobs_dir: Path, *, readonly: bool = False) -> None:
        self.jobs_dir = jobs_dir
        self.conn = connect(jobs_dir, readonly=readonly)

    def close(self) -> None:
        self.conn.close()

    # jobs -----------------------------------------------------------------
    def upsert_job(
        self, cfg: JobConfig, *, status: str, path: Path, pid: int | None,
        n_trials: int | None = None,
    ) -> None:  # fmt: skip
        """Record the job; `pid`: the process running it (the runner's own), recorded with
        its start time, so that a later reader never takes a reused pid for it. `n_trials`:
        the job's size where it is not tasks x attempts (the grading service's: its grades)."""
        now = utcnow().isoformat()
        if n_trials is None:
            n_trials = len(cfg.tasks) * cfg.attempts
        with self.conn:
            self.conn.execute(
                """INSERT INTO jobs (job_id, name, status, agent, model, env, dataset, n_trials,
                       path, pid, pid_start, kind, created_at, updated_at)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
                   ON CONFLICT(job_id) DO UPDATE SET status=excluded.status, pid=excluded.pid,
                       pid_start=excluded.pid_start, n_trials=excluded.n_trials,
                       updated_at=excluded.updated_at""",
                (
                    cfg.job_id,
                    cfg.name,
                    status,
                    cfg.agent,
                    cfg.model,
                    cfg.env,
                    ",".join(cfg.dataset),
                    n_trials,
                    str(path),
                    pid,
                    process_start(pid),
                    cfg.kind,
                    cfg.created_at.isoformat(),
                    now,
                ),
            )

    def set_job_status(self, job_id: str, status: str) -> None:
        with self.conn:
            self.conn.execute(
                "UPDATE jobs SET status=?, updated_at=? WHERE job_id=?",
                (status, utcnow().isoformat(), job_id),
            )

    def touch_job(self, job_id: str) -> None:
        with self.conn:
            self.conn.execute(
                "UPDATE jobs SET updated_at=? WHERE job_id=?", (utcnow().isoformat(), job_id)
            )

    def get_job(self, job_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(
            "SELECT * FROM jobs WHERE job_id=?", (job_id,)
        ).fetchone()
        return row

    def list_jobs(self) -> list[sqlite3.Row]:
        return list(self.conn.execute("SELECT * FROM jobs ORDER BY created_at DESC"))

    def check_readable(self) -> None:
        """Raise sqlite3.Error unless the schema is there (a first job may be creating it)."""
        self.conn.execute("SELECT 1 FROM jobs LIMIT 1").fetchall()

    # trials ---------------------------------------------------------------
    def write_trials(self, results: Iterable[TrialResult]) -> int:
        """Upsert the rows of `results`, in one transaction; if that fails, row by row,
        leaving out (and logging) any row that cannot be written: one trial's row never
        costs the others theirs (the folders stay the record; a resume reconciles)."""
        rows = [trial_row(r) for r in results]
        sql = f"INSERT OR REPLACE INTO trials ({TRIAL_COLUMNS}) VALUES ({','.join('?' * 15)})"
        if not rows:
            return 0
        try:
            with self.conn:
                self.conn.executemany(sql, rows)
            return len(rows)
        except (sqlite3.InterfaceError, sqlite3.DataError, sqlite3.IntegrityError, ValueError):
            pass
        written = 0
        for row in rows:
            try:
                with self.conn:
                    self.conn.execute(sql, row)
                written += 1
            except (sqlite3.InterfaceError, sqlite3.DataError, sqlite3.IntegrityError,
                    ValueError) as exc:  # fmt: skip
                log.warning("index: trial row %r not written: %s", row[1], exc)
        return written

    def delete_trials(self, job_id: str, trial_names: Iterable[str]) -> None:
        with self.conn:
            self.conn.executemany(
                "DELETE FROM trials WHERE job_id=? AND trial_name=?",
                [(job_id, n) for n in trial_names],
            )

    def trials(self, job_id: str) -> list[sqlite3.Row]:
        return list(
            self.conn.execute(
                "SELECT * FROM trials WHERE job_id=? ORDER BY task_name, attempt", (job_id,)
            )
        )

    def outcome_totals(self) -> list[tuple[str, str, int, float | None, int]]:
        """Per job and outcome: (job_id, outcome, trials, sum of rewards, trials with a reward)."""
        return [
            (row[0], row[1], row[2], row[3], row[4])
            for row in self.conn.execute(
                # A reward past BOUND (or inf) is a row written before rewards were
                # range-checked: left out, so a sum cannot overflow (`trial_rows` warns).
                "SELECT job_id, outcome, COUNT(*), SUM(CASE WHEN ABS(reward) <= ? THEN reward END), "
                "COUNT(CASE WHEN ABS(reward) <= ? THEN 1 END) "
                "FROM trials GROUP BY job_id, outcome",
                (BOUND, BOUND),
            )
        ]


class BatchWriter:
    """Queues trial records and writes them in batches off the event loop.

    One transaction per batch keeps the index from ever being the bottleneck
    (thousands of trials per second); `flush()` is awaited at the end of a job.
    """

    def __init__(self, index: Index, *, max_batch: int = 512, interval_sec: float = 0.2) -> None:
        self.index = index
        self.max_batch = max_batch
        self.interval_sec = interval_sec
        self._pending: list[TrialResult] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self.rows_written = 0
        self.batches = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="index-writer")

    def add(self, result: TrialResult) -> None:
        self._pending.append(result)
        if len(self._pending) >= self.max_batch:
            self._wake.set()

    async def _loop(self) -> None:
        # Never cancelled mid-write: close() asks it to stop and waits.
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_sec)
            except TimeoutError:
                pass
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            batch, self._pending = self._pending, []
            # sqlite3 has no async API; one short transaction in a worker thread.
            await asyncio.to_thread(self.index.write_trials, batch)
            self.rows_written += len(batch)
            self.batches += 1

    async def close(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task:
            await self._task
            self._task = None
        await self.flush()
