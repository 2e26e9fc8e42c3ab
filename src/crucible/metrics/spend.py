"""Cost and duration statistics over a set of trial records (metrics/aggregate.py)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from crucible.metrics.model import CostStats, DurationStats
from crucible.metrics.records import TrialRecord
from crucible.metrics.stats import mean, quantile


def cost_stats(records: Sequence[TrialRecord]) -> CostStats:
    known = [r.cost_usd for r in records if r.cost_usd is not None]
    sources = Counter(str(r.cost_source) for r in records if r.cost_source is not None)
    with_tokens = [r.tokens for r in records if r.tokens is not None]
    totals = {
        name: sum(getattr(t, name) for t in with_tokens)
        for name in ("input", "cache_read", "cache_write", "output")
    }
    all_usd = total(known)
    judged = [r for r in records if r.verifier_tokens is not None]
    judged_usd = [r.verifier_cost_usd for r in judged if r.verifier_cost_usd is not None]
    return CostStats(
        verifier_n_judged=len(judged),
        verifier_tokens_total=sum(r.verifier_tokens or 0 for r in judged),
        verifier_total_usd=total(judged_usd),
        verifier_per_rollout_usd=mean(judged_usd),
        n_known=len(known),
        n_unknown=len(records) - len(known),
        sources=dict(sources),
        total_usd=all_usd,
        per_rollout_usd=mean(known),
        tokens_total=totals if with_tokens else {},
        tokens_per_rollout={k: v / len(with_tokens) for k, v in totals.items()}
        if with_tokens
        else {},
    )


def total(values: list[float]) -> float | None:
    """The sum of the finite values (a cost an agent reported is its own); None when none."""
    kept = [v for v in values if math.isfinite(v)]
    if not kept:
        return None
    try:
        return math.fsum(kept)
    except OverflowError:  # costs near max float: no total worth showing
        return None


def duration_stats(records: Sequence[TrialRecord]) -> DurationStats:
    d = [r.duration_sec for r in records if r.duration_sec is not None]
    agent = [r.agent_sec for r in records if r.agent_sec is not None]
    return DurationStats(
        n=len(d),
        mean_sec=mean(d),
        median_sec=quantile(d, 0.5),
        p90_sec=quantile(d, 0.9),
        max_sec=max(d) if d else None,
        total_sec=total(d),
        agent_mean_sec=mean(agent),
    )
