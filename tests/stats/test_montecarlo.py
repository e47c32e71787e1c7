"""Monte-Carlo estimates against the exact statistics, for every sampler.

Confidence: a comparison passes when the estimate is within 4 standard errors of the exact value.
Under normality a single comparison fails by chance with probability 2 (1 - Phi(4)) ~ 6.3e-5, so
a test making K comparisons fails by chance with probability at most K * 6.3e-5 (Bonferroni).
Seeds are fixed, so each run draws the same numbers: a failure is a change in behaviour.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedsample import (
    Federation,
    FedsampleError,
    MDSampler,
    exact_statistics,
    make_sampler,
    monte_carlo_statistics,
    weight_covariance,
)
from fedsample.stats import Estimate
from sampler_cases import EXACT_CASES, LEARNING_CASES, feasible, make_case, random_sizes

Z = 4.0  # two-sided false-failure probability ~6.3e-5 per comparison under normality
ROUNDS = 20_000
NUM_CLIENTS = 10
NUM_SAMPLED = 3
# Every sampler with closed-form statistics. The learned distributions drawn with replacement share
# MD's design (one row drawn m times) and are checked against it exactly by enumeration in
# test_exact.py; their Monte-Carlo runs (about 100 us a draw, since each draw rebuilds the design
# from the state) are slow tests.
MC_CASES = [pytest.param(case, marks=pytest.mark.slow) if case in LEARNING_CASES else case for case in EXACT_CASES]


def _federation(num_clients: int, seed: int) -> Federation:
    federation = Federation.from_sizes(random_sizes(seed, num_clients))
    assert all(feasible(case, federation, NUM_SAMPLED) for case in EXACT_CASES)
    return federation


def _deviations(mc: Any, exact: Any) -> dict[str, np.ndarray]:
    pairs: dict[str, tuple[Estimate, Any]] = {
        "mean_weights": (mc.mean_weights, exact.mean_weights),
        "var_weights": (mc.var_weights, exact.var_weights),
        "p_included": (mc.p_included, exact.p_included),
        "offdiag_cov_sum": (mc.offdiag_cov_sum, exact.offdiag_cov_sum),
        "var_sum_weights": (mc.var_sum_weights, exact.var_sum_weights),
        "expected_distinct": (mc.expected_distinct, exact.expected_distinct),
        "var_distinct": (mc.var_distinct, exact.var_distinct),
        "p_all_distinct": (mc.p_all_distinct, exact.p_all_distinct),
    }
    # var_distinct and p_all_distinct are None when their exact computation would be too large.
    return {name: np.atleast_1d(est.deviation(value)) for name, (est, value) in pairs.items() if value is not None}


@pytest.mark.parametrize("case", MC_CASES)
def test_monte_carlo_agrees_with_exact_statistics(case: str) -> None:
    """Every exact statistic is within 4 standard errors of its estimate from 20000 rounds.

    n = 10 clients, m = 3: 3n + 5 = 35 comparisons per sampler (mean, variance and inclusion
    probability of each weight; off-diagonal covariance sum, Var[sum w], E[N], Var[N],
    P(all distinct)), 525 over the 15 samplers with closed forms (6 of them slow tests): family-wise
    false-failure bound 525 * 6.3e-5 ~ 0.033.
    """
    federation = _federation(NUM_CLIENTS, seed=2024)
    sampler, state = make_case(case, federation, NUM_SAMPLED)
    exact = exact_statistics(sampler.design(state), sampler.importances(state))
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(EXACT_CASES.index(case)), num_rounds=ROUNDS)
    assert mc.num_rounds == ROUNDS
    assert mc.covariance is None
    deviations = _deviations(mc, exact)
    assert sum(d.size for d in deviations.values()) == 3 * NUM_CLIENTS + 5  # every statistic is exact here
    worst = {name: float(d.max()) for name, d in deviations.items()}
    assert max(worst.values()) < Z, worst


@pytest.mark.slow
@pytest.mark.parametrize("case", MC_CASES)
def test_monte_carlo_agrees_on_the_unbalanced_federation(case: str) -> None:
    """On paper 000's unbalanced federation (n = 100, m = 10), the population-level statistics
    (sum Var[w_i], off-diagonal covariance sum, Var[sum w], E[N], Var[N], P(all distinct)) are within
    4 standard errors of 50000 rounds' estimates: at most 6 comparisons per sampler, 90 in all,
    family-wise false-failure bound 90 * 6.3e-5 ~ 5.7e-3 (the standard error of sum Var[w_i] is the
    root sum of squares of the per-client ones, an approximation). Per-client values are checked on
    n = 10 above."""
    from fedsample import builtin_sizes

    federation = Federation.from_sizes(builtin_sizes("unbalanced"))
    sampler, state = make_case(case, federation, 10)
    exact = exact_statistics(sampler.design(state), sampler.importances(state))
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(200 + EXACT_CASES.index(case)), num_rounds=50_000)
    # sum_i Var[w_i] is estimated by the mean over rounds of sum_i (w_i - mean_i)^2.
    deviations = _deviations(mc, exact)
    population = {k: v for k, v in deviations.items() if k not in ("mean_weights", "var_weights", "p_included")}
    worst = {name: float(d.max()) for name, d in population.items()}
    sigma_se = float(np.sqrt(np.sum(mc.var_weights.stderr**2)))  # ignores the covariances of the estimates
    worst["sigma"] = abs(float(mc.var_weights.value.sum()) - exact.sigma) / max(sigma_se, 1e-12)
    # P(all distinct) of the dense "clustered" rows is too large to compute exactly on 100 clients.
    assert len(worst) == (5 if case == "clustered" else 6)
    assert max(worst.values()) < Z, worst


@pytest.mark.parametrize("case", MC_CASES)
def test_monte_carlo_covariance_agrees_with_weight_covariance(case: str) -> None:
    """The covariance matrix estimated from 10000 rounds is within 4 standard errors of weight_covariance.

    n = 6: 21 distinct entries (the matrix is symmetric) per sampler, 315 over the 15 samplers:
    family-wise false-failure bound 315 * 6.3e-5 ~ 0.02.
    """
    federation = _federation(6, seed=7)
    sampler, state = make_case(case, federation, NUM_SAMPLED)
    exact = weight_covariance(sampler.design(state), sampler.importances(state))
    mc = monte_carlo_statistics(
        sampler, state, np.random.default_rng(100 + EXACT_CASES.index(case)), num_rounds=10_000, covariance=True
    )
    assert mc.covariance is not None
    deviation = mc.covariance.deviation(exact)
    upper = np.triu_indices(6)
    assert deviation[upper].size == 21
    assert float(deviation[upper].max()) < Z


def test_monte_carlo_detects_a_wrong_value() -> None:
    """The comparison has power: a value off by 10% of the MD variance is far outside 4 standard errors."""
    federation = _federation(NUM_CLIENTS, seed=2024)
    sampler = MDSampler()
    state = sampler.init(federation, NUM_SAMPLED)
    exact = exact_statistics(sampler.design(state), federation.importances)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=ROUNDS)
    assert float(mc.var_weights.deviation(exact.var_weights * 1.1).max()) > Z


def test_estimate_deviation_floors_the_standard_error() -> None:
    """deviation divides by max(stderr, atol): a zero standard error does not divide by zero."""
    assert Estimate(1.0, 0.5).deviation(2.0) == pytest.approx(2.0)
    assert Estimate(0.0, 0.0).deviation(0.0) == 0.0
    assert Estimate(1e-13, 0.0).deviation(0.0) == pytest.approx(0.1)


@pytest.mark.parametrize("bad", [0, 1, 2.5, True])
def test_monte_carlo_rejects_bad_num_rounds(bad: Any) -> None:
    sampler = MDSampler()
    state = sampler.init(Federation.from_sizes([1, 2]), 1)
    with pytest.raises(FedsampleError, match="'num_rounds'") as info:
        monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=bad)
    assert info.value.parameter == "num_rounds"


def test_a_weight_with_two_equally_likely_values_has_a_positive_variance_stderr() -> None:
    """Uniform sampling of 1 of 2 equal clients: w_i is 0 or 1 with probability 1/2, so mu_4 = mu_2^2
    and the large-R standard error of the variance is 0. The exact finite-R one is about
    sqrt(2) Var / R, and the estimate is within 4 of it (99.99% two-sided)."""
    federation = Federation.from_sizes([5, 5])
    sampler = make_sampler("uniform")
    state = sampler.init(federation, 1)
    rounds = 20_000
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(7), num_rounds=rounds)
    exact = exact_statistics(sampler.design(state), federation.importances)
    assert np.all(mc.var_weights.stderr > 0.5 * np.sqrt(2) * exact.var_weights / rounds)
    assert np.all(mc.var_weights.deviation(exact.var_weights) < 4)


def test_a_client_drawn_every_round_has_a_positive_inclusion_stderr() -> None:
    """Full participation: every P(i in S) is observed at exactly 1. The smoothed standard error is
    positive, so an exact value of 1 - 1e-6 (a client missing once in a million rounds) is not
    reported as millions of standard errors away."""
    federation = Federation.from_sizes([3, 4, 5])
    sampler = make_sampler("full")
    state = sampler.init(federation, 3)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=1000)
    assert np.all(mc.p_included.value == 1)
    assert np.all(mc.p_included.stderr > 0)
    assert np.all(mc.p_included.deviation(1 - 1e-6) < 1)
    assert mc.p_all_distinct.stderr > 0
