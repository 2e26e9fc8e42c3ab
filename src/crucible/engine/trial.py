"""The lifecycle of one trial, with Harbor's semantics.

create sandbox (engine/spec.py) -> agent under its timeout -> kill every agent
process, collect /logs/agent -> grade (engine/grading/grader.py: the submission and
artifacts taken, tests/test.sh in place or in a separate verifier sandbox, the reward
read, the host-side stages) -> tear down. A multi-step task runs its steps
(engine/steps.py), each graded by the same Grader. Every way out is recorded as data
in a TrialResult; only cancellation propagates (after the record is written).
"""

from __future__ import annotations

import asyncio
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

from crucible.agents.base import Agent, AgentContext
from crucible.engine.collect import TrialCollector
from crucible.engine.grading.blame import ended_by_attempt, shielded
from crucible.engine.grading.grader import Grader
from crucible.engine.healthcheck import run_healthcheck
from crucible.engine.spec import TrialPlan, build_spec, create_sandbox
from crucible.engine.steps import StepsRun
from crucible.engine.teardown import Teardown
from crucible.errors import (
    Cancelled,
    CrucibleError,
    ErrorKind,
    ResourcesUnavailable,
    SandboxFailed,
    VerifierFailed,
)
from crucible.records.live import set_phase
from crucible.records.trial import (
    AgentError,
    AgentResult,
    ErrorInfo,
    ExceptionInfo,
    TimingInfo,
    TrialResult,
    utcnow,
)
from crucible.sandboxes.base import Provider, Sandbox
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.layout import AGENT_DIR, LOGS_AGENT, storable_dump, write_json_atomic
from crucible.store.logs import TRIAL_LOG, FileLog
from crucible.tasks.models import Task

# Slack on top of the agent's own timeout before the trial stops waiting for it.
AGENT_GRACE_SEC = 5.0
# Beyond the attempt's own budgets, how long before a trial over its limit reads as a hang
# (host-side stages, collection and teardown run outside those budgets).
HANG_MARGIN_SEC = 300.0


class _Phase:
    """Times one phase into a TimingInfo."""

    def __init__(self, log: FileLog, name: str) -> None:
        self.log = log
        self.name = name
        self.timing = TimingInfo(started_at=utcnow())
        log.info(f"{name}: started")
        set_phase(name)  # for the progress line

    def done(self, note: str = "") -> TimingInfo:
        self.timing.finished_at = utcnow()
        d = self.timing.duration_sec or 0.0
        self.log.info(f"{self.name}: finished in {d:.3f}s{' (' + note + ')' if note else ''}")
        return self.timing


def prepare_trial_dir(trial_dir: Path) -> None:
    if trial_dir.exists():
        shutil.rmtree(trial_dir)  # an earlier try of this trial (retry or resume)
    # agent/ is where agents write on the host; sandbox/ (what is collected) is
    # created when something is collected into it (mkdir is not free at 1000s/s).
    trial_dir.mkdir(parents=True)
    (trial_dir / AGENT_DIR).mkdir()


async def _run_agent(agent: Agent, ctx: AgentContext) -> AgentResult:
    try:
        return await asyncio.wait_for(agent.run(ctx), timeout=ctx.timeout_sec + AGENT_GRACE_SEC)
    except TimeoutError:
        return AgentResult(
            error=AgentError(type="timeout", message=f"agent timed out after {ctx.timeout_sec:g}s")
        )
    except CrucibleError:
        raise  # infrastructure, not the agent's failure
    except Exception as exc:  # the agent crashed: a failure at the task, still graded
        return AgentResult(
            error=AgentError(type="crash", message=f"{type(exc).__name__}: {exc}"),
            metadata={"traceback": traceback.format_exc()[-4000:]},
        )


