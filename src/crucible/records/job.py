"""Job-level records: job.json (JobConfig) and a job's result.json (JobSummary)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from crucible.records.defaults import (
    DEFAULT_ATTEMPTS,
    DEFAULT_CONCURRENCY,
    DEFAULT_ENV,
    DEFAULT_MAX_RETRIES,
)
from crucible.records.tamper import TamperPolicy
from crucible.records.trial import utcnow


class TaskRef(BaseModel):
    name: str
    path: str
    digest: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class JobConfig(BaseModel):
    """job.json: the job as planned and run."""

    schema_version: int = 1
    job_id: str
    name: str
    # What the run is: "eval" (a job of trials), "generate" (task generation), "train", ...
    kind: str = "eval"
    created_at: datetime = Field(default_factory=utcnow)
    agent: str
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    env: str = DEFAULT_ENV
    env_params: dict[str, str] = Field(default_factory=dict)
    attempts: int = DEFAULT_ATTEMPTS
    concurrency: int = DEFAULT_CONCURRENCY
    max_retries: int = DEFAULT_MAX_RETRIES
    no_network: bool = False  # `--no-network`: every task ran without network
    # `--task-env`: the host variables the tasks could read (names only, never values).
    task_env: list[str] = Field(default_factory=list)
    # `--tampered`: "flag" records changes grading could run; "zero" also counts them 0.
    tampered: TamperPolicy = "flag"
    dataset: list[str] = Field(default_factory=list)  # the paths given
    tasks: list[TaskRef] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)


class JobSummary(BaseModel):
    """result.json of a job."""

    schema_version: int = 1
    job_id: str
    status: str  # running | completed | failed | cancelled
    started_at: datetime | None = None
    finished_at: datetime | None = None
    n_trials: int = 0
    n_done: int = 0  # finished: graded or ended in an error (not the cancelled ones)
    n_cancelled: int = 0  # stopped by a cancel: neither done nor left out; a resume runs them
    outcomes: dict[str, int] = Field(default_factory=dict)  # graded / error kinds
    # verifier_failed counts as 0; the other errors (infrastructure) are left out,
    # and n_excluded says how many were.
    mean_reward: float | None = None
    n_excluded: int = 0
    # The reward key the mean and pass@k are on ('reward' if any trial has it, else the
    # first seen), and the graded trials without it: each counted 0, as Harbor counts them.
    primary: str | None = None
    n_without_primary: int = 0
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    n_retries: int = 0
    # Trials that changed code grading could run (TrialResult.tampered), under any policy.
    n_tampered: int = 0
    # Graded trials whose task declares a gate or veto that did not run (a judge with no
    # endpoint configured): their rewards stand, but they are not fully graded. By reason:
    # {"judge veto not run: no judge configured": 3}.
    n_not_fully_graded: int = 0
    not_fully_graded: dict[str, int] = Field(default_factory=dict)
