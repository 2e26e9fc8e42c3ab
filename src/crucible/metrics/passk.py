"""pass@k (Chen et al. 2021) and pass^k (Yao et al. 2024) for one task's attempts."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased estimate of P(at least one of k attempts succeeds), from n attempts with c successes.

    Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1):
    pass@k = 1 - C(n-c, k) / C(n, k). The ratio is evaluated as the product
    prod_{i=n-c+1}^{n} (1 - k/i), which never forms the large binomials.
    None when the task has fewer than k attempts (the estimator is undefined).
    """
    _check(n, c, k)
    if n < k:
        return None
    if n - c < k:
        return 1.0  # every k-subset holds a success
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """Unbiased estimate of P(all of k attempts succeed): pass^k = C(c, k) / C(n, k).

    Yao et al. 2024 ("tau-bench"), computed as prod_{i=0}^{k-1} (c-i)/(n-i).
    None when the task has fewer than k attempts.
    """
    _check(n, c, k)
    if n < k:
        return None
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))


def _check(n: int, c: int, k: int) -> None:
    if k < 1:
        raise ValueError("k must be >= 1")
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n (n={n}, c={c})")
