"""The metrics object (what `crucible report --format json` prints), as pydantic models.

Every float is finite or None: undefined quantities (an SE over one run, pass@k
with fewer than k attempts) are None, never NaN.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from crucible.metrics.stats import CONFIDENCE, Estimate

ErrorsAs = Literal["blame", "excluded", "zero"]
DEFAULT_THRESHOLD = 1.0


class MetricOptions(BaseModel):
    """How trials turn into numbers; echoed in every output so a table is never ambiguous."""

    errors_as: ErrorsAs = Field(
        default="blame",
        description="'blame' (default): a trial that broke its own grading (verifier_failed) "
        "counts as reward 0 and a failed attempt, infrastructure errors are left out; "
        "'excluded': every trial without a reward is left out of means and pass@k; "
        "'zero': every one counts as reward 0 (Harbor's convention).",
    )
    threshold: float = Field(
        default=DEFAULT_THRESHOLD,
        description="An attempt succeeds (for pass@k and pass^k) when its primary reward >= threshold.",
    )
    reward_key: str | None = Field(
        default=None,
        description="Primary reward key; default 'reward' if present, else the first key seen.",
    )
    cluster_by: str | None = Field(
        default=None,
        description="Task metadata key for the clustered SE; default 'category', else 'source'.",
    )
    confidence: float = CONFIDENCE


class RewardStats(BaseModel):
    """One reward key.

    `runs`: mean of run means ± SE across runs (run i = attempt i of every
    task); `tasks`: mean of per-task means ± SE across tasks; `clustered`: the
    task means with a cluster-robust SE. The headline (`mean`, `se`, `ci_*`)
    is one of them, whole: `runs` when there are two or more runs, else
    `tasks` (`se_method` says which). With every attempt graded all means agree.
    """

    key: str
    mean: float | None = None
    trial_mean: float | None = None
    n_scored: int = 0
    n_tasks: int = 0
    runs: Estimate
    tasks: Estimate
    clustered: Estimate | None = None
    se: float | None = None  # the headline SE: across runs if >= 2 runs, else across tasks
    se_method: str | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class PassK(BaseModel):
    k: int
    pass_at_k: float | None = None  # unbiased, Chen et al. 2021
    pass_hat_k: float | None = None  # all k succeed, Yao et al. 2024
    n_tasks: int = 0  # tasks with at least k scored attempts


class CostStats(BaseModel):
    n_known: int = 0
    n_unknown: int = 0
    sources: dict[str, int] = Field(default_factory=dict)  # recorded / priced
    total_usd: float | None = None
    per_rollout_usd: float | None = None
    tokens_total: dict[str, int] = Field(default_factory=dict)
    tokens_per_rollout: dict[str, float] = Field(default_factory=dict)
    # Host-side verifier stages that call a model (the judge): kept apart from the agent's.
    verifier_n_judged: int = 0  # trials with a model-calling stage
    verifier_tokens_total: int = 0
    verifier_total_usd: float | None = None  # None: no judged trial had a known price
    verifier_per_rollout_usd: float | None = None  # over judged trials with a known price


class DurationStats(BaseModel):
    n: int = 0
    mean_sec: float | None = None
    median_sec: float | None = None
    p90_sec: float | None = None
    max_sec: float | None = None
    total_sec: float | None = None
    agent_mean_sec: float | None = None


class GroupMetrics(BaseModel):
    """Metrics over one set of trials (a job, or one group of a breakdown)."""

    errors_as: ErrorsAs
    threshold: float
    primary: str | None = None
    n_trials: int = 0
    n_graded: int = 0
    n_scored: int = 0  # trials that enter the means (graded, plus errors counted as 0)
    n_excluded: int = 0  # errors left out of the means (shown beside them)
    n_without_primary: int = 0  # graded without the primary key: counted 0 (shown beside)
    n_cancelled: int = 0  # stopped by a cancel: not finished, neither an error nor a 0
    n_tampered: int = 0  # trials that changed code grading runs (TrialResult.tampered)
    # graded trials a declared gate or veto did not grade (no judge configured), by reason
    n_not_fully_graded: int = 0
    not_fully_graded: dict[str, int] = Field(default_factory=dict)
    n_tasks: int = 0
    n_runs: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)  # by ErrorKind
    n_errors: int = 0
    error_rate: float | None = None
    agent_errors: dict[str, int] = Field(default_factory=dict)  # graded, agent failed
    rewards: dict[str, RewardStats] = Field(default_factory=dict)
    success_rate: float | None = None  # trial-level share of scored trials >= threshold
    pass_k: list[PassK] = Field(default_factory=list)
    cost: CostStats = Field(default_factory=CostStats)
    duration: DurationStats = Field(default_factory=DurationStats)

    def reward(self) -> RewardStats | None:
        return self.rewards.get(self.primary) if self.primary else None

    def pass_at(self, k: int) -> float | None:
        for p in self.pass_k:
            if p.k == k:
                return p.pass_at_k
        return None


class StageNote(BaseModel):
    """One verifier stage of a trial: its status (passed, failed, vetoed, ...) and why."""

    name: str
    status: str
    reason: str = ""


class TrialRef(BaseModel):
    trial_name: str
    folder: str | None = None
    attempt: int
    outcome: str
    reward: float | None = None
    rewards: dict[str, float] | None = None
    duration_sec: float | None = None
    cost_usd: float | None = None
    agent_error: str | None = None
    error: str | None = None
    tampered_paths: list[str] | None = None
    step_rewards: dict[str, float | None] | None = None  # a multi-step trial's, by step
    stages: list[StageNote] = Field(default_factory=list)  # each verifier stage, in order


class TaskMetrics(BaseModel):
    task: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    n_trials: int = 0
    n_scored: int = 0
    n_errors: int = 0
    successes: int = 0
    mean: float | None = None  # primary reward, per errors_as
    rewards: dict[str, float | None] = Field(default_factory=dict)
    pass_at_k: dict[str, float | None] = Field(default_factory=dict)
    trials: list[TrialRef] = Field(default_factory=list)


class Breakdown(BaseModel):
    key: str
    groups: dict[str, GroupMetrics] = Field(default_factory=dict)


class JobMetrics(BaseModel):
    job_id: str
    name: str | None = None
    agent: str | None = None
    model: str | None = None
    status: str | None = None
    path: str | None = None
    n_planned: int | None = None
    # Trial records left out as bad ("<path>: <why>"): the metrics are over the rest.
    skipped: list[str] = Field(default_factory=list)
    # A self-hosted model's costs: the server price and throughput they come from.
    cost_basis: str | None = None
    arm: str | None = None  # the sweep arm this job ran
    overall: GroupMetrics
    breakdown: Breakdown | None = None
    tasks: list[TaskMetrics] = Field(default_factory=list)

    @property
    def short_name(self) -> str:
        """What tables call the job: its sweep arm, else its name, else its id."""
        return self.arm or self.name or self.job_id

    @property
    def label(self) -> str:
        if self.arm:
            return f"{self.arm} ({self.name or self.job_id})"
        who = self.agent or "?"
        if self.model:
            who = f"{who} / {self.model}"
        return f"{self.name or self.job_id} ({who})"


class PairedDifference(BaseModel):
    """Job a minus job b over the tasks both have, paired by task:
    mean of d_i = mean_a(task i) - mean_b(task i), SE = sd(d) / sqrt(n)."""

    a: str
    b: str
    key: str
    n_common: int = 0
    n_only_a: int = 0
    n_only_b: int = 0
    mean_a: float | None = None
    mean_b: float | None = None
    difference: Estimate


class Report(BaseModel):
    generated_at: str
    options: MetricOptions
    by: str | None = None
    jobs: list[JobMetrics] = Field(default_factory=list)
    comparisons: list[PairedDifference] = Field(default_factory=list)
