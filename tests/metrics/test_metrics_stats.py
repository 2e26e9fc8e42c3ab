"""Student's t, the incomplete beta, means, SEs and the clustered SE against table and hand values."""

from __future__ import annotations

import math

import pytest

from crucible.metrics.stats import (
    betainc,
    clustered_se,
    mean_se,
    quantile,
    sample_sd,
    t_cdf,
    t_critical,
    t_ppf,
)

# Two-sided 95% (p = 0.975) and other quantiles from published t tables
# (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), to the digits printed there.
T_TABLE = [
    (0.975, 1, 12.706),
    (0.975, 2, 4.303),
    (0.975, 3, 3.182),
    (0.975, 4, 2.776),
    (0.975, 5, 2.571),
    (0.975, 7, 2.365),
    (0.975, 10, 2.228),
    (0.975, 20, 2.086),
    (0.975, 30, 2.042),
    (0.975, 60, 2.000),
    (0.975, 100, 1.984),
    (0.95, 1, 6.314),
    (0.95, 5, 2.015),
    (0.95, 30, 1.697),
    (0.99, 10, 2.764),
    (0.995, 3, 5.841),
    (0.995, 20, 2.845),
    (0.90, 2, 1.886),
]


@pytest.mark.parametrize(("p", "df", "expected"), T_TABLE)
def test_t_quantile_matches_published_table(p: float, df: int, expected: float) -> None:
    assert t_ppf(p, df) == pytest.approx(expected, abs=6e-4)


def test_t_quantile_high_precision_values() -> None:
    # Values to 9 decimals (R: qt(0.975, df))
    assert t_ppf(0.975, 1) == pytest.approx(12.706204736, abs=1e-8)
    assert t_ppf(0.975, 2) == pytest.approx(4.302652730, abs=1e-8)
    assert t_ppf(0.975, 10) == pytest.approx(2.228138852, abs=1e-8)
    assert t_critical(29) == pytest.approx(2.045229642, abs=1e-8)


