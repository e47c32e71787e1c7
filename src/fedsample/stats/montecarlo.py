"""Monte-Carlo estimates of the weight statistics, for any sampler at a fixed state.

The estimator repeatedly calls ``sampler.sample(state, rng)`` (the state is not updated, so it
estimates the distribution of one round drawn at that state) and returns every statistic of
:class:`~fedsample.designs.exact.ExactStatistics` with a standard error. It needs nothing but the
contract, so it covers samplers without a closed form.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Boolean, Interval, check_param, invalid
from fedsample.designs.moments import check_importances
from fedsample.rng import check_generator
from fedsample.samplers._base import Sampler, check_state

__all__ = [
    "MAX_MONTE_CARLO_ROUNDS",
    "MONTE_CARLO_ROUNDS",
    "BiasEstimate",
    "Estimate",
    "MonteCarloStatistics",
    "check_sampler_and_state",
    "monte_carlo_bias",
    "monte_carlo_statistics",
]

# Rounds are gathered into blocks of at most this many draws and dense (round, client) entries.
_BLOCK_ENTRIES = 1 << 22
# The most rounds one estimate draws (twice: once for the means, once for the moments around them).
# A round costs 50 to 250 microseconds of Python (a draw and its bookkeeping), so 10^7 rounds take
# minutes to an hour; standard errors shrink as 1 / sqrt(R), already 3e-4 of the weights' spread at
# 10^7. Beyond, a mistyped count (10^12) would run for weeks before printing anything.
MAX_MONTE_CARLO_ROUNDS = 10**7
MONTE_CARLO_ROUNDS = Interval(int, 2, MAX_MONTE_CARLO_ROUNDS, closed="both")
_EPS = float(np.finfo(np.float64).eps)


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


def _rounding_floor(terms: Any, scale: Any) -> Any:
    """Bound on the float rounding error of a mean of values each summed from ``terms`` numbers of
    size ``scale`` (``terms`` includes the rounds added up for the mean): ``4 terms eps scale``."""
    return 4.0 * np.asarray(terms, dtype=float) * _EPS * np.asarray(scale, dtype=float)


def _floored_estimates(mean: Any, d2: Any, d4: Any, rounds: int, terms: Any) -> tuple[Estimate, Estimate]:
    """Mean and variance estimates from the centred sums ``d2 = sum (x - mean)^2`` and ``d4``.

    Each standard error is at least its estimate's rounding floor (:func:`_rounding_floor`): a
    weight that never varies has a variance estimate made of rounding alone (``5e-31`` for an exact
    zero) whose plain standard error is as small, and would count as many standard errors off.
    """
    var = d2 / (rounds - 1)
    rms = np.sqrt(mean * mean + var)
    floor = _rounding_floor(terms, rms)
    mean_se = np.maximum(np.sqrt(var / rounds), floor)
    # With the mean off by delta, sum (x - mean - delta)^2 = sum (x - mean)^2 + R delta^2; values off
    # by delta each move it by at most 2 s delta + delta^2 (s the spread): a floor of delta (delta + 2 s).
    var_se = np.maximum(_variance_stderr(d4 / rounds, d2 / rounds, rounds), floor * (floor + 2 * np.sqrt(var)))
    if np.ndim(mean) == 0:
        return Estimate(float(mean), float(mean_se)), Estimate(float(var), float(var_se))
    return Estimate(mean, mean_se), Estimate(var, var_se)


class _Block(NamedTuple):
    """``rows`` consecutive rounds as dense ``(rows, n)`` weights and draw counts."""

    weights: FloatArray
    counts: npt.NDArray[np.integer[Any]]


def _blocks(sampler: Sampler[Any], state: Any, rng: np.random.Generator, num_rounds: int, n: int) -> Iterator[_Block]:
    """Draw ``num_rounds`` rounds and yield them in order, a block at a time.

    A block holds at most ``_BLOCK_ENTRIES`` draws and ``_BLOCK_ENTRIES`` dense entries (at least
    one round), so memory stays ``O(n + m)`` whatever the number of rounds.
    """
    rows_per_block = max(1, _BLOCK_ENTRIES // max(n, 1))
    rounds: list[IntArray] = []
    clients: list[IntArray] = []
    weights: list[FloatArray] = []
    pending = 0
    for t in range(num_rounds):
        selection = sampler.sample(state, rng)
        rounds.append(np.full(selection.clients.size, len(rounds), dtype=np.int64))
        clients.append(selection.clients)
        weights.append(selection.weights)
        pending += selection.clients.size
        if len(rounds) >= rows_per_block or pending >= _BLOCK_ENTRIES or t + 1 == num_rounds:
            size = len(rounds) * n
            flat = np.concatenate(rounds) * n + np.concatenate(clients)
            w = np.bincount(flat, weights=np.concatenate(weights), minlength=size).astype(np.float64, copy=False)
            c = np.bincount(flat, minlength=size).reshape(len(rounds), n)
            yield _Block(w.reshape(len(rounds), n), c)
            rounds, clients, weights, pending = [], [], [], 0


class _Welford:
    """Running count, mean and centred sum of squares of a stream of values (Chan et al.'s merge)."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, values: FloatArray) -> None:
        k = values.size
        if k == 0:
            return
        block_mean = float(values.mean())
        block_m2 = float(np.sum((values - block_mean) ** 2))
        total = self.count + k
        delta = block_mean - self.mean
        self.m2 += block_m2 + delta * delta * self.count * k / total
        self.mean += delta * k / total
        self.count = total


def check_sampler_and_state(sampler: object, state: object, owner: str) -> int:
    """Refuse anything but a :class:`~fedsample.samplers.Sampler` and a state it makes; its ``n``."""
    if not isinstance(sampler, Sampler):
        raise invalid("sampler", owner, "a fedsample Sampler (e.g. fedsample.MDSampler())", sampler)
    check_state(sampler, state, owner)
    return sampler.num_clients(state)


def monte_carlo_statistics(
    sampler: Sampler[Any],
    state: Any,
    rng: np.random.Generator,
    *,
    num_rounds: int = 10_000,
    covariance: bool = False,
) -> MonteCarloStatistics:
    """Estimate the weight statistics of ``sampler`` at ``state`` from ``num_rounds`` draws.

    The rounds are drawn twice from the same random state: once for the means, once more for the
    centred moments around them. Both passes read the rounds a block at a time, so memory is
    ``O(n + m)`` (``O(n^2)`` with ``covariance=True``) whatever ``num_rounds`` is; ``rng`` ends
    where ``num_rounds`` draws leave it. Standard errors are never below the rounding floor of
    their estimate (:func:`_floored_estimates`).

    ``covariance=True`` also estimates the full ``n x n`` covariance matrix (small ``n`` only).
    ``num_rounds`` is at most :data:`MAX_MONTE_CARLO_ROUNDS` (10^7).

    >>> import numpy as np
    >>> from fedsample import Federation, MDSampler
    >>> sampler = MDSampler()
    >>> state = sampler.init(Federation.from_sizes([1, 1, 2]), num_sampled=2)
    >>> mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=20_000)
    >>> bool(abs(mc.mean_weights.value[2] - 0.5) < 4 * mc.mean_weights.stderr[2])
    True
    """
    owner = "monte_carlo_statistics"
    n = check_sampler_and_state(sampler, state, owner)
    check_generator(rng, owner)
    check_param("num_rounds", owner, num_rounds, MONTE_CARLO_ROUNDS)
    check_param("covariance", owner, covariance, Boolean())
    replay = copy.deepcopy(rng)  # the second pass redraws the same rounds

    # Pass 1: means, inclusion, per-round totals and distinct counts, and the largest round.
    sum_w = np.zeros(n)
    included = np.zeros(n)
    sum_total = sum_distinct = all_distinct = 0.0
    most_draws = 1
    for w, c in _blocks(sampler, state, rng, num_rounds, n):
        sum_w += w.sum(axis=0)
        inc = c > 0
        included += inc.sum(axis=0)
        sum_total += float(w.sum())
        distinct = inc.sum(axis=1)
        draws = c.sum(axis=1)
        sum_distinct += float(distinct.sum())
        all_distinct += float(np.count_nonzero(distinct == draws))
        most_draws = max(most_draws, int(draws.max()))
    mean = sum_w / num_rounds
    mean_total = sum_total / num_rounds
    mean_distinct = sum_distinct / num_rounds

    # Pass 2: centred moments, the off-diagonal covariance sum and, optionally, the full matrix.
    d2, d4 = np.zeros(n), np.zeros(n)
    total_d2 = total_d4 = distinct_d2 = distinct_d4 = 0.0
    offdiag = _Welford()
    abs_sum = 0.0
    cov_sum = np.zeros((n, n)) if covariance else None
    cov_sq = np.zeros((n, n)) if covariance else None
    for w, c in _blocks(sampler, state, replay, num_rounds, n):
        d = w - mean
        dd = d * d
        d2 += dd.sum(axis=0)
        d4 += (dd * dd).sum(axis=0)
        row_sum = d.sum(axis=1)
        offdiag.add(row_sum**2 - dd.sum(axis=1))
        abs_sum = max(abs_sum, float(np.abs(d).sum(axis=1).max()))
        dt = w.sum(axis=1) - mean_total
        total_d2 += float(np.sum(dt * dt))
        total_d4 += float(np.sum(dt**4))
        dk = (c > 0).sum(axis=1) - mean_distinct
        distinct_d2 += float(np.sum(dk * dk))
        distinct_d4 += float(np.sum(dk**4))
        if cov_sum is not None and cov_sq is not None:
            cov_sum += d.T @ d
            cov_sq += dd.T @ dd
    p_inc = included / num_rounds
    mean_est, var_est = _floored_estimates(mean, d2, d4, num_rounds, most_draws + num_rounds)
    _, var_total = _floored_estimates(mean_total, total_d2, total_d4, num_rounds, n + most_draws + num_rounds)
    distinct_est, var_distinct = _floored_estimates(mean_distinct, distinct_d2, distinct_d4, num_rounds, num_rounds)
    # A round's (sum_i d_i)^2 - sum_i d_i^2 rounds like a square of n terms of size sum_i |d_i|.
    offdiag_floor = float(_rounding_floor(n + num_rounds, abs_sum * abs_sum))
    offdiag_se = max(float(np.sqrt(offdiag.m2 / (num_rounds - 1) / num_rounds)), offdiag_floor)
    cov_est = None
    if cov_sum is not None and cov_sq is not None:
        cov = cov_sum / num_rounds
        cov_est = Estimate(cov, np.sqrt(np.maximum(cov_sq / num_rounds - cov * cov, 0.0) / num_rounds))
    p_all = all_distinct / num_rounds
    return MonteCarloStatistics(
        num_rounds=num_rounds,
        mean_weights=mean_est,
        var_weights=var_est,
        p_included=Estimate(p_inc, _proportion_stderr(p_inc, num_rounds)),
        offdiag_cov_sum=Estimate(offdiag.mean, offdiag_se),
        var_sum_weights=var_total,
        expected_distinct=distinct_est,
        var_distinct=var_distinct,
        p_all_distinct=Estimate(p_all, float(_proportion_stderr(p_all, num_rounds))),
        covariance=cov_est,
    )


class BiasEstimate(NamedTuple):
    """The bias of a sampler's weights estimated by Monte Carlo.

    ``max_bias`` is ``max_i |mean_i - p_i|`` over the estimated means, reached at ``client``, whose
    standard error is ``stderr``; ``max_z`` is the largest ``|mean_i - p_i| / stderr_i`` over the
    clients. Under unbiasedness each ``z`` is about standard normal, so ``max_z`` above 5 (for up
    to 10^4 clients, a false alarm below 6e-3 by the union bound) shows a bias.
    """

    max_bias: float
    client: int
    stderr: float
    max_z: float


def monte_carlo_bias(statistics: MonteCarloStatistics, importances: npt.ArrayLike) -> BiasEstimate:
    """How far the estimated ``E[w_i]`` of ``statistics`` are from the importances ``p_i``.

    >>> import numpy as np
    >>> from fedsample import Federation, FedAvgUniformSampler
    >>> federation = Federation.from_sizes([1, 1, 6])
    >>> sampler = FedAvgUniformSampler()
    >>> state = sampler.init(federation, num_sampled=1)
    >>> mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=4000)
    >>> monte_carlo_bias(mc, federation.importances).max_z > 5  # weights 1 w.p. 1/3 each, not p_i
    True
    """
    if not isinstance(statistics, MonteCarloStatistics):
        raise invalid("statistics", "monte_carlo_bias", "a MonteCarloStatistics", statistics)
    mean = np.asarray(statistics.mean_weights.value, dtype=np.float64)
    p = check_importances(importances, mean.size, "monte_carlo_bias")
    stderr = np.asarray(statistics.mean_weights.stderr, dtype=np.float64)
    gap = np.abs(mean - p)
    worst = int(np.argmax(gap))
    z = statistics.mean_weights.deviation(p)
    return BiasEstimate(max_bias=float(gap[worst]), client=worst, stderr=float(stderr[worst]), max_z=float(np.max(z)))
