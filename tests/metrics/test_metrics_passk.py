"""pass@k and pass^k against the definitions, hand values and brute force."""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

import pytest

from crucible.metrics.passk import pass_at_k, pass_hat_k


def brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """Over every k-subset of n attempts (c successes): P(any succeeds), P(all succeed)."""
    attempts = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(attempts, k))
    return (
        sum(any(s) for s in subsets) / len(subsets),
        sum(all(s) for s in subsets) / len(subsets),
    )


def test_hand_values() -> None:
    # n = 5, c = 2: pass@2 = 1 - C(3,2)/C(5,2) = 0.7; pass@3 = 1 - 1/10
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(5, 2, 4) == 1.0
    # pass^2 = C(2,2)/C(5,2) = 0.1
    assert pass_hat_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_hat_k(5, 2, 3) == 0.0


@pytest.mark.parametrize("n", range(1, 8))
def test_agrees_with_brute_force(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            at, hat = brute_force(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12)
            assert pass_hat_k(n, c, k) == pytest.approx(hat, abs=1e-12)


def test_stable_for_large_n() -> None:
    n, c, k = 200, 10, 100
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    exact_hat = Fraction(comb(150, 50), comb(n, 50))
    assert pass_hat_k(n, 150, 50) == pytest.approx(float(exact_hat), rel=1e-10)
    # no overflow, no NaN where C(n, k) is astronomically large
    assert 0.0 <= (pass_at_k(5000, 3, 2500) or -1) <= 1.0


def test_edges() -> None:
    assert pass_at_k(3, 1, 4) is None  # fewer attempts than k
    assert pass_hat_k(3, 3, 4) is None
    assert pass_at_k(4, 4, 2) == 1.0 and pass_hat_k(4, 4, 4) == 1.0  # all pass
    assert pass_at_k(4, 0, 4) == 0.0 and pass_hat_k(4, 0, 1) == 0.0  # all fail
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 0)
