"""How one cell of a report reads: a mean with its standard error and what was left out,
an interval cut to the rewards' bounds, dollars, token counts, error kinds."""

from __future__ import annotations

from crucible.metrics.model import GroupMetrics, JobMetrics
from crucible.records.reward_range import DEFAULT_RANGE, declared_range


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def fmt_mean_se(g: GroupMetrics) -> str:
    rs = g.reward()
    if rs is None or rs.mean is None:
        return "-"
    # Whatever is left out of a mean is shown beside it: a gap must never pass for nothing.
    gaps = [f"{g.n_excluded} left out"] if g.n_excluded else []
    gaps += [f"{g.n_cancelled} cancelled"] if g.n_cancelled else []
    if g.n_without_primary:  # counted 0, as Harbor counts a missing key
        gaps.append(f"{g.n_without_primary} without {g.primary!r}: 0")
    left_out = f" ({', '.join(gaps)})" if gaps else ""
    if rs.se is None:
        return fmt(rs.mean) + left_out
    return f"{fmt(rs.mean)} ± {fmt(rs.se)}{left_out}"


def fmt_ci(low: float | None, high: float | None, bounds: tuple[float, float] | None = None) -> str:
    """The interval, cut to `bounds` (a reward in [0, 1] has no mean of 1.3): Student's t
    over a few runs is wide, and past the bounds it only says "anything"."""
    if low is None or high is None:
        return "-"
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return f"[{fmt(low)}, {fmt(high)}]"


def unit_bounded(job: JobMetrics) -> bool:
    """Whether this job's rewards live in [0, 1] (Harbor's convention): every task mean
    does, and no task declares another `reward_range` (a [0, 100] task is never cut to 1)."""
    means = [t.mean for t in job.tasks if t.mean is not None]
    declared = all(declared_range(t.metadata) == DEFAULT_RANGE for t in job.tasks)
    return bool(means) and declared and all(0.0 <= m <= 1.0 for m in means)


def fmt_usd(x: float | None) -> str:
    if x is None:
        return "-"
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def fmt_count(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.1f}k" if n >= 1e4 else f"{n:.0f}"


def fmt_tokens_per_rollout(g: GroupMetrics) -> str:
    t = g.cost.tokens_per_rollout
    if not t:
        return "-"
    return f"{fmt_count(t.get('input', 0))} in / {fmt_count(t.get('output', 0))} out"


def fmt_errors(g: GroupMetrics) -> str:
    if not g.n_errors:
        return "0"
    kinds = ", ".join(f"{k} {v}" for k, v in g.errors.items())
    return f"{g.n_errors} ({kinds})"
