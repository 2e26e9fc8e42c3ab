"""From trial records to metrics: means, SEs, pass@k, errors, cost, breakdowns, pairs."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from crucible.metrics.model import (
    Breakdown,
    GroupMetrics,
    JobMetrics,
    MetricOptions,
    PairedDifference,
    PassK,
    RewardStats,
    StageNote,
    TaskMetrics,
    TrialRef,
)
from crucible.metrics.passk import pass_at_k, pass_hat_k
from crucible.metrics.records import Scored, TrialRecord
from crucible.metrics.spend import cost_stats, duration_stats
from crucible.metrics.stats import (
    Estimate,
    clustered_se,
    mean,
    mean_se,
)
from crucible.records.trial import counted_as

MISSING_GROUP = "(none)"
CLUSTER_KEYS = ("category", "source")


def reward_keys(records: Iterable[Scored]) -> list[str]:
    """Every reward key seen, in first-seen order."""
    seen: dict[str, None] = {}
    for r in records:
        if r.graded and r.rewards:
            for k in r.rewards:
                seen.setdefault(k, None)
    return list(seen)


def primary_key(keys: Sequence[str], options: MetricOptions) -> str | None:
    if options.reward_key:
        return options.reward_key
    if "reward" in keys:
        return "reward"
    return keys[0] if keys else None


def _mean_of(values: list[float]) -> float:
    m = mean(values)  # values are finite (score drops the rest): never None here
    return 0.0 if m is None else m


def score(r: Scored, key: str, options: MetricOptions) -> float | None:
    """The value a trial contributes for `key`, or None when it is left out.

    A graded trial without `key` counts 0 for it (`lacks` counts those, shown beside the
    mean), never dropped: Harbor 0.25 aggregates each reward key over every trial, a missing
    reward or key counting 0 (its docs, "Metrics"; src/harbor/metrics/mean.py counts a
    missing reward 0), as a multi-step trial's 'mean' does (engine/steps.combine)."""
    if r.graded:
        v = r.rewards.get(key) if r.rewards else None
        if v is None:
            return 0.0
        # A stored reward that is not finite is a bad record (the loaders skip it, with
        # a warning); one that still reaches here is left out, never summed into inf.
        return v if math.isfinite(v) else None
    if r.outcome == "cancelled":  # never finished (a resume runs it): not a 0, not a gap
        return None
    if options.errors_as == "zero":
        return 0.0
    if options.errors_as == "blame":  # the attempt's own failures are a 0, infra is a gap
        return counted_as(r.outcome)
    return None


def lacks(records: Iterable[Scored], key: str | None) -> int:
    """Graded trials without reward `key` (each counted 0 for it by `score`)."""
    if key is None:
        return 0
    return sum(1 for r in records if r.graded and key not in (r.rewards or {}))


def group_value(metadata: Any, key: str) -> str:
    value = metadata.get(key) if hasattr(metadata, "get") else None
    if value is None or value == "":
        return MISSING_GROUP
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or MISSING_GROUP
    return str(value)


def cluster_key(records: Sequence[TrialRecord], options: MetricOptions) -> str | None:
    if options.cluster_by:
        return options.cluster_by
    for key in CLUSTER_KEYS:
        if any(group_value(r.metadata, key) != MISSING_GROUP for r in records):
            return key
    return None


def _reward_stats(
    records: Sequence[TrialRecord], key: str, options: MetricOptions, ckey: str | None
) -> RewardStats:
    by_task: dict[str, list[float]] = defaultdict(list)
    by_run: dict[int, list[float]] = defaultdict(list)
    task_cluster: dict[str, str] = {}
    values: list[float] = []
    for r in records:
        v = score(r, key, options)
        if v is None:
            continue
        values.append(v)
        by_task[r.task].append(v)
        by_run[r.attempt].append(v)
        if ckey is not None:
            task_cluster.setdefault(r.task, group_value(r.metadata, ckey))
    tasks = sorted(by_task)
    task_means = [_mean_of(by_task[t]) for t in tasks]
    run_means = [_mean_of(v) for _, v in sorted(by_run.items())]
    conf = options.confidence
    runs_est = mean_se(run_means, "runs", conf)
    tasks_est = mean_se(task_means, "tasks", conf)
    clustered: Estimate | None = None
    if ckey is not None and tasks:
        clustered = clustered_se(
            task_means, [task_cluster[t] for t in tasks], f"clustered:{ckey}", conf
        )
    headline = runs_est if runs_est.se is not None else tasks_est
    return RewardStats(
        key=key,
        mean=headline.mean,
        trial_mean=mean(values),
        n_scored=len(values),
        n_tasks=len(tasks),
        runs=runs_est,
        tasks=tasks_est,
        clustered=clustered,
        se=headline.se,
        se_method=headline.method if headline.se is not None else None,
        ci_low=headline.ci_low,
        ci_high=headline.ci_high,
    )


