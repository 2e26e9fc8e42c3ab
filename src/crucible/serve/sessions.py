"""Sessions: a trial whose agent phase a client drives from outside, over HTTP.

`SessionManager.open(task)` starts `run_trial` with a SessionAgent as an asyncio task:
the trial makes the task's sandbox, runs its setup and healthcheck, then calls the
agent, which hands the sandbox to the session (open() returns) and waits. The client
then runs commands and moves files in it (session_ops.py, as the task's agent user),
until it asks to grade: the agent returns, and the trial goes on exactly as any
trial does after its agent phase (every process killed, /logs/agent collected, the
one Grader, result.json in the service's job folder). A session is bounded by its
task's agent timeout (then graded as it stands) and by an idle timeout (no request
for that long: torn down, recorded as cancelled). `close` without grade cancels it.

Before the agent returns, the session stops taking requests, kills what runs in the
sandbox and waits for every request in flight to end, so no command of the client's
can start after the trial's own kill and race the grading.

Each session holds one slot of the service's semaphore (the one grades use, -c)
from before its sandbox is made until it is closed; `max_sessions` caps how many
exist at once (429 beyond). Ids are unguessable (secrets.token_urlsafe): an id
this manager did not make, or made and forgot, is 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crucible.agents.base import Agent, AgentContext
from crucible.engine.spec import TrialPlan, build_spec, trial_name_for
from crucible.engine.trial import run_trial
from crucible.errors import CrucibleError
from crucible.records.serve import (
    DownloadResponse,
    ExecRequest,
    ExecResponse,
    GradeResult,
    SessionCreate,
    SessionInfo,
    UploadRequest,
)
from crucible.records.trial import AgentError, AgentResult, TrialResult
from crucible.sandboxes.base import Provider, Sandbox, SandboxSpec
from crucible.sandboxes.ratelimit import StartGate
from crucible.serve import session_ops
from crucible.serve.session_ops import SessionLimits, SessionRefused
from crucible.serve.verdict import grade_result
from crucible.tasks.models import Task

DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_MAX_SESSIONS = 64
FINISHED_KEPT = 4096  # graded sessions whose answer a retried grade still gets
DRAIN_POLL_S = 0.5  # while requests are in flight at grade time: kill again this often


@dataclass(frozen=True)
class SessionPlan(TrialPlan):
    """A session's trial: named by the session, not by an attempt number."""

    name: str = ""

    @property
    def trial_name(self) -> str:
        return self.name


@dataclass(eq=False)
class Session:
    id: str
    task: Task
    idle_timeout_s: float
    created_at: float = field(default_factory=time.time)
    state: str = "starting"  # starting -> open -> grading -> graded; or closed
    sandbox: Sandbox | None = None
    trial: asyncio.Task[TrialResult] | None = None
    result: TrialResult | None = None
    grade_id: str | None = None
    asked: bool = False  # a client asked to grade (a retried ask is answered cached)
    busy: int = 0  # requests in flight
    last_active: float = field(default_factory=time.monotonic)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # grade: the agent returns
    quiet: asyncio.Event = field(default_factory=asyncio.Event)  # no request in flight

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def info(self) -> SessionInfo:
        return SessionInfo(id=self.id, task_id=self.task.name, task_hash=self.task.digest,
                           workdir=self.task.workdir, created_at=self.created_at,
                           idle_timeout_s=self.idle_timeout_s)  # fmt: skip


class SessionAgent(Agent):
    """The agent of a session's trial: hands the sandbox over and waits for the client."""

    name = "session"
    version = "1"

    def __init__(self, session: Session, manager: SessionManager) -> None:
        self.session = session
        self.manager = manager

    async def run(self, ctx: AgentContext) -> AgentResult:
        s = self.session
        s.sandbox, s.state = ctx.sandbox, "open"
        s.touch()
        s.quiet.set()
        s.ready.set()
        deadline = time.monotonic() + ctx.timeout_sec
        timed_out = False
        while not s.release.is_set():
            now = time.monotonic()
            idle_at = s.last_active + s.idle_timeout_s
            if s.busy == 0 and now >= idle_at:
                self.manager.expire(s)  # cancels this trial: the await below raises
                await asyncio.Event().wait()
            if now >= deadline:
                timed_out = True
                break
            # With a request in flight it is not idle: look again an idle timeout later.
            wake = min(idle_at if s.busy == 0 else now + s.idle_timeout_s, deadline)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake - now)):
                    await s.release.wait()
        await drain(s)
        if timed_out:
            msg = f"the session was not graded within the agent timeout ({ctx.timeout_sec:g}s)"
            return AgentResult(exit_code=0, error=AgentError(type="timeout", message=msg))
        return AgentResult(exit_code=0)


