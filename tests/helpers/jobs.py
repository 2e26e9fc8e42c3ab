"""Jobs dirs built on disk the way the job runner leaves them: job.json, job result.json,
job.log, one folder per trial (result.json, trial.log, agent/, verifier/, sandbox/), and the rows
of the SQLite index written through `Index`, its real writer. The suite's one factory
of job folders, step by step or declared at once:

    jobs = JobsFactory(tmp_path / "jobs")
    job = jobs.job("job-a", tasks=["t1", "t2"], attempts=2)
    job.trial("t1", 0, reward=1.0, agent_files={"trajectory.json": "[]"})
    job.trial("t2", 0, error="sandbox_failed", message="boom")
    job.finish("completed")

    write_job(jobs_dir, "job-b", {"t1": [1.0, 0.0], "t2": ["sandbox_failed", T(0.5, cost=0.02)]})

The fixtures `jobs_dir`, `jobs` and `make_job` (registered in tests/conftest.py) give
each test its own jobs dir.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from crucible.errors import ErrorKind
from crucible.records.job import JobConfig, JobSummary, TaskRef
from crucible.records.trial import (
    AgentError,
    AgentInfo,
    AgentResult,
    ErrorInfo,
    ModelInfo,
    TimingInfo,
    TrialResult,
    VerifierResult,
)
from crucible.records.verifier import StageResult
from crucible.store.index import Index
from crucible.store.layout import dump, iter_trial_results, read_job_config, write_json_atomic
from crucible.store.logs import JOB_LOG, TRIAL_LOG, format_line
from crucible.store.procs import process_start

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def trial_name(task: str, attempt: int) -> str:
    return f"{task}__{attempt}"


@dataclass
class JobBuilder:
    jobs_dir: Path
    cfg: JobConfig
    status: str
    pid: int | None
    results: dict[str, TrialResult] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.jobs_dir / self.cfg.job_id

    @property
    def job_id(self) -> str:
        return self.cfg.job_id

    # -- logs ------------------------------------------------------------------
    def job_log(self, message: str, *, at: datetime, level: str = "INFO") -> None:
        with (self.path / JOB_LOG).open("a") as fh:
            fh.write(format_line(level, message, at))

    def trial_log(self, name: str, message: str, *, at: datetime, level: str = "INFO") -> None:
        tdir = self.path / name
        tdir.mkdir(exist_ok=True)
        with (tdir / TRIAL_LOG).open("a") as fh:
            fh.write(format_line(level, message, at))

    # -- trials ----------------------------------------------------------------
    def start_trial(self, task: str, attempt: int, *, at: datetime) -> str:
        """A trial in progress: its folder and first log line, no result.json yet."""
        name = trial_name(task, attempt)
        self.trial_log(name, f"trial {name}: task {task} attempt {attempt}", at=at)
        return name

    def trial(
        self,
        task: str,
        attempt: int = 0,
        *,
        reward: float | Mapping[str, float] | None = 1.0,
        error: str | None = None,
        message: str = "",
        started: datetime | None = None,
        duration: float = 10.0,
        cost: float | None = None,
        tokens: tuple[int, int, int, int] | None = None,  # input, cache read, cache write, output
        agent_error: str | None = None,  # the agent's own failure (a graded trial keeps it)
        agent_files: Mapping[str, str | bytes] | None = None,
        verifier_files: Mapping[str, str | bytes] | None = None,
        sandbox_files: Mapping[str, str | bytes] | None = None,
        extra: Mapping[str, Any] | None = None,  # more TrialResult fields
        stages: Sequence[StageResult] = (),  # the verifier's stages (host-side ones too)
        logs: bool = True,
        index: bool = True,
    ) -> TrialResult:
        """A finished trial: graded with `reward`, or ended with the ErrorKind `error`.
        Its agent phase runs from 1 s after the start to 2 s before the end (at least 1 s)."""
        name = trial_name(task, attempt)
        tdir = self.path / name
        tdir.mkdir(parents=True, exist_ok=True)
        started = started or T0 + timedelta(seconds=len(self.results) * duration)
        finished = started + timedelta(seconds=duration)
        rewards: dict[str, float] | None
        if error is not None:
            rewards = None
        elif isinstance(reward, Mapping):
            rewards = dict(reward)
        else:
            rewards = None if reward is None else {"reward": float(reward)}
        agent = AgentResult(exit_code=0, cost_usd=cost)
        if tokens:
            (agent.n_input_tokens, agent.n_cache_tokens, agent.n_cache_write_tokens,
             agent.n_output_tokens) = tokens  # fmt: skip
        if agent_error:
            agent.error = AgentError(type=agent_error, message="agent gave up")
        metadata = next((t.metadata for t in self.cfg.tasks if t.name == task), {})
        result = TrialResult(
            id=f"id-{self.job_id}-{name}",
            task_name=task,
            trial_name=name,
            job_id=self.job_id,
            attempt=attempt,
            task_checksum="c" * 64,
            task_metadata=dict(metadata),
            agent_info=AgentInfo(
                name=self.cfg.agent,
                model_info=ModelInfo(name=self.cfg.model) if self.cfg.model else None,
            ),
            agent_result=agent,
            verifier_result=VerifierResult(rewards=rewards, exit_code=0, stages=list(stages))
            if rewards
            else None,
            outcome=error or "graded",
            error=ErrorInfo(kind=ErrorKind(error), type="Error", message=message or error)
            if error
            else None,
            started_at=started,
            finished_at=finished,
            agent_execution=TimingInfo(
                started_at=started + timedelta(seconds=1),
                finished_at=started + timedelta(seconds=max(duration - 2, 1)),
            ),
            **dict(extra or {}),
        )
        for sub, files in (
            ("agent", agent_files),
            ("verifier", verifier_files),
            ("sandbox", sandbox_files),  # what a trial collected: sandbox/logs/...
        ):
            if sub == "sandbox" and not files:
                continue  # made only when something was collected
            (tdir / sub).mkdir(exist_ok=True)
            for rel, data in (files or {}).items():
                p = tdir / sub / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(data, bytes):
                    p.write_bytes(data)
                else:
                    p.write_text(data)
        if logs:
            self.trial_log(name, f"trial {name}: task {task} attempt {attempt}", at=started)
            self.trial_log(
                name,
                f"outcome {result.outcome}; reward {result.reward}",
                at=finished,
                level="INFO" if error is None else "ERROR",
            )
        write_json_atomic(tdir / "result.json", dump(result))
        self.results[name] = result
        if index:
            idx = Index(self.jobs_dir)
            try:
                idx.write_trials([result])
                idx.touch_job(self.job_id)
            finally:
                idx.close()
        self.write_summary()
        return result

    # -- job -------------------------------------------------------------------
    def write_summary(self) -> None:
        graded = [r.reward for r in self.results.values() if r.graded and r.reward is not None]
        outcomes: dict[str, int] = {}
        for r in self.results.values():
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        summary = JobSummary(
            job_id=self.job_id,
            status=self.status,
            started_at=self.cfg.created_at,
            finished_at=T0 + timedelta(hours=1) if self.status != "running" else None,
            n_trials=len(self.cfg.tasks) * self.cfg.attempts,
            n_done=len(self.results),
            outcomes=outcomes,
            mean_reward=sum(graded) / len(graded) if graded else None,
        )
        write_json_atomic(self.path / "result.json", dump(summary))

    def set_pid(self, pid: int | None) -> None:
        self.pid = pid
        idx = Index(self.jobs_dir)
        try:
            with idx.conn:
                # with its start time, as Index.upsert_job records the runner's
                idx.conn.execute(
                    "UPDATE jobs SET pid=?, pid_start=? WHERE job_id=?",
                    (pid, process_start(pid), self.job_id),
                )
        finally:
            idx.close()

    def finish(self, status: str = "completed") -> None:
        self.status = status
        self.write_summary()
        idx = Index(self.jobs_dir)
        try:
            idx.set_job_status(self.job_id, status)
        finally:
            idx.close()


class JobsFactory:
    def __init__(self, jobs_dir: Path, tasks_root: Path | None = None) -> None:
        self.jobs_dir = jobs_dir
        self.tasks_root = tasks_root or jobs_dir.parent / "tasks"
        jobs_dir.mkdir(parents=True, exist_ok=True)

    def task_dir(self, name: str, instruction: str | None = None) -> Path:
        tdir = self.tasks_root / name
        tdir.mkdir(parents=True, exist_ok=True)
        p = tdir / "instruction.md"
        if instruction is not None or not p.exists():
            p.write_text(instruction or f"# {name}\n\nDo the thing for {name}.\n")
        return tdir

    def reopen(self, job_id: str) -> JobBuilder:
        """A builder for a job already on disk, to add trials to it as they finish."""
        path = self.jobs_dir / job_id
        cfg = read_job_config(path)
        status = JobSummary.model_validate_json((path / "result.json").read_text()).status
        b = JobBuilder(self.jobs_dir, cfg, status, None)
        b.results = {r.trial_name: r for r in iter_trial_results(path)}
        return b

    def job(
        self,
        job_id: str,
        *,
        tasks: list[str],
        attempts: int = 1,
        agent: str = "oracle",
        model: str | None = None,
        env: str = "local",
        status: str = "running",
        pid: int | None = None,
        created_at: datetime = T0,
        index: bool = True,
        metadata: Mapping[str, Mapping[str, Any]] | None = None,  # per task
        extra: Mapping[str, Any] | None = None,
    ) -> JobBuilder:
        md = metadata or {}
        refs = [
            TaskRef(
                name=t, path=str(self.task_dir(t)), digest="d" * 64, metadata=dict(md.get(t, {}))
            )
            for t in tasks
        ]
        cfg = JobConfig(
            job_id=job_id,
            name=job_id,
            created_at=created_at,
            agent=agent,
            model=model,
            env=env,
            attempts=attempts,
            dataset=[str(self.tasks_root)],
            tasks=refs,
            **dict(extra or {}),
        )
        jdir = self.jobs_dir / job_id
        jdir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(jdir / "job.json", dump(cfg))
        b = JobBuilder(self.jobs_dir, cfg, status, pid)
        if index:
            idx = Index(self.jobs_dir)
            try:
                idx.upsert_job(cfg, status=status, path=jdir, pid=pid)
            finally:
                idx.close()
        b.job_log(f"job {job_id}: {len(tasks) * attempts} trials", at=created_at)
        b.write_summary()
        return b


def read_json(text: str) -> Any:
    return json.loads(text)


# -- declared at once ----------------------------------------------------------


@dataclass
class T:
    """One trial: a reward (float or dict) for a graded trial, or an error kind."""

    reward: float | dict[str, float] | None = None
    error: str | None = None  # an ErrorKind value
    duration: float = 10.0
    cost: float | None = None
    tokens: tuple[int, int, int, int] | None = None  # input, cache read, cache write, output
    agent_error: str | None = None
    trajectory: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)


Spec = float | dict[str, float] | str | T  # a reward, an error kind, or a T


def as_trial(spec: Spec) -> T:
    if isinstance(spec, T):
        return spec
    if isinstance(spec, str):
        return T(error=spec)
    return T(reward=spec)


def write_job(
    jobs_dir: Path,
    job_id: str,
    trials: Mapping[str, Sequence[Spec]],
    *,
    metadata: Mapping[str, Mapping[str, Any]] | None = None,
    agent: str = "oracle",
    model: str | None = None,
    status: str = "completed",
    attempts: int | None = None,
) -> Path:
    """A job folder with one trial per entry of `trials[task]` (entry i is attempt i),
    each with the files an oracle or LLM agent and a passing verifier leave."""
    n_attempts = attempts or max((len(v) for v in trials.values()), default=1)
    job = JobsFactory(jobs_dir).job(
        job_id, tasks=list(trials), attempts=n_attempts, agent=agent, model=model,
        metadata=metadata, status="running",
    )  # fmt: skip
    for task, specs in trials.items():
        for attempt, spec in enumerate(specs):
            t = as_trial(spec)
            graded = t.error is None
            reward = t.reward if t.reward is not None else 0.0
            rewards = reward if isinstance(reward, dict) else {"reward": float(reward)}
            agent_files = (
                {"trajectory.json": json.dumps(t.trajectory)}
                if t.trajectory is not None
                else {"oracle.txt": f"ran solve.sh for {task}\n"}
            )
            verifier_files = {"test-stdout.txt": f"PASSED test_{task}\n"} if graded else {}
            sandbox_files = {"logs/verifier/reward.json": json.dumps(rewards)} if graded else {}
            job.trial(
                task, attempt, reward=rewards if graded else None, error=t.error,
                message=f"{t.error} happened" if t.error else "", duration=t.duration,
                cost=t.cost, tokens=t.tokens, agent_error=t.agent_error,
                agent_files=agent_files, verifier_files=verifier_files,
                sandbox_files=sandbox_files, extra=t.extra, stages=t.stages,
            )  # fmt: skip
    if status != "running":
        job.finish(status)
    return job.path


JobFactory = Callable[..., Path]


# -- fixtures (registered for the whole suite in tests/conftest.py) --------------


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "jobs"
    d.mkdir()
    return d


@pytest.fixture
def jobs(jobs_dir: Path) -> JobsFactory:
    return JobsFactory(jobs_dir)


@pytest.fixture
def make_job(jobs_dir: Path) -> JobFactory:
    def factory(job_id: str, trials: Mapping[str, Sequence[Spec]], **kw: Any) -> Path:
        return write_job(jobs_dir, job_id, trials, **kw)

    return factory
