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


def _variance_stderr(mu4: Any, mu2: Any, rounds: int) -> Any:
    """Standard error of a sample variance over ``R`` rounds: ``sqrt((mu_4 - mu_2^2 (R - 3)/(R - 1)) / R)``.

    The exact finite-sample variance of ``s^2``, with the plug-in central moments ``mu_2`` and
    ``mu_4`` (both divided by ``R``). The large-``R`` form ``(mu_4 - mu_2^2) / R`` drops a
    ``2 mu_2^2 / (R (R - 1))`` term, which is all there is when ``mu_4 = mu_2^2``: a weight taking
    two values with probability 1/2 each, whose estimated variance would otherwise get a standard
    error of zero.
    """
    shrink = (rounds - 3) / (rounds - 1) if rounds > 1 else 0.0
    return np.sqrt(np.maximum(mu4 - shrink * mu2 * mu2, 0.0) / rounds)


def _proportion_stderr(p: Any, rounds: int) -> Any:
    """Standard error of a proportion, from the smoothed ``(k + 1/2) / (R + 1)`` so that a
    proportion observed at 0 or 1 (a client drawn in every round) still has a positive one."""
    smoothed = (np.asarray(p, dtype=float) * rounds + 0.5) / (rounds + 1)
    return np.sqrt(smoothed * (1 - smoothed) / rounds)


def _variance_estimate(x: FloatArray) -> Estimate:
    """Sample variance of ``x`` and its standard error (:func:`_variance_stderr`)."""
    d = x - x.mean()
    s2 = float(np.mean(d * d)) * x.size / max(x.size - 1, 1)
    mu4 = float(np.mean(d**4))
    return Estimate(s2, float(_variance_stderr(mu4, float(np.mean(d * d)), x.size)))


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
    var_se = _variance_stderr(d4 / num_rounds, d2 / num_rounds, num_rounds)
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
        p_included=Estimate(p_inc, _proportion_stderr(p_inc, num_rounds)),
        offdiag_cov_sum=_mean_estimate(np.concatenate(offdiag)),
        var_sum_weights=_variance_estimate(total),
        expected_distinct=_mean_estimate(num_distinct),
        var_distinct=_variance_estimate(num_distinct),
        p_all_distinct=Estimate(float(all_distinct.mean()), float(_proportion_stderr(all_distinct.mean(), num_rounds))),
        covariance=cov_est,
    )
