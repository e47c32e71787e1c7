"""The stationary problem of paper 001 that the OSMD and bandit-baseline tests share.

20 clients of sizes 1..20, K = 4, and the same ``a_m`` every round, spread over three orders of
magnitude; the variance loss ``l(p) = (1/K) sum_m a_m / p_m`` is minimised over
``A = {sum p = 1, p >= alpha / M}`` by ``p*_m = max(alpha/M, c sqrt(a_m))``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation
from fedsample.samplers import project_truncated_simplex

ALPHA = 0.4
REPLACE = [pytest.param(True, id="with-replacement"), pytest.param(False, id="without-replacement")]
NUM_CLIENTS, NUM_SAMPLED, ROUNDS = 20, 4, 400
STATIONARY = Federation.from_sizes(np.arange(1, NUM_CLIENTS + 1))
A = np.geomspace(1e-3, 1.0, NUM_CLIENTS)[np.random.default_rng(1).permutation(NUM_CLIENTS)]


def optimum(a: np.ndarray, alpha: float) -> np.ndarray:
    """``p* = argmin_{p in A} sum_m a_m / p_m``: ``max(floor, c sqrt(a_m))`` normalised (KKT of the
    variance loss), i.e. the projection of ``sqrt(a)``."""
    return project_truncated_simplex(np.sqrt(a), alpha / a.size)


def variance_loss(a: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """``l(p) = (1/K) sum_m a_m / p_m`` for each row of ``p``."""
    return (a / p).sum(axis=-1) / k


def total_variation(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(p - q).sum(axis=-1)


def check_floor(history: np.ndarray, alpha: float) -> None:
    """Every round's distribution sums to one and gives every client at least alpha / M."""
    n = history.shape[1]
    np.testing.assert_allclose(history.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert float(history.min()) >= alpha / n * (1 - 1e-12)
