"""Running a job: plan, resume, schedule, retry, cancel, record.

The job is the only writer of its folder and of its rows in the index. Each
trial's result.json is written (atomically) before its index row, so after a
crash (kill -9 included) the folders are the truth and resume reconciles the
index from them; trials without a final record are run again, after the
provider has removed the sandboxes the killed run left.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crucible.agents.base import Agent
from crucible.engine.executor import Executor, LocalExecutor, TrialCall
from crucible.engine.job_records import (
    cancelled_result,
    failed_while_cancelling,
    unrecorded_result,
)
from crucible.engine.scheduler import Scheduler, backoff_delay
from crucible.engine.spec import TrialPlan, build_spec, trial_name_for
from crucible.engine.summary import summarize
from crucible.engine.teardown import Teardown
from crucible.errors import RETRYABLE, CrucibleError, ErrorKind
from crucible.records.defaults import DEFAULT_GPU_CONCURRENCY, DEFAULT_MAX_RETRIES
from crucible.records.job import JobConfig, JobSummary
from crucible.records.live import CURRENT, LiveTrial, RetryBudget
from crucible.records.trial import TrialResult, counted_as, utcnow
from crucible.sandboxes.base import Provider, SandboxSpec
from crucible.sandboxes.buildgate import BuildGate, cancelling
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.index import BatchWriter, Index
from crucible.store.layout import (
    CANCEL_FILE,
    dump,
    iter_trial_results,
    write_json_atomic,
)
from crucible.store.logs import JOB_LOG, FileLog
from crucible.store.trial_load import BadRecord, Skipped, load_trial_result
from crucible.tasks.models import Task


def _other_run_alive(index: Index, job_id: str) -> bool:
    """Whether the index says another process is running this job and that process exists."""
    row = index.get_job(job_id)
    if row is None or row["status"] != "running" or not row["pid"] or row["pid"] == os.getpid():
        return False
    try:
        os.kill(row["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours to signal
    return True


async def remove_leftovers(
    provider: Provider, job_id: str, log: FileLog, executor: Executor | None = None
) -> None:
    """An earlier run of this job may have been killed (kill -9, a crash, a forced
    exit) and left sandboxes, cgroups and scratch folders named after the job:
    they are removed before the fan-out, so no manual `sandboxes cleanup` is needed.
    Best effort: a provider that cannot list them now must not stop the resume."""
    try:
        removed = await (executor or LocalExecutor()).cleanup(provider, job_id)
    except Exception as exc:
        log.warning(f"could not remove what an earlier run of this job left: {exc}")
        return
    if removed:
        log.info(f"removed {removed} sandbox(es) an earlier run of this job left")


@dataclass
class JobOptions:
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_base_sec: float = 1.0
    retry_cap_sec: float = 60.0
    gpu_concurrency: int = DEFAULT_GPU_CONCURRENCY
    trial_timeout_sec: float | None = None  # per-trial wall limit beyond the phases' own
    job_timeout_sec: float | None = None
    retry_errors: bool = False  # on resume, also rerun trials whose error left them out of means
    summary_interval_sec: float = 1.0
    create_rate: float | None = None  # sandbox creations per second, job-wide
    max_starting: int | None = None  # sandboxes still starting at once
    max_builds: int | None = None  # image builds at once, job-wide (None: half the cores)
    # Trials running at once across sibling jobs (a sweep's arms): held around each trial.
    shared_slots: asyncio.Semaphore | None = None


@dataclass
class JobEvents:
    """Callbacks for progress display; all optional."""

    on_start: Callable[[int, int], None] | None = None  # (total, already done)
    on_trial: Callable[[TrialResult], None] | None = None
    on_retry: Callable[[TrialPlan, TrialResult, float], None] | None = None


@dataclass
class JobRunner:
    cfg: JobConfig
    tasks: list[Task]
    provider: Provider
    agent: Agent
    jobs_dir: Path
    options: JobOptions = field(default_factory=JobOptions)
    events: JobEvents = field(default_factory=JobEvents)
    executor: Executor = field(default_factory=LocalExecutor)  # where trials run

    def __post_init__(self) -> None:
        self.job_dir = self.jobs_dir / self.cfg.job_id
        self.results: dict[str, TrialResult] = {}
        self.n_total = len(self.tasks) * self.cfg.attempts
        self.n_retries = 0
        self._cancelled = False
        self._running: set[asyncio.Task[TrialResult]] = set()
        self._sched: Scheduler[tuple[TrialPlan, int]] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._preparing: asyncio.Task[None] | None = None
        # One limit on the job's image builds at once, on every provider; closed on cancel.
        self.provider.build_gate = BuildGate(self.options.max_builds)
        self.log = FileLog(self.job_dir / JOB_LOG)
        self.writer: BatchWriter | None = None
        self.start_gate: StartGate | None = None
        self.teardown: Teardown | None = None  # made by run(): sandboxes closed behind trials
        self.live: dict[str, LiveTrial] = {}  # the trials running now (the progress line)
        self._budgets: dict[str, RetryBudget] = {}  # model retries, over a trial's tries

    # -- planning ------------------------------------------------------------
    def plan(self) -> list[TrialPlan]:
        """Attempt-major order interleaves tasks fairly: every task's attempt 0 first."""
        return [
            TrialPlan(task=t, attempt=a, job_id=self.cfg.job_id, tampered=self.cfg.tampered)
            for a in range(self.cfg.attempts)
            for t in self.tasks
        ]

    def _load_finished(self) -> None:
        wanted = {trial_name_for(t.name, a) for t in self.tasks for a in range(self.cfg.attempts)}
        skipped: list[Skipped] = []
        for r in iter_trial_results(self.job_dir, skipped):
            if r.trial_name not in wanted or r.outcome == ErrorKind.cancelled.value:
                continue
            # Only gaps are rerun: a rerun of the attempt's own failures (verifier_failed,
            # counted 0) would give them a fresh draw a graded 0 never gets.
            if self.options.retry_errors and not r.graded and counted_as(r.outcome) is None:
                continue
            self.results[r.trial_name] = r
        for bad in skipped:  # run again, as a trial without a record
            self.log.warning(f"trial record skipped, the trial runs again: {bad}")

    # -- control ---------------------------------------------------------------
    def cancel(self) -> None:
        """Stop scheduling and wind down running trials (their sandboxes are closed)."""
        if self._cancelled:
            return
        self._cancelled = True
        self.log.warning("cancel requested: winding down running trials")
        if self._sched is not None:
            self._closing = asyncio.ensure_future(self._sched.close())
        # No image build starts from now on, and the running ones are killed.
        self.provider.build_gate.close()
        if self._preparing is not None:
            self._preparing.cancel()
        for t in list(self._running):
            t.cancel()

    # -- running ---------------------------------------------------------------
    async def run(self) -> JobSummary:
        resuming = (self.job_dir / "job.json").exists()
        self.job_dir.mkdir(parents=True, exist_ok=True)
        (self.job_dir / CANCEL_FILE).unlink(missing_ok=True)
        write_json_atomic(self.job_dir / "job.json", dump(self.cfg))
        self._load_finished()
        index = Index(self.jobs_dir)
        # What a killed run left is removed, but never the sandboxes of a run still alive.
        clean_up = resuming and not _other_run_alive(index, self.cfg.job_id)
        index.upsert_job(self.cfg, status="running", path=self.job_dir, pid=os.getpid())
        # Reconcile: the folders are the record; rows of trials to rerun go away.
        index.write_trials(self.results.values())
        todo = [p for p in self.plan() if p.trial_name not in self.results]
        index.delete_trials(self.cfg.job_id, [p.trial_name for p in todo])
        self.writer = BatchWriter(index)
        self.writer.start()
        self.log.info(
            f"job {self.cfg.job_id}: {self.n_total} trials, {len(self.results)} already final, "
            f"{len(todo)} to run; agent {self.cfg.agent}, env {self.cfg.env}, "
            f"concurrency {self.cfg.concurrency}"
        )
        if self.events.on_start:
            self.events.on_start(self.n_total, len(self.results))

        limit = self.cfg.concurrency
        if self.provider.max_concurrency is not None:
            limit = min(limit, self.provider.max_concurrency)
        sched: Scheduler[tuple[TrialPlan, int]] = Scheduler(
            {"cpu": limit, "gpu": max(1, min(limit, self.options.gpu_concurrency))}
        )
        o = self.options
        if o.create_rate or o.max_starting:
            self.start_gate = StartGate(o.create_rate or 1e6, o.max_starting or limit)
        self._sched = sched
        self.teardown = Teardown(limit)
        for plan in todo:
            sched.add(plan.pool, [(plan, 0)])
        status = "failed"
        watchers = [
            asyncio.create_task(self._watch_cancel_file()),
            asyncio.create_task(self._write_summary_periodically()),
        ]
        if self.options.job_timeout_sec:
            watchers.append(asyncio.create_task(self._job_deadline(self.options.job_timeout_sec)))
        try:
            await self.executor.start(self.provider)
            if clean_up:
                await self._remove_leftovers()
            # Images are built once per job, before the fan-out; a failed build
            # surfaces again at create() as that task's task_invalid.
            self.provider.log_dir = self.job_dir
            await self._prepare(todo)
            workers = [
                asyncio.create_task(self._worker(sched))
                for _ in range(min(limit, max(1, len(todo))))
            ]
            await asyncio.gather(*workers)
            for plan, _ in sched.drain():  # never started: cancelled, resumable
                self._record(cancelled_result(plan, self.agent))
            status = "cancelled" if self._cancelled else "completed"
        finally:
            # Nothing needs an image now: builds still running stop, and have ended.
            self.provider.build_gate.close()
            await self.provider.build_gate.drained()
            await self.teardown.drain()  # no sandbox outlives the job
            await self.executor.aclose()  # a cluster's agents drain theirs
            for w in watchers:
                w.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            await self.writer.close()
            summary = self.summary(status)
            write_json_atomic(self.job_dir / "result.json", dump(summary))
            # The last log line goes first: followers stop once the status is final.
            self.log.info(
                f"job {status}: {summary.n_done}/{summary.n_trials} trials, "
                f"outcomes {summary.outcomes}, mean reward {summary.mean_reward}"
            )
            self.log.close()
            index.set_job_status(self.cfg.job_id, status)
            index.close()
        return summary

    async def _worker(self, sched: Scheduler[tuple[TrialPlan, int]]) -> None:
        while True:
            got = await sched.next()
            if got is None:
                return
            pool, (plan, retries) = got
            task = asyncio.create_task(self._run_one(plan, retries))
            self._running.add(task)
            try:
                result = await task
            except asyncio.CancelledError:
                if not self._cancelled:
                    raise
                # run_trial wrote a `cancelled` record before it let the cancellation through
                self._record(self._read_result(plan) or cancelled_result(plan, self.agent))
                await sched.release(pool)
                continue
            except Exception as exc:  # the trial could not run or write its record at all
                result = unrecorded_result(plan, self.agent, retries, exc, self.log)
            finally:
                self._running.discard(task)
            if self._should_retry(result, retries):
                delay = backoff_delay(
                    retries + 1, self.options.retry_base_sec, self.options.retry_cap_sec
                )
                self.n_retries += 1
                self.log.warning(
                    f"{plan.trial_name}: {result.outcome} ({result.error.message if result.error else ''}); "
                    f"retry {retries + 1}/{self.options.max_retries} in {delay:.2f}s"
                )
                if self.events.on_retry:
                    self.events.on_retry(plan, result, delay)
                await sched.retry_later(pool, (plan, retries + 1), delay)
            elif self._cancelled and not result.graded:
                self._record(failed_while_cancelling(result, self.job_dir))
            else:
                self._record(result)
            await sched.release(pool)

    async def _run_one(self, plan: TrialPlan, retries: int) -> TrialResult:
        budget = self._budgets.setdefault(plan.trial_name, RetryBudget())
        self.live[plan.trial_name] = live = LiveTrial(plan.trial_name, budget=budget)
        CURRENT.set(live)  # this task's context: the trial's phases and model calls see it
        try:
            if self.options.shared_slots is None:
                return await self._trial(plan, retries)
            async with self.options.shared_slots:
                return await self._trial(plan, retries)
        finally:
            self.live.pop(plan.trial_name, None)

    async def _trial(self, plan: TrialPlan, retries: int) -> TrialResult:
        call = TrialCall(plan, self.agent, self.job_dir, retries, self.cfg.env_params,
                         self.options.trial_timeout_sec)  # fmt: skip
        return await self.executor.run(
            call, provider=self.provider, start_gate=self.start_gate, teardown=self.teardown
        )

    async def _remove_leftovers(self) -> None:
        await remove_leftovers(self.provider, self.cfg.job_id, self.log, self.executor)

    async def _prepare(self, todo: list[TrialPlan]) -> None:
        """The provider's prepare() (its image builds), under the job's build gate and
        cancelled with the job."""
        if self._cancelled:
            return
        specs = self._prepare_specs(todo)
        self._preparing = asyncio.ensure_future(self.executor.prepare(self.provider, specs))
        try:
            await self._preparing
        except asyncio.CancelledError:
            if not self._cancelled or cancelling():
                raise
        finally:
            self._preparing = None

    def _prepare_specs(self, todo: list[TrialPlan]) -> list[SandboxSpec]:
        specs: dict[str, SandboxSpec] = {}
        for plan in todo:
            if plan.task.name in specs:
                continue
            try:
                specs[plan.task.name] = build_spec(plan, self.agent, self.cfg.env_params)
            except CrucibleError:
                continue  # the trial itself reports it
        return list(specs.values())

    def _should_retry(self, result: TrialResult, retries: int) -> bool:
        if result.graded or self._cancelled or retries >= self.options.max_retries:
            return False
        budget = self._budgets.get(result.trial_name)
        if result.outcome == ErrorKind.model_failed.value and budget and budget.spent:
            return False  # its model calls' retries were the retries: one budget, spent
        return ErrorKind(result.outcome) in RETRYABLE

    def _read_result(self, plan: TrialPlan) -> TrialResult | None:
        path = self.job_dir / plan.trial_name / "result.json"
        try:
            return load_trial_result(path)  # the one tolerant reader: a bad record is none
        except BadRecord:
            return None

    def _record(self, result: TrialResult) -> None:
        self.results[result.trial_name] = result
        assert self.writer is not None
        self.writer.add(result)
        if self.events.on_trial:
            self.events.on_trial(result)

    def summary(self, status: str) -> JobSummary:
        s = summarize(self.cfg.job_id, status, list(self.results.values()), self.n_total)
        s.started_at = self.cfg.created_at
        s.finished_at = utcnow() if status != "running" else None
        return s

    async def _watch_cancel_file(self) -> None:
        path = self.job_dir / CANCEL_FILE
        while True:
            await asyncio.sleep(0.5)
            if path.exists():
                self.cancel()
                return

    async def _write_summary_periodically(self) -> None:
        last = -1
        while True:
            await asyncio.sleep(self.options.summary_interval_sec)
            if len(self.results) != last:
                last = len(self.results)
                write_json_atomic(self.job_dir / "result.json", dump(self.summary("running")))

    async def _job_deadline(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.log.warning(f"job time limit of {seconds:g}s reached")
        self.cancel()