async def drain(s: Session) -> None:
    """Stop taking requests, kill what runs, wait for every request in flight to end."""
    if s.state == "open":
        s.state = "grading"
    assert s.sandbox is not None
    while True:
        with contextlib.suppress(CrucibleError):
            await s.sandbox.kill_all()
        if s.busy == 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_POLL_S):
                await s.quiet.wait()


class SessionManager:
    """Every session of one service: made, driven and ended here."""

    def __init__(
        self,
        tasks: Mapping[str, Task],
        provider: Provider,
        *,
        job_dir: Path,
        job_id: str,
        slots: asyncio.Semaphore,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        limits: SessionLimits | None = None,
        start_gate: StartGate | None = None,
        env_params: dict[str, str] | None = None,
    ) -> None:
        self.tasks = tasks
        self.provider = provider
        self.job_dir = job_dir
        self.job_id = job_id
        self.slots = slots
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.limits = limits or SessionLimits()
        self.start_gate = start_gate
        self.env_params = env_params
        self.live: dict[str, Session] = {}
        self.finished: OrderedDict[str, Session] = OrderedDict()
        self.waiting = 0  # sessions waiting for a slot

    def specs(self) -> list[SandboxSpec]:
        """The sandbox each task's sessions ask for (a warm pool's prepare() takes them)."""
        out = []
        for task in self.tasks.values():
            s = Session(id="", task=task, idle_timeout_s=self.idle_timeout_s)
            plan = SessionPlan(task=task, attempt=0, job_id=self.job_id, name="warm")
            out.append(build_spec(plan, SessionAgent(s, self), self.env_params))
        return out

    # ---- lifecycle ----------------------------------------------------------------

    async def open(self, req: SessionCreate) -> SessionInfo:
        task = self.tasks.get(req.task.id)
        if task is None:
            raise SessionRefused(404, f"no task {req.task.id[:200]!r} is served here")
        if req.task.hash is not None and req.task.hash != task.digest:
            raise SessionRefused(
                409, f"task {task.name!r} has hash {task.digest}, not {req.task.hash}"
            )
        if task.steps:
            raise SessionRefused(
                422, f"task {task.name!r} has steps: sessions grade one agent phase"
            )
        if len(self.live) >= self.max_sessions:
            raise SessionRefused(429, f"{self.max_sessions} sessions are open: close one first")
        s = Session(id=secrets.token_urlsafe(24), task=task,
                    idle_timeout_s=req.idle_timeout_s or self.idle_timeout_s)  # fmt: skip
        self.live[s.id] = s
        s.trial = asyncio.create_task(self._drive(s), name=f"session {task.name}")
        try:
            await asyncio.wait(
                [s.trial, asyncio.ensure_future(s.ready.wait())], return_when="FIRST_COMPLETED"
            )
        except asyncio.CancelledError:  # the client went away: no one will use it
            self.expire(s)
            raise
        if not s.ready.is_set():  # the trial ended before its agent phase
            r = s.trial.result() if not s.trial.cancelled() else None
            why = r.error.message if r is not None and r.error is not None else "cancelled"
            raise SessionRefused(503, f"the session's sandbox could not start: {why}"[:1000])
        return s.info()

    async def _drive(self, s: Session) -> TrialResult:
        trial_name = (
            f"{trial_name_for(s.task.name, 0).removesuffix('__0')}__s{secrets.token_hex(6)}"
        )
        plan = SessionPlan(task=s.task, attempt=0, job_id=self.job_id, name=trial_name)
        try:
            self.waiting += 1
            try:
                await self.slots.acquire()
            finally:
                self.waiting -= 1
            try:
                s.result = await run_trial(plan, provider=self.provider,
                                           agent=SessionAgent(s, self), job_dir=self.job_dir,
                                           env_params=self.env_params,
                                           start_gate=self.start_gate)  # fmt: skip
            finally:
                self.slots.release()
        except BaseException:
            s.state = "closed"
            raise
        finally:
            s.ready.set()  # open() is waiting for one or the other
            self.live.pop(s.id, None)
        if s.state not in ("closed", "starting"):  # starting: open() answered 503
            s.state = "graded"
            self.finished[s.id] = s
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)
        return s.result

    def expire(self, s: Session) -> None:
        """Tear a session down now (idle, abandoned): its trial is cancelled."""
        s.state = "closed"
        if s.trial is not None:
            s.trial.cancel()

    async def close(self, session_id: str) -> None:
        s = self.live.get(session_id)
        if s is None:
            if self.finished.pop(session_id, None) is None:
                raise SessionRefused(404, "no such session")
            return
        if s.state == "grading":  # its grade is under way: it ends by itself
            assert s.trial is not None
            await asyncio.shield(s.trial)
            self.finished.pop(session_id, None)
            return
        self.expire(s)
        assert s.trial is not None
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(s.trial)

    async def aclose(self) -> None:
        """The service stops: every open session is torn down."""
        for s in list(self.live.values()):
            self.expire(s)
        trials = [s.trial for s in self.live.values() if s.trial is not None]
        await asyncio.gather(*trials, return_exceptions=True)

    async def grade(self, session_id: str, grade_id: str | None) -> GradeResult:
        s = self.live.get(session_id) or self.finished.get(session_id)
        if s is None or s.state == "closed":
            raise SessionRefused(404, "no such session")
        if s.state == "starting":
            raise SessionRefused(409, "the session is not open yet")
        if s.asked and grade_id is not None and s.grade_id is not None and grade_id != s.grade_id:
            raise SessionRefused(409, f"the session was graded under id {s.grade_id!r}")
        cached = s.asked
        if not s.asked:
            s.asked, s.grade_id = True, grade_id
        s.release.set()
        assert s.trial is not None
        try:
            result = await asyncio.shield(s.trial)  # a client that leaves does not stop it
        except asyncio.CancelledError:
            if s.trial.cancelled():
                raise SessionRefused(404, "the session was closed") from None
            raise
        return grade_result(result, id=s.grade_id or s.id, cached=cached)

    # ---- requests inside the sandbox ------------------------------------------------

    @contextlib.asynccontextmanager
    async def _using(self, session_id: str) -> AsyncIterator[tuple[Session, Sandbox]]:
        s = self.live.get(session_id)
        if s is None:
            if session_id in self.finished:
                raise SessionRefused(409, "the session is graded: open a new one")
            raise SessionRefused(404, "no such session")
        if s.state != "open" or s.sandbox is None:
            raise SessionRefused(409, f"the session is {s.state}: it takes no more commands")
        s.busy += 1
        s.quiet.clear()
        s.touch()
        try:
            yield s, s.sandbox
        except CrucibleError as exc:
            raise SessionRefused(
                502, f"the session's sandbox failed: {exc.message}"[:1000]
            ) from exc
        finally:
            s.busy -= 1
            s.touch()
            if s.busy == 0:
                s.quiet.set()

    async def exec(self, session_id: str, req: ExecRequest) -> ExecResponse:
        async with self._using(session_id) as (s, box):
            return await session_ops.run_exec(box, s.task, req, self.limits)

    async def upload(self, session_id: str, req: UploadRequest) -> None:
        async with self._using(session_id) as (s, box):
            await session_ops.run_upload(box, s.task, req, self.limits)

    async def download(self, session_id: str, path: str) -> DownloadResponse:
        async with self._using(session_id) as (s, box):
            return await session_ops.run_download(box, s.task, path, self.limits)

    def info(self, session_id: str) -> SessionInfo:
        s = self.live.get(session_id)
        if s is None:
            raise SessionRefused(404, "no such session")
        return s.info()
