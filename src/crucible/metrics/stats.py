"""Small-sample statistics without scipy: Student's t, means, standard errors, CIs.

Everything returns None where a quantity is undefined (one observation, no
observations), never NaN, so the output is always valid JSON.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from statistics import NormalDist

from pydantic import BaseModel

CONFIDENCE = 0.95


class Estimate(BaseModel):
    """A mean with its standard error and a Student-t confidence interval."""

    method: str  # "runs" | "tasks" | "clustered:<key>" | "paired"
    mean: float | None = None
    se: float | None = None
    n: int = 0  # units the SE is computed over (runs, tasks, clusters, pairs)
    df: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = CONFIDENCE


# --- the regularized incomplete beta function and Student's t ---------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for I_x(a, b), evaluated with the modified Lentz method."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = tiny if abs(d) < tiny else d
    d = 1.0 / d
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0):
        raise ValueError("betainc needs a > 0 and b > 0")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # The continued fraction converges fast only below the mean of the beta
    # distribution; above it, use the symmetry I_x(a, b) = 1 - I_{1-x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional)."""
    if df <= 0:
        raise ValueError("df must be positive")
    if math.isinf(df):
        return NormalDist().cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The p-quantile of Student's t, by bisection on `t_cdf` (|error| < 1e-10 relative)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if df <= 0:
        raise ValueError("df must be positive")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:  # p is within float noise of 1
            return hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def t_critical(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided critical value: t_{(1+confidence)/2, df}."""
    return t_ppf(0.5 + confidence / 2.0, df)


# --- means and standard errors -------------------------------------------------------


def finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def mean(values: Sequence[float]) -> float | None:
    """The mean of the finite values, None only when there are none. Each value is
    divided first, so the sum cannot overflow (fsum of 1.5e308 twice raises). Rewards
    are checked where they are read and stored records on load; a value that is still
    not finite (a cost an agent reported as NaN) is left out, never spread into the mean."""
    kept = [v for v in values if math.isfinite(v)]
    if not kept:
        return None
    return _finite_mean(kept)


def _finite_mean(kept: Sequence[float]) -> float:
    """fsum(values) / n, correctly rounded (10 of 12 ones is exactly 10/12); where that sum
    overflows (values near max float), the sum of each value divided first."""
    n = len(kept)
    try:
        total = math.fsum(kept)
    except OverflowError:  # "intermediate overflow in fsum"
        total = math.inf
    if math.isfinite(total):
        return total / n
    return math.fsum(v / n for v in kept)


def sample_sd(values: Sequence[float]) -> float | None:
    """Standard deviation with Bessel's correction (n - 1) of the finite values; None
    below two. Deviations are scaled by the largest before squaring, so none overflows."""
    kept = [v for v in values if math.isfinite(v)]
    n = len(kept)
    if n < 2:
        return None
    m = _finite_mean(kept)
    devs = [v - m for v in kept]
    scale = max(abs(d) for d in devs)
    if scale == 0.0:
        return 0.0
    if not math.isfinite(scale):  # deviations of values near ±max float
        return None
    return scale * math.sqrt(math.fsum((d / scale) ** 2 for d in devs) / (n - 1))


def with_interval(est: Estimate) -> Estimate:
    """Fill ci_low/ci_high as mean ± t_{(1+c)/2, df} · se where all three are defined."""
    if est.mean is None or est.se is None or est.df is None or est.df <= 0:
        return est
    half = t_critical(est.df, est.confidence) * est.se
    return est.model_copy(update={"ci_low": est.mean - half, "ci_high": est.mean + half})


def mean_se(values: Sequence[float], method: str, confidence: float = CONFIDENCE) -> Estimate:
    """Mean of independent units with SE = sd / sqrt(n) and a t interval on n - 1 df."""
    n = len(values)
    sd = sample_sd(values)
    est = Estimate(
        method=method,
        mean=mean(values),
        se=sd / math.sqrt(n) if sd is not None else None,
        n=n,
        df=float(n - 1) if n >= 2 else None,
        confidence=confidence,
    )
    return with_interval(est)


def clustered_se(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    method: str,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """Cluster-robust SE of a mean, with the CR1 small-sample correction.

    For the mean ȳ of N units y_i falling in G clusters (a regression on an
    intercept only, K = 1), the cluster-robust variance (Liang & Zeger 1986),
    with the CR1 small-sample factor c = G/(G-1) · (N-1)/(N-K) that Stata
    uses (Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust
    Inference", J. Human Resources 50(2):317-372), is

        V = G/(G-1) · (N-1)/(N-K) · (1/N²) · Σ_g ( Σ_{i∈g} (y_i - ȳ) )²

    with (N-1)/(N-K) = 1 for K = 1. The interval uses t with G - 1 degrees of
    freedom, as Cameron & Miller recommend for few clusters. With every unit its own cluster it
    reduces to sd/sqrt(N). Undefined (None) with fewer than two clusters.
    """
    if len(values) != len(clusters):
        raise ValueError("values and clusters differ in length")
    n = len(values)
    m = mean(values)
    groups: dict[Hashable, float] = {}
    if m is not None:
        for v, g in zip(values, clusters, strict=True):
            groups[g] = groups.get(g, 0.0) + (v - m)
    n_clusters = len(groups)
    se: float | None = None
    if m is not None and n_clusters >= 2:
        var = n_clusters / (n_clusters - 1) * math.fsum(s * s for s in groups.values()) / (n * n)
        se = math.sqrt(var)
    est = Estimate(
        method=method,
        mean=m,
        se=se,
        n=n_clusters,
        df=float(n_clusters - 1) if n_clusters >= 2 else None,
        confidence=confidence,
    )
    return with_interval(est)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's default, type 7); None when empty."""
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
