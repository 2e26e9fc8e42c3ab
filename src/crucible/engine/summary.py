"""The job summary (job result.json and the closing table), from trial records.

pass@k is computed by metrics/ (the same estimator and success rule as
`crucible report`), so the summary and the report cannot disagree. Counting
follows blame: graded trials count with their reward, verifier_failed as 0,
infrastructure errors not at all (and `n_excluded` says how many).
"""

from __future__ import annotations

from collections import Counter

from crucible.metrics.aggregate import lacks, pass_at_k_table, primary_key, reward_keys, score
from crucible.metrics.model import DEFAULT_THRESHOLD, MetricOptions
from crucible.metrics.records import Attempt
from crucible.metrics.stats import mean as stats_mean
from crucible.records.job import JobSummary
from crucible.records.trial import TrialResult


def _attempt(r: TrialResult) -> Attempt:
    """What pass@k reads: the summary is rebuilt every second of a job, so nothing more."""
    rewards = r.verifier_result.rewards if r.verifier_result else None
    return Attempt(r.task_name, r.graded, rewards, r.outcome)


def counted(r: TrialResult, primary: str | None) -> float | None:
    """What trial `r` counts as in a mean on the job's `primary` key (the report's rule)."""
    return score(_attempt(r), primary or "reward", MetricOptions())


def summarize(
    job_id: str,
    status: str,
    results: list[TrialResult],
    n_trials: int,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> JobSummary:
    outcomes = Counter(r.outcome for r in results)
    # A trial that broke its own grading counts as 0 (an agent cannot trade a 0
    # for a gap); infrastructure failures are left out, and counted. The mean is the
    # report's (metrics/aggregate.score): on the job's primary key, a graded trial
    # without it counting 0 (Harbor's rule), and counted in n_without_primary.
    attempts = [_attempt(r) for r in results]
    options = MetricOptions(threshold=threshold)
    primary = primary_key(reward_keys(attempts), options)
    scored = [v for a in attempts if (v := score(a, primary or "reward", options)) is not None]
    n_cancelled = outcomes.get("cancelled", 0)  # not finished: neither done nor left out
    mean = stats_mean(scored)  # rewards are in the task's range: this never overflows
    partial = [r for r in results if r.graded and r.not_fully_graded()]
    passk = pass_at_k_table(attempts, options)
    return JobSummary(
        job_id=job_id,
        status=status,
        n_trials=n_trials,
        n_done=len(results) - n_cancelled,
        n_cancelled=n_cancelled,
        outcomes=dict(outcomes),
        mean_reward=mean,
        n_excluded=len(results) - n_cancelled - len(scored),
        primary=primary,
        n_without_primary=lacks(attempts, primary),
        pass_at_k=passk,
        n_retries=sum(r.retries for r in results),
        n_tampered=sum(1 for r in results if r.tampered),
        n_not_fully_graded=len(partial),
        not_fully_graded=dict(Counter(why for r in partial for why in r.not_fully_graded())),
    )