def _success_counts(
    records: Sequence[Scored], primary: str | None, options: MetricOptions
) -> dict[str, tuple[int, int]]:
    """Per task: (n scored attempts, c successes) on the primary reward."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    if primary is None:
        return {}
    for r in records:
        v = score(r, primary, options)
        if v is None:
            continue
        nc = out[r.task]
        nc[0] += 1
        nc[1] += int(v >= options.threshold)
    return {t: (nc[0], nc[1]) for t, nc in out.items()}


def _mean_pass_at_k(counts: dict[str, tuple[int, int]], k: int) -> tuple[float | None, int]:
    """pass@k averaged over the tasks with at least k scored attempts, and how many those are."""
    at = [v for n, c in counts.values() if (v := pass_at_k(n, c, k)) is not None]
    return mean(at), len(at)


def _pass_k(counts: dict[str, tuple[int, int]]) -> list[PassK]:
    if not counts:
        return []
    max_n = max(n for n, _ in counts.values())
    out = []
    for k in range(1, max_n + 1):
        at, n_tasks = _mean_pass_at_k(counts, k)
        hat = [v for n, c in counts.values() if (v := pass_hat_k(n, c, k)) is not None]
        out.append(PassK(k=k, pass_at_k=at, pass_hat_k=mean(hat), n_tasks=n_tasks))
    return out


def pass_at_k_table(records: Sequence[Scored], options: MetricOptions) -> dict[str, float]:
    """{"pass@k": mean over tasks} for k up to the fewest scored attempts of any task,
    so that every task counts in every k (the job summary's table)."""
    counts = _success_counts(records, primary_key(reward_keys(records), options), options)
    max_k = min((n for n, _ in counts.values()), default=0)
    table = {f"pass@{k}": _mean_pass_at_k(counts, k)[0] for k in range(1, max_k + 1)}
    return {key: v for key, v in table.items() if v is not None}


def group_metrics(records: Sequence[TrialRecord], options: MetricOptions) -> GroupMetrics:
    """All metrics over one set of trial records."""
    keys = reward_keys(records)
    primary = primary_key(keys, options)
    if primary is not None and primary not in keys:
        keys = [primary, *keys]
    elif primary is not None:
        keys = [primary, *(k for k in keys if k != primary)]
    ckey = cluster_key(records, options)
    outcomes = Counter(r.outcome for r in records)
    errors = {k: v for k, v in outcomes.items() if k not in ("graded", "cancelled")}
    n_errors = sum(errors.values())
    counts = _success_counts(records, primary, options)
    n_scored_primary = sum(n for n, _ in counts.values())
    successes = sum(c for _, c in counts.values())
    scored_runs = {r.attempt for r in records if primary and score(r, primary, options) is not None}
    return GroupMetrics(
        errors_as=options.errors_as,
        threshold=options.threshold,
        primary=primary,
        n_trials=len(records),
        n_graded=outcomes.get("graded", 0),
        n_scored=n_scored_primary,
        n_excluded=sum(1 for r in records if _excluded(r, primary, options)),
        n_without_primary=lacks(records, primary),
        n_cancelled=outcomes.get("cancelled", 0),
        n_tampered=sum(1 for r in records if r.tampered_paths),
        n_not_fully_graded=sum(1 for r in records if r.not_fully_graded),
        not_fully_graded=dict(
            sorted(Counter(w for r in records for w in r.not_fully_graded).items())
        ),
        n_tasks=len({r.task for r in records}),
        n_runs=len(scored_runs),
        outcomes=dict(sorted(outcomes.items())),
        errors=dict(sorted(errors.items())),
        n_errors=n_errors,
        error_rate=n_errors / len(records) if records else None,
        agent_errors=dict(
            sorted(Counter(r.agent_error for r in records if r.graded and r.agent_error).items())
        ),
        rewards={k: _reward_stats(records, k, options, ckey) for k in keys},
        success_rate=successes / n_scored_primary if n_scored_primary else None,
        pass_k=_pass_k(counts),
        cost=cost_stats(records),
        duration=duration_stats(records),
    )


def breakdown(records: Sequence[TrialRecord], key: str, options: MetricOptions) -> Breakdown:
    """Metrics per value of a task metadata key (split, category, ...)."""
    groups: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[group_value(r.metadata, key)].append(r)
    return Breakdown(
        key=key, groups={g: group_metrics(rs, options) for g, rs in sorted(groups.items())}
    )


def task_metrics(records: Sequence[TrialRecord], options: MetricOptions) -> list[TaskMetrics]:
    keys = reward_keys(records)
    primary = primary_key(keys, options)
    by_task: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in records:
        by_task[r.task].append(r)
    out = []
    for task in sorted(by_task):
        rs = sorted(by_task[task], key=lambda r: r.attempt)
        per_key: dict[str, float | None] = {}
        for k in keys:
            per_key[k] = mean([v for r in rs if (v := score(r, k, options)) is not None])
        n, c = _success_counts(rs, primary, options).get(task, (0, 0))
        out.append(
            TaskMetrics(
                task=task,
                metadata=dict(rs[0].metadata),
                n_trials=len(rs),
                n_scored=n,
                n_errors=sum(1 for r in rs if not r.graded),
                successes=c,
                mean=per_key.get(primary) if primary else None,
                rewards=per_key,
                pass_at_k={str(k): pass_at_k(n, c, k) for k in range(1, n + 1)},
                trials=[
                    TrialRef(
                        trial_name=r.trial_name,
                        folder=r.folder,
                        attempt=r.attempt,
                        outcome=r.outcome,
                        reward=r.rewards.get(primary) if r.rewards and primary else None,
                        rewards=dict(r.rewards) if r.rewards else None,
                        duration_sec=r.duration_sec,
                        cost_usd=r.cost_usd,
                        agent_error=r.agent_error,
                        error=r.error_message,
                        tampered_paths=list(r.tampered_paths)
                        if r.tampered_paths is not None
                        else None,
                        step_rewards=dict(r.step_rewards) if r.step_rewards is not None else None,
                        stages=[StageNote(name=n, status=s, reason=x) for n, s, x in r.stages],
                    )
                    for r in rs
                ],
            )
        )
    return out


def job_metrics(
    job_id: str,
    records: Sequence[TrialRecord],
    options: MetricOptions,
    *,
    by: str | None = None,
    **info: Any,
) -> JobMetrics:
    """`info`: name, agent, model, status, path, n_planned (descriptive, from job.json)."""
    return JobMetrics(
        job_id=job_id,
        overall=group_metrics(records, options),
        breakdown=breakdown(records, by, options) if by else None,
        tasks=task_metrics(records, options),
        **info,
    )


def task_means(
    records: Sequence[TrialRecord], key: str, options: MetricOptions
) -> dict[str, float]:
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in records:
        v = score(r, key, options)
        if v is not None:
            by_task[r.task].append(v)
    return {t: _mean_of(v) for t, v in by_task.items()}


def paired_difference(
    a_id: str,
    a: Sequence[TrialRecord],
    b_id: str,
    b: Sequence[TrialRecord],
    key: str,
    options: MetricOptions,
) -> PairedDifference:
    """a minus b, paired by task: d_i = mean_a(i) - mean_b(i) over common tasks,
    SE = sd(d) / sqrt(n), t interval on n - 1 df."""
    ma, mb = task_means(a, key, options), task_means(b, key, options)
    common = sorted(set(ma) & set(mb))
    diffs = [ma[t] - mb[t] for t in common]
    return PairedDifference(
        a=a_id,
        b=b_id,
        key=key,
        n_common=len(common),
        n_only_a=len(set(ma) - set(mb)),
        n_only_b=len(set(mb) - set(ma)),
        mean_a=mean([ma[t] for t in common]),
        mean_b=mean([mb[t] for t in common]),
        difference=mean_se(diffs, "paired", options.confidence),
    )


def _excluded(r: TrialRecord, primary: str | None, options: MetricOptions) -> bool:
    """An error left out of the mean (a cancelled trial is neither scored nor excluded)."""
    return not r.graded and r.outcome != "cancelled" and score(r, primary or "", options) is None