async def run_trial(
    plan: TrialPlan,
    *,
    provider: Provider,
    agent: Agent,
    job_dir: Path,
    retries: int = 0,
    env_params: dict[str, str] | None = None,
    time_limit_sec: float | None = None,
    start_gate: StartGate | None = None,
    teardown: Teardown | None = None,
) -> TrialResult:
    """Run one trial to a final TrialResult written to <job>/<trial>/result.json.

    `time_limit_sec` bounds the whole trial: a trial past it is a hang, which
    is the provider's failure (sandbox_failed, retryable), never a zero. With the
    job's `teardown`, it returns while its sandbox is still closing.
    """
    task = plan.task
    trial_dir = job_dir / plan.trial_name
    prepare_trial_dir(trial_dir)
    log = FileLog(trial_dir / TRIAL_LOG)
    result = TrialResult(
        id=str(uuid4()),
        task_name=task.name,
        trial_name=plan.trial_name,
        job_id=plan.job_id,
        attempt=plan.attempt,
        task_checksum=task.digest,
        source=task.config.source,
        task_metadata=dict(task.metadata),
        agent_info=agent.info(),
        retries=retries,
        started_at=utcnow(),
        verifier_environment_mode=None if task.steps else task.config.verifier_mode().value,
    )
    log.info(f"trial {plan.trial_name}: task {task.name} attempt {plan.attempt} (retry {retries})")
    run = _TrialRun(plan, provider, agent, trial_dir, log, result, env_params, start_gate)
    run.teardown = teardown
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(time_limit_sec):
            await run.phases()
    except asyncio.CancelledError:
        _fail(result, Cancelled("the trial was cancelled"), log, run.phase)
        _finish(result, trial_dir, log, t0)
        raise
    except TimeoutError:
        _fail(result, _over_time(run, time_limit_sec or 0.0, time.monotonic()), log, run.phase)
    except CrucibleError as exc:
        _fail(result, exc, log, run.phase)
    except Exception as exc:  # a provider's unexpected exception is still its failure
        _fail(result, SandboxFailed(f"{type(exc).__name__}: {exc}"), log, run.phase, exc)
    return _finish(result, trial_dir, log, t0)


def attempt_budget_sec(task: Task) -> float:
    """The longest the attempt's own phases may take: every agent phase and every grading
    under their timeouts (one of each, or one per step), with the agent's grace."""
    phases = [(s.agent.timeout_sec, s.verifier.timeout_sec) for s in task.steps] or [
        (task.agent_timeout_sec, task.verifier_timeout_sec)
    ]
    return sum((a or task.agent_timeout_sec) + AGENT_GRACE_SEC + v for a, v in phases)


def _over_time(run: _TrialRun, limit: float, now: float) -> CrucibleError:
    """A trial past the job's time limit. Once its agent has started and while the attempt
    is still inside its own phases' budgets, the limit (an operator's, shorter than the
    task's timeouts) cut the attempt's own time: that counts against it, or a stalling
    agent would trade its 0 for a retried gap. Past those budgets it is a hang of the
    provider or of crucible (sandbox_failed, retried)."""
    started = run.agent_started_at
    if started is not None and now - started <= attempt_budget_sec(run.plan.task) + HANG_MARGIN_SEC:
        return VerifierFailed(
            f"the trial reached its time limit of {limit:g}s while the attempt ran "
            "(within its own agent and verifier timeouts): counted against the attempt"
        )
    return SandboxFailed(f"the trial exceeded its time limit of {limit:g}s (a hang)")


