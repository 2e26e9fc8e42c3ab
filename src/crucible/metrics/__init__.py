"""Metrics over trial records: pass@k, standard errors, aggregation, cost (pure functions)."""

from crucible.metrics.aggregate import (
    breakdown,
    group_metrics,
    job_metrics,
    paired_difference,
    task_metrics,
)
from crucible.metrics.model import (
    GroupMetrics,
    JobMetrics,
    MetricOptions,
    PairedDifference,
    Report,
)
from crucible.metrics.passk import pass_at_k, pass_hat_k
from crucible.metrics.records import TrialRecord, record_from_result
from crucible.metrics.stats import Estimate, clustered_se, mean_se, t_ppf

__all__ = [
    "Estimate",
    "GroupMetrics",
    "JobMetrics",
    "MetricOptions",
    "PairedDifference",
    "Report",
    "TrialRecord",
    "breakdown",
    "clustered_se",
    "group_metrics",
    "job_metrics",
    "mean_se",
    "paired_difference",
    "pass_at_k",
    "pass_hat_k",
    "record_from_result",
    "t_ppf",
    "task_metrics",
]
