"""A multi-step trial (Harbor's [[steps]]): every step in one sandbox, in order.

For each step: empty /tests and /logs/verifier where the previous step was graded in
place -> stage steps/NAME/workdir/ into the workdir and run its setup.sh -> the step's
healthcheck -> the agent phase with the step's instruction -> kill every process ->
grade it as a one-step trial is graded (engine/grading/grader.py: the step's submission
and artifacts taken, the task's tests/ with its own over them in the agent's sandbox or
in a separate verifier sandbox, then the task's host-side stages) -> check min_reward on the rewards after the stages: a step
below it (or without rewards) ends the trial's steps. The agent's sandbox lives until
the last step is graded. The trial's rewards then come from the steps' by multi_step_reward_strategy
(Harbor's: 'mean' per key over the graded steps, a missing key counting 0; 'final' the
last step's as they are, none when its grading failed; unset means 'mean').

Blame is a one-step trial's: the first step's setup and healthcheck run before any
agent, so their failure is the environment's (sandbox_failed); a later step's setup,
healthcheck or grading that fails in a live sandbox may be an earlier agent's doing,
so it is verifier_failed (counted, never retried).
Each step's files land under <trial>/steps/NAME/ (agent/, sandbox/logs/... with its own
/logs/artifacts, sandbox/artifacts/, sandbox/submission/, verifier/).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from crucible.agents.base import Agent, AgentContext
from crucible.engine.grading.blame import blamed
from crucible.engine.grading.grader import Grader
from crucible.engine.healthcheck import run_healthcheck
from crucible.errors import CrucibleError, SandboxFailed
from crucible.records.trial import (
    AgentResult,
    StepResult,
    TimingInfo,
    TrialResult,
    VerifierResult,
    utcnow,
)
from crucible.sandboxes.base import Sandbox
from crucible.store.layout import AGENT_DIR, LOGS_AGENT
from crucible.store.logs import FileLog
from crucible.tasks.models import StepSection, Task
from crucible.tasks.sections import RewardStrategy

STEPS_DIR = "steps"  # in the trial folder: one folder per step
SETUP_SCRIPT = "setup.sh"

RunAgent = Callable[[Agent, AgentContext], Awaitable[AgentResult]]


def step_task(task: Task, step: StepSection) -> Task:
    """The task as step `step` sees it: its instruction, tests, solution, and its
    [steps.agent] / [steps.verifier] fields over the task's, but as Harbor has them, the
    verifier's env tables merged (the step's keys win), and the collect hooks and
    artifacts the task's followed by the step's."""
    cfg = task.config

    def over(base: BaseModel, own: BaseModel, **merged: object) -> BaseModel:
        fields = {k: getattr(own, k) for k in own.model_fields_set}
        return base.model_copy(update={**fields, **merged})

    verifier = over(
        cfg.verifier,
        step.verifier,
        env={**cfg.verifier.env, **step.verifier.env},
        collect=[*cfg.verifier.collect, *step.verifier.collect],
    )
    config = cfg.model_copy(
        update={
            "agent": over(cfg.agent, step.agent),
            "verifier": verifier,
            "artifacts": [*cfg.artifacts, *step.artifacts],
        }
    )
    return task.model_copy(
        update={
            "config": config,
            "instruction": task.step_instructions.get(step.name, ""),
            "step_name": step.name,
        }
    )


def meets(min_reward: float | dict[str, float] | None, rewards: dict[str, float] | None) -> bool:
    """Harbor's gate: a float gates 'reward', a table each of its keys; a missing key or
    no rewards at all counts as -inf."""
    if min_reward is None:
        return True
    gates = {"reward": min_reward} if isinstance(min_reward, float | int) else min_reward
    got = rewards or {}
    return all(key in got and got[key] >= floor for key, floor in gates.items())


def combine(strategy: RewardStrategy | None, steps: list[StepResult]) -> dict[str, float] | None:
    """The trial's rewards from its steps' (None: no step was graded)."""

    def of(step: StepResult) -> dict[str, float] | None:
        return step.verifier_result.rewards if step.verifier_result else None

    if strategy == RewardStrategy.final:  # the last step that ran, as it is
        last = of(steps[-1]) if steps else None
        return dict(last) if last is not None else None
    rewards = [r for s in steps if (r := of(s)) is not None]
    if not rewards:
        return None
    keys = list(dict.fromkeys(k for r in rewards for k in r))
    return {k: sum(r.get(k, 0.0) for r in rewards) / len(rewards) for k in keys}


_COUNTS = ("n_input_tokens", "n_cache_tokens", "n_cache_write_tokens", "n_output_tokens")


def summed(results: list[AgentResult]) -> AgentResult:
    """The steps' agent results as one: tokens, turns and cost added up (None where no step
    counted them), the exit and error of the last step that ran."""
    out = results[-1].model_copy(deep=True)
    for key in (*_COUNTS, "n_turns", "cost_usd"):
        values = [v for r in results if (v := getattr(r, key)) is not None]
        setattr(out, key, sum(values) if values else None)
    return out


@dataclass
class StepsRun:
    task: Task
    agent: Agent
    run_agent: RunAgent
    trial_dir: Path
    log: FileLog
    result: TrialResult
    grader: Grader  # its collector takes each step's /logs/agent too

    async def run(self, sandbox: Sandbox) -> None:
        """Every step in order; the trial's verifier_result from their rewards."""
        done: list[StepResult] = []
        self.result.steps = done
        grader = self.grader
        failed = False
        try:
            for index, step in enumerate(self.task.steps):
                record = StepResult(name=step.name)
                done.append(record)
                try:
                    await self._step(sandbox, grader, index, step, record)
                except CrucibleError as exc:
                    record.error, failed = exc.message, True
                    raise
                if record.passed_min_reward is False:
                    self.log.info(f"step {step.name}: below its min_reward; later steps skipped")
                    break
        finally:
            ran = [s.agent_result for s in done if s.agent_result is not None]
            if ran:  # the trial's agent: every step's tokens and cost, the last one's ending
                self.result.agent_result = summed(ran)
            rewards = combine(self.task.config.multi_step_reward_strategy, done)
            if rewards is not None:  # a trial that ends in an error has no reward
                self.result.verifier_result = VerifierResult(rewards=None if failed else rewards)

    async def _step(
        self,
        sandbox: Sandbox,
        grader: Grader,
        index: int,
        step: StepSection,
        record: StepResult,
    ) -> None:
        task = step_task(self.task, step)
        folder = self.trial_dir / STEPS_DIR / step.name
        (folder / AGENT_DIR).mkdir(parents=True)
        self.log.info(f"step {index + 1}/{len(self.task.steps)} {step.name}: started")
        ready = self._ready(sandbox, grader, task, step)
        if index == 0:  # no agent has run yet: a failure here is the environment's
            await ready
        else:  # an earlier agent may have caused it (and must not win a retry by it)
            await blamed(sandbox, ready)

        record.agent_execution = TimingInfo(started_at=utcnow())
        ctx = AgentContext(
            task=task,
            sandbox=sandbox,
            logs_dir=folder / AGENT_DIR,
            timeout_sec=task.agent_timeout_sec,
        )
        record.agent_result = await self.run_agent(self.agent, ctx)
        record.agent_execution.finished_at = utcnow()
        await sandbox.kill_all()  # nothing may race the copy, nor outlive the phase
        await self.grader.collector.collect(sandbox, LOGS_AGENT, folder / "sandbox/logs/agent")

        last = index == len(self.task.steps) - 1
        record.verifier = TimingInfo(started_at=utcnow())
        graded = await grader.grade(sandbox, task, into=folder, step=step, last=last)
        record.verifier.finished_at = utcnow()
        rewards = graded.rewards
        if step.min_reward is not None:  # on the rewards after the host-side stages
            record.passed_min_reward = meets(step.min_reward, rewards)
        self.log.info(f"step {step.name}: rewards {rewards}")

    async def _ready(self, sandbox: Sandbox, grader: Grader, task: Task, step: StepSection) -> None:
        await grader.clear(sandbox)
        await self._setup(sandbox, task, step)
        await run_healthcheck(sandbox, step.healthcheck, self.log, cwd=task.workdir)

    async def _setup(self, sandbox: Sandbox, task: Task, step: StepSection) -> None:
        """steps/NAME/workdir/ into the workdir, then its setup.sh (as root) run and removed."""
        staged = task.step_dir(step.name) / "workdir"
        if not staged.is_dir():
            return
        await sandbox.upload_dir(staged, task.workdir)
        if not (staged / SETUP_SCRIPT).is_file():
            return
        res = await sandbox.exec(
            f"bash ./{SETUP_SCRIPT}; s=$?; rm -f ./{SETUP_SCRIPT}; exit $s",
            timeout=task.config.environment.build_timeout_sec,
            cwd=task.workdir,
        )
        if not res.ok:
            tail = (res.stderr.strip() or res.stdout.strip())[-300:]
            raise SandboxFailed(f"step {step.name!r}: setup.sh exited {res.exit_code}: {tail}")
        self.log.info(f"step {step.name}: setup.sh done")