@dataclass
class _TrialRun:
    plan: TrialPlan
    provider: Provider
    agent: Agent
    trial_dir: Path
    log: FileLog
    result: TrialResult
    env_params: dict[str, str] | None
    start_gate: StartGate | None = None
    phase: _Phase | None = None
    collector: TrialCollector | None = None
    agent_started: bool = False  # from here on, the sandbox's end may be the attempt's
    agent_started_at: float | None = None  # monotonic
    teardown: Teardown | None = None  # the job's: the sandbox is closed behind the trial

    async def phases(self) -> None:
        sandbox: Sandbox | None = None
        try:
            sandbox = await self._environment()
            try:
                await self._attempt(sandbox)
            except Exception as exc:
                if not self.agent_started:  # nothing of the attempt's ran yet
                    raise
                ended = await ended_by_attempt(sandbox, exc)  # did the agent end it?
                if ended is None:
                    raise
                raise ended from exc
        finally:
            if sandbox is not None:  # with a job's teardown: closed behind the trial
                await (self.teardown.close(sandbox) if self.teardown else shielded(sandbox.close()))
            if self.collector is not None:
                self.collector.write()

    async def _attempt(self, sandbox: Sandbox) -> None:
        """The agent phase(s) and grading, in a sandbox whose environment is ready."""
        task = self.plan.task
        if task.steps:  # each step's agent phase and grade: engine/steps.py
            steps = StepsRun(task, self.agent, self._run_agent, self.trial_dir, self.log,
                             self.result, self._grader())  # fmt: skip
            self.phase = _Phase(self.log, "agent_execution")  # every step's, graded
            await steps.run(sandbox)
            self.result.agent_execution, self.phase = self.phase.done(), None
            return
        await self._agent(sandbox)
        self.phase = _Phase(self.log, "verifier")
        graded = await self._grader().grade(sandbox, task, into=self.trial_dir)
        self.result.verifier = self.phase.done(f"rewards {graded.rewards}")
        self.phase = None

    def _grader(self) -> Grader:
        if self.collector is None:
            self.collector = TrialCollector(self.trial_dir, self.log)
        plan = self.plan
        return Grader(
            plan.task,
            self.result,
            self.collector,
            self.log,
            self.provider,
            plan.job_id,
            plan.trial_name,
            params=self.env_params,
            gate=self.start_gate,
            tampered=plan.tampered,
        )

    async def _run_agent(self, agent: Agent, ctx: AgentContext) -> AgentResult:
        self.agent_started = True
        if self.agent_started_at is None:
            self.agent_started_at = time.monotonic()
        return await _run_agent(agent, ctx)

    async def _environment(self) -> Sandbox:
        task, result = self.plan.task, self.result
        self.phase = _Phase(self.log, "environment_setup")
        spec = build_spec(self.plan, self.agent, self.env_params)
        caps = self.provider.capabilities()
        if spec.gpus > caps.gpus:
            raise ResourcesUnavailable(
                f"task {task.name!r} asks for {spec.gpus} GPU(s); provider "
                f"{self.provider.name!r} offers {caps.gpus}",
                hint="run GPU tasks on a provider with GPUs (e.g. --env modal)",
            )
        sandbox = await create_sandbox(
            self.provider, spec, self.start_gate, what="the agent's sandbox"
        )
        try:  # before the agent: only the environment can fail it
            await run_healthcheck(
                sandbox, task.config.environment.healthcheck, self.log, cwd=task.workdir
            )
        except BaseException:
            await shielded(sandbox.close())
            raise
        result.environment_setup = self.phase.done()
        return sandbox

    async def _agent(self, sandbox: Sandbox) -> None:
        task, result = self.plan.task, self.result
        self.phase = _Phase(self.log, "agent_execution")
        ctx = AgentContext(
            task=task,
            sandbox=sandbox,
            logs_dir=self.trial_dir / AGENT_DIR,
            timeout_sec=task.agent_timeout_sec,
        )
        result.agent_result = await self._run_agent(self.agent, ctx)
        err = result.agent_result.error
        result.agent_execution = self.phase.done(f"agent error: {err.type}" if err else "")
        await sandbox.kill_all()  # nothing may race the copy
        if self.collector is None:
            self.collector = TrialCollector(self.trial_dir, self.log)
        await self.collector.collect(sandbox, LOGS_AGENT)


def _fail(
    result: TrialResult,
    exc: CrucibleError,
    log: FileLog,
    phase: _Phase | None,
    original: BaseException | None = None,
) -> None:
    origin = original or exc
    result.outcome = exc.kind.value
    result.error = ErrorInfo(kind=exc.kind, type=type(origin).__name__, message=exc.message)
    result.exception_info = ExceptionInfo(
        exception_type=type(origin).__name__,
        exception_message=str(origin),
        exception_traceback="".join(traceback.format_exception(origin))[-8000:],
    )
    where = f" during {phase.name}" if phase else ""
    log.error(f"{exc.kind.value}{where}: {exc.message}")
    if phase is not None:
        setattr(result, phase.name, phase.done("failed"))
    if exc.kind == ErrorKind.verifier_failed and result.verifier_result is not None:
        result.verifier_result.rewards = None


def _finish(result: TrialResult, trial_dir: Path, log: FileLog, t0: float) -> TrialResult:
    """Write the final record and return it: the record as written (escaped where a
    string could not be stored as it was), which the job then counts and indexes."""
    result.finished_at = utcnow()
    log.info(f"outcome {result.outcome}; reward {result.reward}; {time.monotonic() - t0:.3f}s")
    record, text, warnings = storable_dump(result)
    for w in warnings:
        log.warning(f"result.json: {w}")
    log.close()
    write_json_atomic(trial_dir / "result.json", text)
    return record