def test_t_quantile_symmetry_limits_and_errors() -> None:
    assert t_ppf(0.5, 3) == 0.0
    assert t_ppf(0.025, 4) == pytest.approx(-t_ppf(0.975, 4))
    # Large df tends to the normal quantile 1.959964
    assert t_ppf(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)
    assert t_ppf(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            t_ppf(bad, 3)
    with pytest.raises(ValueError):
        t_ppf(0.9, 0)


def test_t_cdf_closed_forms() -> None:
    # df = 1 is the Cauchy distribution: F(t) = 1/2 + atan(t)/pi
    for t in (-3.0, -0.5, 0.0, 1.0, 7.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
    # df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-2.0, 0.3, 2.0, 10.0):
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    # the quantile inverts the cdf
    for df in (1, 3, 12.5, 40):
        assert t_cdf(t_ppf(0.9, df), df) == pytest.approx(0.9, abs=1e-10)


def test_betainc_closed_forms() -> None:
    assert betainc(3.0, 1.0, 0.3) == pytest.approx(0.3**3, abs=1e-13)
    assert betainc(1.0, 4.0, 0.2) == pytest.approx(1 - 0.8**4, abs=1e-13)
    # I_0.4(2, 3) = sum_{j=2}^{4} C(4,j) 0.4^j 0.6^(4-j) = 0.5248
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-12)
    # symmetry I_x(a, b) = 1 - I_{1-x}(b, a), both branches of the continued fraction
    assert betainc(2.5, 0.5, 0.9) == pytest.approx(1 - betainc(0.5, 2.5, 0.1), abs=1e-12)
    assert betainc(2.0, 2.0, 0.0) == 0.0
    assert betainc(2.0, 2.0, 1.0) == 1.0


def test_mean_se_hand_computed() -> None:
    est = mean_se([1.0, 2.0, 3.0, 4.0], "tasks")
    # mean 2.5; sd = sqrt(5/3); se = sd / 2
    assert est.mean == pytest.approx(2.5)
    assert est.se == pytest.approx(math.sqrt(5 / 3) / 2)
    assert est.n == 4 and est.df == 3
    half = 3.182446305 * math.sqrt(5 / 3) / 2
    assert est.ci_low == pytest.approx(2.5 - half, abs=1e-8)
    assert est.ci_high == pytest.approx(2.5 + half, abs=1e-8)


def test_mean_se_undefined_cases_are_none_not_nan() -> None:
    one = mean_se([0.7], "runs")
    assert one.mean == 0.7 and one.se is None and one.df is None
    assert one.ci_low is None and one.ci_high is None
    empty = mean_se([], "runs")
    assert empty.mean is None and empty.se is None and empty.n == 0
    same = mean_se([1.0, 1.0, 1.0], "runs")
    assert same.se == 0.0 and same.ci_low == 1.0 and same.ci_high == 1.0
    assert sample_sd([3.0]) is None


def test_clustered_se_hand_computed() -> None:
    # mean 0.5; residual sums per cluster: a 0, b +1, c -1
    # V = G/(G-1) * sum_g e_g^2 / N^2 = 3/2 * 2 / 36
    est = clustered_se([1, 0, 1, 1, 0, 0], ["a", "a", "b", "b", "c", "c"], "clustered:category")
    assert est.mean == pytest.approx(0.5)
    assert est.se == pytest.approx(math.sqrt(3 / 2 * 2 / 36))
    assert est.n == 3 and est.df == 2
    assert est.ci_high == pytest.approx(0.5 + 4.302652730 * est.se, abs=1e-8)


def test_clustered_se_with_singleton_clusters_is_the_plain_se() -> None:
    values = [0.1, 0.9, 0.4, 0.4, 1.0]
    plain = mean_se(values, "tasks")
    est = clustered_se(values, list(range(len(values))), "clustered:x")
    assert est.se == pytest.approx(plain.se)
    assert est.ci_low == pytest.approx(plain.ci_low)


def test_clustered_se_grows_with_within_cluster_correlation() -> None:
    values = [1, 1, 1, 0, 0, 0]
    naive = mean_se(values, "tasks")
    est = clustered_se(values, ["a", "a", "a", "b", "b", "b"], "clustered:x")
    # Each cluster is all-1 or all-0: residual sums +-1.5, V = 2 * 4.5 / 36
    assert est.se == pytest.approx(math.sqrt(2 * 4.5 / 36))
    assert est.se is not None and naive.se is not None and est.se > naive.se


def test_clustered_se_needs_two_clusters() -> None:
    est = clustered_se([1.0, 0.0], ["a", "a"], "clustered:x")
    assert est.mean == 0.5 and est.se is None and est.ci_low is None
    with pytest.raises(ValueError):
        clustered_se([1.0], ["a", "b"], "clustered:x")


def test_quantile_linear_interpolation() -> None:
    assert quantile([], 0.5) is None
    assert quantile([5.0], 0.9) == 5.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([10.0, 0.0, 20.0], 0.9) == pytest.approx(18.0)


def test_means_and_sds_of_values_near_max_float_do_not_overflow() -> None:
    # fsum(1.5e308, 1.5e308) raises OverflowError; divided first, the mean is finite
    from crucible.metrics.stats import mean

    assert mean([1.5e308, 1.5e308]) == 1.5e308
    assert mean([1.5e308, -1.5e308, 1.0]) == pytest.approx(1 / 3)
    sd = sample_sd([1e300, -1e300])
    assert sd is not None and math.isfinite(sd) and sd == pytest.approx(math.sqrt(2) * 1e300)
    assert sample_sd([0.5, 0.5, 0.5]) == 0.0
    # a value that is not finite is left out, never spread into the mean
    assert mean([1.0, math.inf, math.nan, 0.0]) == 0.5
    assert mean([math.nan]) is None
    est = mean_se([1.5e308, 1.5e308, 1.5e308], "runs")
    assert est.mean == 1.5e308 and est.se == 0.0
