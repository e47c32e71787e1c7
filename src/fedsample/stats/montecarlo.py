"""Monte-Carlo estimates of the weight statistics, for any sampler at a fixed state.

The estimator repeatedly calls ``sampler.sample(state, rng)`` (the state is not updated, so it
estimates the distribution of one round drawn at that state) and returns every statistic of
:class:`~fedsample.stats.exact.ExactStatistics` with a standard error. It needs nothing but the
contract, so it covers samplers without a closed form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Interval, check_param
from fedsample.samplers._base import Sampler

__all__ = ["Estimate", "MonteCarloStatistics", "monte_carlo_statistics"]


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo estimate and its standard error (same shape)."""

    value: Any
    stderr: Any

    def deviation(self, exact: Any, *, atol: float = 1e-12) -> Any:
        """``|value - exact| / max(stderr, atol)``: the error in standard errors.

        ``atol`` keeps floating-point noise (say ``1e-32`` against an exact zero whose estimate
        has a standard error of ``1e-34``) from counting as a deviation.
        """
        diff = np.abs(np.asarray(self.value, dtype=float) - np.asarray(exact, dtype=float))
        return diff / np.maximum(np.asarray(self.stderr, dtype=float), atol)


@dataclass(frozen=True, eq=False)
class MonteCarloStatistics:
    """Monte-Carlo counterparts of the exact statistics, each with its standard error."""

    num_rounds: int
    mean_weights: Estimate
    var_weights: Estimate
    p_included: Estimate
    offdiag_cov_sum: Estimate
    var_sum_weights: Estimate
    expected_distinct: Estimate
    var_distinct: Estimate
    p_all_distinct: Estimate
    covariance: Estimate | None


def _variance_estimate(x: FloatArray) -> Estimate:
    """Sample variance of ``x`` and its standard error ``sqrt((mu_4 - s^4) / R)``."""
    d = x - x.mean()
    s2 = float(np.mean(d * d)) * x.size / max(x.size - 1, 1)
    mu4 = float(np.mean(d**4))
    return Estimate(s2, float(np.sqrt(max(mu4 - s2 * s2, 0.0) / x.size)))


def _mean_estimate(x: FloatArray) -> Estimate:
    return Estimate(float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0)


def monte_carlo_statistics(
    sampler: Sampler[Any],
    state: Any,
    rng: np.random.Generator,
    *,
    num_rounds: int = 10_000,
    covariance: bool = False,
) -> MonteCarloStatistics:
    """Estimate the weight statistics of ``sampler`` at ``state`` from ``num_rounds`` draws.

    ``covariance=True`` also estimates the full ``n x n`` covariance matrix (small ``n`` only).

    >>> import numpy as np
    >>> from fedsample import Federation, MDSampler
    >>> sampler = MDSampler()
    >>> state = sampler.init(Federation.from_sizes([1, 1, 2]), num_sampled=2)
    >>> mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=20_000)
    >>> bool(abs(mc.mean_weights.value[2] - 0.5) < 4 * mc.mean_weights.stderr[2])
    True
    """
    check_param("num_rounds", "monte_carlo_statistics", num_rounds, Interval(int, 2, None, closed="left"))
    n = int(np.asarray(sampler.importances(state)).size)
    rounds, clients, weights = [], [], []
    for t in range(num_rounds):
        selection = sampler.sample(state, rng)
        rounds.append(np.full(selection.clients.size, t, dtype=np.int64))
        clients.append(selection.clients)
        weights.append(selection.weights)
    round_of = np.concatenate(rounds)
    client_of = np.concatenate(clients)
    weight_of = np.concatenate(weights)
    draws = np.bincount(round_of, minlength=num_rounds)
    boundaries = np.concatenate([[0], np.cumsum(draws)])

    chunk = max(1, (1 << 22) // max(n, 1))

    def dense_chunks() -> Any:
        for start in range(0, num_rounds, chunk):
            stop = min(start + chunk, num_rounds)
            lo, hi = boundaries[start], boundaries[stop]
            flat = (round_of[lo:hi] - start) * n + client_of[lo:hi]
            size = (stop - start) * n
            w = np.bincount(flat, weights=weight_of[lo:hi], minlength=size).reshape(stop - start, n)
            c = np.bincount(flat, minlength=size).reshape(stop - start, n)
            yield w, c

    # Pass 1: means, inclusion, per-round totals and distinct counts.
    sum_w = np.zeros(n)
    included = np.zeros(n)
    totals, distinct = [], []
    for w, c in dense_chunks():
        sum_w += w.sum(axis=0)
        inc = c > 0
        included += inc.sum(axis=0)
        totals.append(w.sum(axis=1))
        distinct.append(inc.sum(axis=1))
    mean = sum_w / num_rounds
    total = np.concatenate(totals)
    num_distinct = np.concatenate(distinct).astype(np.float64)

    # Pass 2: centred moments, the off-diagonal covariance sum and, optionally, the full matrix.
    d2 = np.zeros(n)
    d4 = np.zeros(n)
    offdiag = []
    cov_sum = np.zeros((n, n)) if covariance else None
    cov_sq = np.zeros((n, n)) if covariance else None
    for w, _ in dense_chunks():
        d = w - mean
        dd = d * d
        d2 += dd.sum(axis=0)
        d4 += (dd * dd).sum(axis=0)
        offdiag.append(d.sum(axis=1) ** 2 - dd.sum(axis=1))
        if cov_sum is not None and cov_sq is not None:
            cov_sum += d.T @ d
            cov_sq += dd.T @ dd
    var = d2 / (num_rounds - 1)
    var_se = np.sqrt(np.maximum(d4 / num_rounds - (d2 / num_rounds) ** 2, 0.0) / num_rounds)
    p_inc = included / num_rounds
    cov_est = None
    if cov_sum is not None and cov_sq is not None:
        cov = cov_sum / num_rounds
        cov_est = Estimate(cov, np.sqrt(np.maximum(cov_sq / num_rounds - cov * cov, 0.0) / num_rounds))
    all_distinct = (num_distinct == draws).astype(np.float64)
    return MonteCarloStatistics(
        num_rounds=num_rounds,
        mean_weights=Estimate(mean, np.sqrt(var / num_rounds)),
        var_weights=Estimate(var, var_se),
        p_included=Estimate(p_inc, np.sqrt(p_inc * (1 - p_inc) / num_rounds)),
        offdiag_cov_sum=_mean_estimate(np.concatenate(offdiag)),
        var_sum_weights=_variance_estimate(total),
        expected_distinct=_mean_estimate(num_distinct),
        var_distinct=_variance_estimate(num_distinct),
        p_all_distinct=_mean_estimate(all_distinct),
        covariance=cov_est,
    )
