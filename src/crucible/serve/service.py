"""The grading service's core: grade ids to trials, exactly once.

Every grade is a trial of ONE job (the service's job folder), run by engine/trial.py's
run_trial with a SubmissionAgent: the same sandbox, collection, Grader and blame rules
as `crucible run`. The grade id is the idempotency key: the first time an id is seen,
its record (serve/store.py) is written, and only then is its grade started, as a task
of the service's (not of the request: a client that goes away leaves it running).
Every later request for the id, while it runs or after, awaits that same task or reads
its stored result (`cached: true`); another submission or task under the id is a 409.

Concurrency is the JobRunner's: `slots` (an asyncio.Semaphore of -c) bounds the
sandboxes held at once, and is shared with sessions; the start gate paces creations;
the teardown closes sandboxes behind their trials. Infrastructure failures (sandbox,
model) are retried here with backoff, up to --max-retries, then answered `unscorable`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crucible.agents.submission import SubmissionAgent
from crucible.engine.job import _other_run_alive
from crucible.engine.scheduler import backoff_delay
from crucible.engine.spec import TrialPlan
from crucible.engine.summary import summarize
from crucible.engine.teardown import Teardown
from crucible.engine.trial import run_trial
from crucible.errors import RETRYABLE, ErrorKind
from crucible.records.defaults import DEFAULT_MAX_RETRIES
from crucible.records.job import JobConfig, JobSummary
from crucible.records.serve import GradeItem, GradeResult, GradeStatus
from crucible.records.submission import submission_digest
from crucible.records.trial import TrialResult, utcnow
from crucible.sandboxes.base import Provider
from crucible.sandboxes.ratelimit import StartGate
from crucible.serve.metrics import Metrics
from crucible.serve.outcome import grade_result
from crucible.serve.store import GradeRecord, GradeStore, trial_name_for_grade
from crucible.store.index import BatchWriter, Index
from crucible.store.layout import dump, iter_trial_results, write_json_atomic
from crucible.store.logs import JOB_LOG, FileLog
from crucible.tasks.models import Task

DEFAULT_MAX_PENDING = 10_000


class Refused(Exception):
    """A request the service refuses as a whole, before anything starts (an HTTP 4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class GradePlan(TrialPlan):
    """A trial named after its grade id (hashed), not after its task and attempt."""

    name: str = ""

    @property
    def trial_name(self) -> str:
        return self.name


@dataclass
class ServiceOptions:
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_base_sec: float = 1.0
    retry_cap_sec: float = 60.0
    trial_timeout_sec: float | None = None
    create_rate: float | None = None
    max_starting: int | None = None
    max_pending: int = DEFAULT_MAX_PENDING  # grades queued or running at once


@dataclass
class GradeService:
    cfg: JobConfig
    tasks: list[Task]
    provider: Provider
    jobs_dir: Path
    options: ServiceOptions = field(default_factory=ServiceOptions)

    def __post_init__(self) -> None:
        self.job_dir = self.jobs_dir / self.cfg.job_id
        self.by_name: dict[str, Task] = {}
        for t in self.tasks:
            if t.name in self.by_name:
                raise ValueError(f"two tasks are named {t.name!r}: a grade names its task")
            self.by_name[t.name] = t
        limit = self.cfg.concurrency
        if self.provider.max_concurrency is not None:
            limit = min(limit, self.provider.max_concurrency)
        self.limit = max(1, limit)
        self.slots = asyncio.Semaphore(self.limit)  # sandboxes held at once (sessions share it)
        o = self.options
        self.start_gate: StartGate | None = None
        if o.create_rate or o.max_starting:
            self.start_gate = StartGate(o.create_rate or 1e6, o.max_starting or self.limit)
        self.teardown = Teardown(self.limit)
        self.metrics = Metrics()
        self.store = GradeStore(self.job_dir)
        self.records: dict[str, GradeRecord] = {}
        self.running: dict[str, asyncio.Task[GradeResult]] = {}
        self.results: dict[str, TrialResult] = {}  # final trial records, for the summary
        self.ready = False
        self._cancelled = False
        self.on_close: list[Callable[[], Awaitable[None]]] = []  # run by close(), in order
        self._index: Index | None = None
        self._writer: BatchWriter | None = None
        self._summary_task: asyncio.Task[None] | None = None
        self.log = FileLog(self.job_dir / JOB_LOG)

    # -- life ------------------------------------------------------------------
    async def start(self) -> None:
        """Write the job, reconcile what an earlier run left, re-run its unfinished grades."""
        resuming = (self.job_dir / "job.json").exists()
        self.job_dir.mkdir(parents=True, exist_ok=True)
        index = Index(self.jobs_dir)
        if resuming and _other_run_alive(index, self.cfg.job_id):
            index.close()
            raise Refused(409, f"job {self.cfg.job_id!r} is being served by another process")
        write_json_atomic(self.job_dir / "job.json", dump(self.cfg))
        records, bad = self.store.load_all()
        for note in bad:
            self.log.warning(f"grade record skipped: {note}")
        self._index = index
        self._upsert_job("running", len(records))
        done = {r.trial for r in records if r.result is not None}
        trials = [r for r in iter_trial_results(self.job_dir) if r.trial_name in done]
        self.results = {r.trial_name: r for r in trials}
        index.write_trials(trials)
        unfinished = [r for r in records if r.result is None and r.task in self.by_name]
        index.delete_trials(self.cfg.job_id, [r.trial for r in unfinished])
        self._writer = BatchWriter(index)
        self._writer.start()
        if resuming:
            await self._remove_leftovers()
        self.provider.log_dir = self.job_dir
        for rec in records:
            self.records[rec.id] = rec
            if rec.result is None and rec.task in self.by_name:
                self._launch(rec)
        self.log.info(
            f"serving job {self.cfg.job_id}: {len(self.by_name)} task(s), {len(done)} grade(s) "
            f"answered from disk, {len(unfinished)} re-run; concurrency {self.limit}"
        )
        self._summary_task = asyncio.create_task(self._write_summary_periodically())
        self.ready = True

    async def close(self) -> None:
        """Cancel the running grades (their records stay unfinished: a restart re-runs
        them), close every sandbox, write the job's summary."""
        cancelled = await self.cancel_running()
        for hook in self.on_close:  # other parts' (sessions): their sandboxes closed
            try:
                await hook()
            except Exception as exc:
                self.log.warning(f"closing: {exc}")
        await self.teardown.drain()
        if self._summary_task is not None:
            self._summary_task.cancel()
            await asyncio.gather(self._summary_task, return_exceptions=True)
        if self._index is None:  # never started
            return
        status = "cancelled" if cancelled or self._cancelled else "completed"
        if self._writer is not None:
            await self._writer.close()
        write_json_atomic(self.job_dir / "result.json", dump(self._summary(status)))
        self.log.info(f"service stopped: {len(self.results)} grade(s) recorded")
        self.log.close()
        self._upsert_job(status, len(self.records))
        self._index.close()
        self._index = None

    async def cancel_running(self) -> int:
        """Stop taking grades and cancel the running ones: how many were cancelled."""
        self.ready = False
        tasks = list(self.running.values())
        self._cancelled = self._cancelled or bool(tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def _remove_leftovers(self) -> None:
        try:
            removed = await self.provider.cleanup(self.cfg.job_id)
        except Exception as exc:  # best effort, as a resumed job's
            self.log.warning(f"could not remove what an earlier run of this job left: {exc}")
            return
        if removed:
            self.log.info(f"removed {removed} sandbox(es) an earlier run of this job left")

    # -- grades ------------------------------------------------------------------
    def submit(self, items: Iterable[GradeItem]) -> list[tuple[str, bool]]:
        """Check every item, then start the new ones: (id, cached) in input order.
        Raises Refused, with nothing started, when any item cannot be taken."""
        if not self.ready:
            raise Refused(503, "the service is starting or stopping: retry later")
        items = list(items)
        new: dict[str, GradeRecord] = {}
        for item in items:
            task = self.by_name.get(item.task.id)
            if task is None:
                raise Refused(404, f"item {item.id!r}: no task named {item.task.id!r} is served")
            if item.task.hash is not None and item.task.hash != task.digest:
                raise Refused(
                    409,
                    f"item {item.id!r}: task {task.name!r} has hash {task.digest}, "
                    f"not {item.task.hash}",
                )
            digest = submission_digest(item.submission)
            known = self.records.get(item.id) or new.get(item.id)
            if known is not None:
                if known.digest != digest or known.task != task.name:
                    raise Refused(
                        409,
                        f"grade id {item.id!r} was already used for another "
                        f"{'task' if known.task != task.name else 'submission'}",
                    )
                continue
            new[item.id] = GradeRecord(
                id=item.id,
                digest=digest,
                task=task.name,
                task_hash=task.digest,
                trial=trial_name_for_grade(item.id),
                submission=item.submission,
                group_id=item.group_id,
                meta=item.meta,
            )
        if new and len(self.running) + len(new) > self.options.max_pending:
            raise Refused(
                429,
                f"{len(self.running)} grades are queued or running; {len(new)} more would "
                f"pass the cap of {self.options.max_pending}: retry later",
            )
        for rec in new.values():  # recorded before its sandbox starts
            self.store.write(rec)
            self.records[rec.id] = rec
            self._launch(rec)
        seen: set[str] = set()
        out: list[tuple[str, bool]] = []
        for item in items:
            out.append((item.id, item.id not in new or item.id in seen))
            seen.add(item.id)
        return out

    async def wait(self, ids: list[tuple[str, bool]], wait_s: float) -> list[GradeResult]:
        """The results of `ids` (from submit), waiting up to `wait_s` for running ones."""
        running = {self.running[i] for i, _ in ids if i in self.running}
        if running and wait_s > 0:
            await asyncio.wait(running, timeout=wait_s)  # never cancels them
        return [self.answer(i, cached) for i, cached in ids]

    def answer(self, grade_id: str, cached: bool) -> GradeResult:
        rec = self.records[grade_id]
        if rec.result is not None:
            if cached:
                self.metrics.cached += 1
            return rec.result.model_copy(update={"cached": cached})
        return GradeResult(
            id=grade_id,
            status=GradeStatus.pending,
            task_hash=rec.task_hash,
            trial=f"{self.cfg.job_id}/{rec.trial}",
            group_id=rec.group_id,
            cached=cached,
        )

    async def get(self, grade_id: str, wait_s: float) -> GradeResult | None:
        if grade_id not in self.records:
            return None
        return (await self.wait([(grade_id, True)], wait_s))[0]

    def _launch(self, rec: GradeRecord) -> None:
        task = asyncio.create_task(self._grade(rec), name=f"grade {rec.trial}")
        self.running[rec.id] = task
        gid = rec.id

        def done(_: asyncio.Task[GradeResult]) -> None:
            self.running.pop(gid, None)

        task.add_done_callback(done)

    async def _grade(self, rec: GradeRecord) -> GradeResult:
        task = self.by_name[rec.task]
        plan = GradePlan(task=task, attempt=0, job_id=self.cfg.job_id,
                         tampered=self.cfg.tampered, name=rec.trial)  # fmt: skip
        retries = 0
        while True:
            result = await self._trial(plan, SubmissionAgent(rec.submission), retries)
            if not self._should_retry(result, retries):
                break
            retries += 1
            delay = backoff_delay(retries, self.options.retry_base_sec, self.options.retry_cap_sec)
            self.log.warning(
                f"grade {rec.trial}: {result.outcome} "
                f"({result.error.message if result.error else ''}); "
                f"retry {retries}/{self.options.max_retries} in {delay:.2f}s"
            )
            await asyncio.sleep(delay)
        graded = grade_result(rec.id, result, trial=f"{self.cfg.job_id}/{rec.trial}",
                              group_id=rec.group_id)  # fmt: skip
        rec.result = graded
        self.store.write(rec)
        self.results[result.trial_name] = result
        if self._writer is not None:
            self._writer.add(result)
        self.metrics.graded(graded.status.value)
        return graded

    async def _trial(self, plan: GradePlan, agent: SubmissionAgent, retries: int) -> TrialResult:
        self.metrics.queued += 1
        try:
            await self.slots.acquire()
        finally:
            self.metrics.queued -= 1
        self.metrics.in_flight += 1
        self.metrics.trials_started += 1
        t0 = time.monotonic()
        try:
            return await run_trial(
                plan,
                provider=self.provider,
                agent=agent,
                job_dir=self.job_dir,
                retries=retries,
                env_params=self.cfg.env_params,
                time_limit_sec=self.options.trial_timeout_sec,
                start_gate=self.start_gate,
                teardown=self.teardown,
            )
        finally:
            self.metrics.sandbox_seconds += time.monotonic() - t0
            self.metrics.in_flight -= 1
            self.slots.release()

    def _should_retry(self, result: TrialResult, retries: int) -> bool:
        if result.graded or retries >= self.options.max_retries:
            return False
        try:
            return ErrorKind(result.outcome) in RETRYABLE
        except ValueError:
            return False

    # -- the job's summary ---------------------------------------------------------
    def _summary(self, status: str) -> JobSummary:
        s = summarize(self.cfg.job_id, status, list(self.results.values()), len(self.records))
        s.started_at = self.cfg.created_at
        s.finished_at = utcnow() if status != "running" else None
        return s

    def _upsert_job(self, status: str, n_grades: int) -> None:
        assert self._index is not None
        self._index.upsert_job(self.cfg, status=status, path=self.job_dir, pid=os.getpid(),
                               n_trials=n_grades)  # fmt: skip

    async def _write_summary_periodically(self) -> None:
        last = (-1, -1)
        while True:
            await asyncio.sleep(1.0)
            now = (len(self.results), len(self.records))
            if now != last:
                last = now
                write_json_atomic(self.job_dir / "result.json", dump(self._summary("running")))
                self._upsert_job("running", len(self.records))
