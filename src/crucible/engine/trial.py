"""The lifecycle of one trial, with Harbor's semantics.

create sandbox -> agent under its timeout -> kill every agent process, reset
/tests and the reward folder from the host side, copy tests in -> tests/test.sh
under the verifier timeout -> reward.json | reward.txt -> tear down. Every way
out is recorded as data in a TrialResult; only cancellation propagates (after
the record is written).
Grading and who is to blame when it breaks: engine/grading.py; declared artifacts
and collect hooks: engine/artifacts.py; a separate verifier sandbox: engine/separate.py.
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
from crucible.engine.artifacts import Taken, hand_over
from crucible.engine.collect import TrialCollector
from crucible.engine.grading import (
    blamed,
    ended_by_attempt,
    grade,
    note_changes,
    record_grade,
    shielded,
)
from crucible.engine.healthcheck import run_healthcheck
from crucible.engine.separate import grade_separately, verifier_spec
from crucible.engine.spec import TrialPlan, build_spec
from crucible.engine.step_grade import VerifierSandboxes
from crucible.engine.steps import StepsRun
from crucible.engine.teardown import Teardown
from crucible.errors import Cancelled, CrucibleError, ErrorKind, ResourcesUnavailable, SandboxFailed
from crucible.records.live import set_phase
from crucible.records.trial import (
    AgentError,
    AgentResult,
    ErrorInfo,
    ExceptionInfo,
    TimingInfo,
    TrialResult,
    VerifierResult,
    utcnow,
)
from crucible.sandboxes.base import Provider, Sandbox
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.layout import (
    AGENT_DIR,
    LOGS_AGENT,
    LOGS_ARTIFACTS,
    LOGS_VERIFIER,
    VERIFIER_DIR,
    storable_dump,
    write_json_atomic,
)
from crucible.store.logs import TRIAL_LOG, FileLog
from crucible.tasks.sections import VerifierMode
from crucible.verifiers.pipeline import (
    FetchSubmission,
    has_stages,
    reward_range,
    run_pipeline,
    submission_paths,
)
from crucible.verifiers.submission import Submission, collect_submission

# Slack on top of the agent's own timeout before the trial stops waiting for it.
AGENT_GRACE_SEC = 5.0


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
        exc = SandboxFailed(f"the trial exceeded its time limit of {time_limit_sec:g}s (a hang)")
        _fail(result, exc, log, run.phase)
    except CrucibleError as exc:
        _fail(result, exc, log, run.phase)
    except Exception as exc:  # a provider's unexpected exception is still its failure
        _fail(result, SandboxFailed(f"{type(exc).__name__}: {exc}"), log, run.phase, exc)
    return _finish(result, trial_dir, log, t0)


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
    submission: Submission | None = None  # taken from the agent's sandbox (separate mode)
    agent_started: bool = False  # from here on, the sandbox's end may be the attempt's
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
        if self.plan.task.steps:  # each step's agent phase and grade: engine/steps.py
            self.collector = TrialCollector(self.trial_dir, self.log)
            verifiers = VerifierSandboxes(
                self.provider,
                self.plan.job_id,
                self.plan.trial_name,
                self.env_params,
                self.start_gate,
                self.plan.tampered,
            )
            steps = StepsRun(
                self.plan.task,
                self.agent,
                self._run_agent,
                self.trial_dir,
                self.log,
                self.result,
                self.collector,
                verifiers,
            )
            self.phase = _Phase(self.log, "agent_execution")  # every step's, graded
            await steps.run(sandbox)
            self.result.agent_execution, self.phase = self.phase.done(), None
            return
        await self._agent(sandbox)
        separate = self.plan.task.config.verifier_mode() == VerifierMode.separate
        assert self.collector is not None  # made by the agent phase's collection
        taken, changed = await hand_over(
            sandbox, self.plan.task, self.collector, self.log, separate=separate
        )
        if separate:  # nothing else needs the agent's sandbox: gone before grading
            note_changes(self.result, changed, self.log, shared=False)
            if has_stages(self.plan.task):  # the submission is the agent's: taken first
                self.submission = await blamed(sandbox, self._submission(sandbox))
            await shielded(sandbox.close())
        await self._verify(sandbox, taken if separate else None)

    async def _run_agent(self, agent: Agent, ctx: AgentContext) -> AgentResult:
        self.agent_started = True
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
        if self.start_gate is None:
            sandbox = await self.provider.create(spec)
        else:  # the job's creation rate limit and cap on sandboxes still starting
            async with self.start_gate.starting():
                sandbox = await self.provider.create(spec)
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
        await self._collect(sandbox, LOGS_AGENT)

    async def _collect(self, sandbox: Sandbox, *folders: str) -> Path:
        """Kill every process in the sandbox, then collect: nothing may race the copy."""
        await sandbox.kill_all()
        if self.collector is None:
            self.collector = TrialCollector(self.trial_dir, self.log)
        dirs = [await self.collector.collect(sandbox, src) for src in folders]
        return dirs[0]

    async def _submission(self, sandbox: Sandbox) -> Submission:
        return await collect_submission(sandbox, submission_paths(self.plan.task), self.trial_dir)

    def _fetch(self, sandbox: Sandbox) -> FetchSubmission:
        """The stages' submission: taken before a separate verifier, else now."""

        async def fetch(paths: list[str]) -> Submission:
            if self.submission is not None:
                return self.submission
            return await blamed(sandbox, self._submission(sandbox))

        return fetch

    async def _verify(self, sandbox: Sandbox, taken: list[Taken] | None) -> None:
        """Grade in the agent's sandbox, or (`taken` given) in a separate one."""
        task, result = self.plan.task, self.result
        self.phase = _Phase(self.log, "verifier")
        if taken is None:
            graded = blamed(
                sandbox,
                grade(
                    sandbox,
                    task,
                    result,
                    self.log,
                    lambda: self._collect(sandbox, LOGS_VERIFIER, LOGS_ARTIFACTS),
                    self.plan.tampered,
                ),
            )
        else:
            spec = verifier_spec(
                task, job_id=self.plan.job_id, trial_id=self.plan.trial_name, params=self.env_params
            )
            graded = grade_separately(
                task,
                spec,
                self.provider,
                taken,
                self.log,
                lambda verifier: self._collect(verifier, LOGS_VERIFIER, LOGS_ARTIFACTS),
                self.start_gate,
            )
        res, verifier_dir = await graded

        def hold(record: VerifierResult) -> None:
            result.verifier_result = record

        own = self.trial_dir / VERIFIER_DIR  # crucible's; never shares a folder with the sandbox's
        graded_record = record_grade(
            res, verifier_dir, own, task.verifier_timeout_sec, self.log, hold, reward_range(task)
        )
        # -- host-side verifier stages (verifiers/pipeline.py): gate, score or veto the
        # rewards just read. A stage that cannot run raises its error kind from here.
        if has_stages(task):
            await run_pipeline(task, graded_record, self._fetch(sandbox), self.log)
        # -- end of host-side stages
        result.verifier = self.phase.done(f"rewards {graded_record.rewards}")
        self.phase = None


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
