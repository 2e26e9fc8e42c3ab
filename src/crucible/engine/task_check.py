"""`crucible tasks check --run`: does each task's verifier tell a solution from
nothing? The oracle (solution/solve.sh) and nop run on a real provider, and
the task is flagged when the verifier fails for the oracle (a broken task:
every attempt on it would count as 0), when nop scores above 0 (a free
reward), or when the oracle scores below 1 (the reference solution does not
solve the task). A flagged task keeps its trial folders, and its result shows
the verifier's last lines.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path

from pydantic import BaseModel, Field

from crucible.agents.base import Agent
from crucible.agents.nop import NopAgent
from crucible.agents.oracle import OracleAgent
from crucible.engine.spec import TrialPlan, build_spec
from crucible.engine.trial import run_trial
from crucible.errors import CrucibleError, ErrorKind
from crucible.records.trial import TrialResult
from crucible.sandboxes.base import Provider, SandboxSpec
from crucible.store.layout import VERIFIER_DIR
from crucible.tasks.models import Task

TAIL_LINES = 15  # of the verifier's output, shown for a flagged task


class RunOutcome(BaseModel):
    agent: str
    outcome: str
    reward: float | None = None
    error: str | None = None
    verifier_tail: list[str] = Field(default_factory=list)  # last lines of test-stdout.txt


class TaskRunCheck(BaseModel):
    name: str
    oracle: RunOutcome
    nop: RunOutcome
    problems: list[str] = Field(default_factory=list)  # errors: the task is broken
    warnings: list[str] = Field(default_factory=list)
    trials_dir: str | None = None  # where a flagged task's trial folders were kept

    @property
    def ok(self) -> bool:
        return not self.problems


def _outcome(agent: str, r: TrialResult) -> RunOutcome:
    return RunOutcome(
        agent=agent, outcome=r.outcome, reward=r.reward, error=r.error.message if r.error else None
    )


def judge(name: str, oracle: TrialResult, nop: TrialResult) -> TaskRunCheck:
    check = TaskRunCheck(name=name, oracle=_outcome("oracle", oracle), nop=_outcome("nop", nop))
    for who, r in (("oracle", oracle), ("nop", nop)):
        if r.outcome not in ("graded", ErrorKind.verifier_failed.value):
            check.problems.append(
                f"{who} could not be run ({r.outcome}): {r.error.message if r.error else '?'}"
            )
    if oracle.outcome == ErrorKind.verifier_failed.value:
        why = oracle.error.message if oracle.error else "no reward"
        check.problems.append(f"broken task: the verifier fails for the oracle: {why}")
    elif oracle.graded and (oracle.reward or 0.0) < 1.0:
        check.problems.append(
            f"the oracle scores {oracle.reward or 0.0:g}, below 1: "
            "the reference solution does not solve the task"
        )
    if nop.graded and (nop.reward or 0.0) > 0.0:
        check.problems.append(f"nop scores {nop.reward:g}: doing nothing earns a reward")
    return check


async def run_checks(
    tasks: list[Task],
    provider: Provider,
    *,
    concurrency: int = 4,
    env_params: dict[str, str] | None = None,
    keep_dir: Path | None = None,
) -> list[TaskRunCheck]:
    """Oracle and nop on every task; sandboxes the checks leave are cleaned up, and so
    are the trial folders of every task that passed. A flagged task's folders (oracle's
    attempt 0, nop's 1) stay in a new folder under `keep_dir` (default: the system's
    temp dir), named in its result's `trials_dir`."""
    job_id = f"tasks-check-{uuid.uuid4().hex[:8]}"
    sem = asyncio.Semaphore(max(1, concurrency))
    oracle, nop = OracleAgent(), NopAgent()
    job_dir = _new_job_dir(job_id, keep_dir)

    async def one(task: Task, agent: Agent, attempt: int) -> TrialResult:
        async with sem:
            plan = TrialPlan(task=task, attempt=attempt, job_id=job_id)
            return await run_trial(
                plan, provider=provider, agent=agent, job_dir=job_dir, env_params=env_params
            )

    try:
        await provider.preflight()
        await provider.prepare(_specs(tasks, job_id, oracle, env_params))
        results = await asyncio.gather(
            *(one(t, a, i) for t in tasks for i, a in enumerate((oracle, nop)))
        )
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)
        raise
    finally:
        await provider.cleanup(job_id)
    checks = [judge(t.name, results[2 * i], results[2 * i + 1]) for i, t in enumerate(tasks)]
    for check, (o, n) in zip(checks, zip(results[::2], results[1::2], strict=True), strict=True):
        _keep_or_drop(check, job_dir, o, n)
    if all(c.ok for c in checks):
        shutil.rmtree(job_dir, ignore_errors=True)
    return checks


def _new_job_dir(job_id: str, keep_dir: Path | None) -> Path:
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"crucible-{job_id}-", dir=keep_dir))


def _keep_or_drop(check: TaskRunCheck, job_dir: Path, *trials: TrialResult) -> None:
    """A flagged task: its trial folders kept, and the verifier's last lines in the
    outcome of each run that did not score as it should (oracle 1, nop 0). A task that
    passed: its folders removed."""
    for outcome, r, want in zip((check.oracle, check.nop), trials, (1.0, 0.0), strict=True):
        if check.ok:
            shutil.rmtree(job_dir / r.trial_name, ignore_errors=True)
        elif not (r.graded and (r.reward or 0.0) == want):
            outcome.verifier_tail = verifier_tail(job_dir / r.trial_name)
    if not check.ok:
        check.trials_dir = str(job_dir)


def verifier_tail(trial_dir: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last lines of the verifier's output in a trial folder (none if it never ran)."""
    try:
        text = (trial_dir / VERIFIER_DIR / "test-stdout.txt").read_text(errors="replace")
    except OSError:
        return []
    return text.rstrip("\n").splitlines()[-lines:] if text.strip() else []


def _specs(
    tasks: list[Task], job_id: str, agent: Agent, env_params: dict[str, str] | None
) -> list[SandboxSpec]:
    specs = []
    for task in tasks:
        try:
            specs.append(build_spec(TrialPlan(task, 0, job_id), agent, env_params))
        except CrucibleError:
            continue  # the trial reports it
    return specs
