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
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crucible.agents.submission import SubmissionAgent
from crucible.engine.executor import Executor, LocalExecutor, TrialCall
from crucible.engine.job import remove_leftovers
from crucible.engine.scheduler import backoff_delay
from crucible.engine.teardown import Teardown
from crucible.errors import RETRYABLE, ErrorKind
from crucible.records.job import JobConfig
from crucible.records.serve import GradeItem, GradeResult, GradeStatus
from crucible.records.submission import submission_digest
from crucible.records.trial import TrialResult
from crucible.sandboxes.base import Provider
from crucible.sandboxes.ratelimit import StartGate
from crucible.serve.common import (
    UNCAPPED,
    UNPACED,
    GradePlan,
    Refused,
    ServiceOptions,
    Ticket,
    check_storable,
)
from crucible.serve.jobbook import JobBook, JobBusy
from crucible.serve.metrics import CountingGate, Metrics
from crucible.serve.outcome import grade_result
from crucible.serve.store import GradeRecord, GradeStore, trial_name_for_grade
from crucible.store.logs import JOB_LOG, FileLog
from crucible.store.trial_load import BadRecord, load_trial_result
from crucible.tasks.models import Task


@dataclass
class GradeService:
    cfg: JobConfig
    tasks: list[Task]
    provider: Provider
    jobs_dir: Path
    options: ServiceOptions = field(default_factory=ServiceOptions)
    executor: Executor = field(default_factory=LocalExecutor)  # where grades run

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
        self.metrics = Metrics()
        # Unpaced unless asked (as a job), but always there: it counts the creations.
        self.start_gate: StartGate = CountingGate(
            o.create_rate or UNPACED, o.max_starting or UNCAPPED, self.metrics
        )
        self.teardown = Teardown(self.limit)
        self.store = GradeStore(self.job_dir)
        self.records: dict[str, GradeRecord] = {}
        self._attempts: dict[str, int] = {}  # the next attempt number of each task
        self.running: dict[str, asyncio.Task[GradeResult]] = {}
        self.book = JobBook(self.cfg, self.jobs_dir)
        self.ready = False
        self._cancelled = False
        self.other_trials = 0  # trials beyond the grades' (sessions')
        self.on_close: list[Callable[[], Awaitable[None]]] = []  # run by close(), in order
        self.log = FileLog(self.job_dir / JOB_LOG)

    # -- life ------------------------------------------------------------------
    async def start(self) -> None:
        """Write the job, reconcile what an earlier run left, re-run its unfinished grades."""
        records, bad = self.store.load_all()
        for rec in records:  # killed between its trial's record and its own: done
            if rec.result is None and (trial := self._final_trial(rec)) is not None:
                self._finish(rec, trial)
        unfinished = [r for r in records if r.result is None and r.task in self.by_name]
        finished = {r.trial for r in records if r.result is not None}
        # Sessions' trials (no grade record): final once recorded; one open when the
        # service was killed has no record, and its sandbox goes with the leftovers below.
        grade_trials = {r.trial for r in records}
        others = {p.parent.name for p in self.job_dir.glob("*/result.json")} - grade_trials
        self.other_trials = len(others)
        try:
            resuming = self.book.start(
                finished | others, [r.trial for r in unfinished], len(records) + len(others)
            )
        except JobBusy as exc:
            raise Refused(409, str(exc)) from None
        for note in bad:
            self.log.warning(f"grade record skipped: {note}")
        await self.executor.start(self.provider)
        if resuming:
            await remove_leftovers(self.provider, self.cfg.job_id, self.log, self.executor)
        self.provider.log_dir = self.job_dir
        self.records = {r.id: r for r in records}
        for r in records:
            self._attempts[r.task] = max(self._attempts.get(r.task, 0), r.attempt + 1)
        for rec in unfinished:
            self._launch(rec)
        self.log.info(
            f"serving job {self.cfg.job_id}: {len(self.by_name)} task(s), {len(finished)} "
            f"grade(s) answered from disk, {len(unfinished)} re-run; concurrency {self.limit}"
        )
        self.book.follow(self._n_trials, self._most_attempts)
        self.ready = True

    async def close(self) -> None:
        """Cancel the running grades (their records stay unfinished: a restart re-runs
        them), close every sandbox, write the job's summary."""
        cancelled = await self.cancel_running()
        self.provider.build_gate.close()  # no build starts; running ones are stopped
        for hook in self.on_close:  # other parts' (sessions): their sandboxes closed
            try:
                await hook()
            except Exception as exc:
                self.log.warning(f"closing: {exc}")
        await self.teardown.drain()
        await self.executor.aclose()
        await self.provider.build_gate.drained()
        await self.store.close()
        if not self.book.open:  # never started
            return
        status = "cancelled" if cancelled or self._cancelled else "completed"
        self.book.set_attempts(self._most_attempts())
        await self.book.close(status, self._n_trials())
        self.log.info(f"service stopped: {len(self.book.results)} grade(s) recorded")
        self.log.close()

    def record_trial(self, result: TrialResult) -> None:
        """Index a trial the service ran for another part (a session's), as grades are."""
        self.other_trials += 1
        self.book.add(result)

    def _n_trials(self) -> int:
        return len(self.records) + self.other_trials

    def _most_attempts(self) -> int:
        return max(self._attempts.values(), default=1)

    async def cancel_running(self) -> int:
        """Stop taking grades and cancel the running ones: how many were cancelled."""
        self.ready = False
        tasks = list(self.running.values())
        self._cancelled = self._cancelled or bool(tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    # -- grades ------------------------------------------------------------------
    def submit(
        self, items: Iterable[GradeItem], malformed: Mapping[int, str] | None = None
    ) -> list[Ticket]:
        """Check every item, then start the new ones: a ticket per item, in input order,
        for `wait`. Items at the indices of `malformed` (why their submission could not
        be read) are answered `invalid` at once, unrecorded. Raises Refused, with nothing
        started, when any item cannot be taken."""
        if not self.ready:
            raise Refused(503, "the service is starting or stopping: retry later")
        items, malformed = list(items), malformed or {}
        new: dict[str, GradeRecord] = {}
        invalid: dict[str, GradeResult] = {}
        for i, item in enumerate(items):
            task = self._task_for(item)
            check_storable(item)
            if i in malformed:
                if item.id in self.records or item.id in new:
                    raise Refused(409, f"grade id {item.id!r} was already used for another "
                                       "submission")  # fmt: skip
                invalid[item.id] = GradeResult(
                    id=item.id, status=GradeStatus.invalid, reward=0.0, error=malformed[i],
                    task_hash=task.digest, group_id=item.group_id,
                )  # fmt: skip
                continue
            digest = submission_digest(item.submission)
            known = self.records.get(item.id) or new.get(item.id)
            if known is None and item.id in invalid:
                raise Refused(409, f"grade id {item.id!r} is given twice, with two submissions")
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
            rec.attempt = self._attempts.get(rec.task, 0)
            self._attempts[rec.task] = rec.attempt + 1
            self.store.write(rec)
            self.records[rec.id] = rec
            self._launch(rec)
        seen: set[str] = set()
        out: list[Ticket] = []
        for i, item in enumerate(items):
            if i in malformed:
                out.append(invalid[item.id])
                continue
            out.append((item.id, item.id not in new or item.id in seen))
            seen.add(item.id)
        return out

    def _task_for(self, item: GradeItem) -> Task:
        task = self.by_name.get(item.task.id)
        if task is None:
            raise Refused(404, f"item {item.id!r}: no task named {item.task.id!r} is served")
        if item.task.hash is not None and item.task.hash != task.digest:
            raise Refused(409, f"item {item.id!r}: task {task.name!r} has hash {task.digest}, "
                               f"not {item.task.hash}")  # fmt: skip
        return task

    async def wait(self, tickets: list[Ticket], wait_s: float) -> list[GradeResult]:
        """The results of `tickets` (from submit), waiting up to `wait_s` for running ones."""
        ids = [t for t in tickets if isinstance(t, tuple)]
        running = {self.running[i] for i, _ in ids if i in self.running}
        if running and wait_s > 0:
            await asyncio.wait(running, timeout=wait_s)  # never cancels them
        return [t if isinstance(t, GradeResult) else self.answer(*t) for t in tickets]

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

        def done(t: asyncio.Task[GradeResult]) -> None:
            self.running.pop(gid, None)
            if t.cancelled() or t.exception() is None:
                return
            # Not the trial's failure (run_trial records those): the service's own, say a
            # full disk. Answered unscorable now; the record on disk stays unfinished.
            exc = t.exception()
            self.log.error(f"grade {rec.trial}: {type(exc).__name__}: {exc}")
            rec.result = GradeResult(
                id=gid, status=GradeStatus.unscorable, task_hash=rec.task_hash,
                trial=f"{self.cfg.job_id}/{rec.trial}", group_id=rec.group_id,
                error=f"the service failed: {type(exc).__name__}: {exc}"[:1000],
            )  # fmt: skip

        task.add_done_callback(done)

    async def _grade(self, rec: GradeRecord) -> GradeResult:
        task = self.by_name[rec.task]
        plan = GradePlan(task=task, attempt=rec.attempt, job_id=self.cfg.job_id,
                         tampered=self.cfg.tampered, name=rec.trial)  # fmt: skip
        retries = 0
        while True:
            assert rec.submission is not None  # an unfinished grade keeps it
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
        graded = self._finish(rec, result)
        self.book.add(result)
        self.metrics.graded(graded.status.value)
        return graded

    def _finish(self, rec: GradeRecord, result: TrialResult) -> GradeResult:
        rec.result = grade_result(rec.id, result, trial=f"{self.cfg.job_id}/{rec.trial}",
                                  group_id=rec.group_id)  # fmt: skip
        rec.submission = None  # the digest stays: the key needs no more
        self.store.write_later(rec)  # behind the answer; trial's result.json is on disk
        return rec.result

    def _final_trial(self, rec: GradeRecord) -> TrialResult | None:
        """The trial record of `rec` if it is final (graded, or failed past retrying)."""
        try:
            r = load_trial_result(self.job_dir / rec.trial / "result.json")
        except (BadRecord, OSError):
            return None
        if r.outcome == ErrorKind.cancelled.value or self._should_retry(r, r.retries):
            return None
        return r

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
            call = TrialCall(plan, agent, self.job_dir, retries, self.cfg.env_params,
                             self.options.trial_timeout_sec)  # fmt: skip
            return await self.executor.run(
                call, provider=self.provider, start_gate=self.start_gate, teardown=self.teardown
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
