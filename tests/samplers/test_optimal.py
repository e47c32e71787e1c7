"""Optimal sampling (Chen et al., TMLR 2022) and paper 001's full-information Optimal sampler:
the inclusion probabilities and distributions they compute from reported norms, their two-phase
update, and the exactness of their statistics."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, exact_statistics
from fedsample.samplers import (
    Feedback,
    OptimalDistributionSampler,
    OptimalSampler,
    Selection,
    capped_inclusion,
    optimal_distribution,
    project_truncated_simplex,
)


def _report(federation: Federation, norms: np.ndarray, clients: np.ndarray | None = None) -> Feedback:
    """Phase 1 of a round: ``clients`` (default: all, weight p_i) report update and gradient norms."""
    ids = np.arange(federation.num_clients) if clients is None else np.asarray(clients)
    weights = federation.importances[ids] * (federation.num_clients / ids.size)
    selection = Selection(clients=ids, weights=weights)
    return Feedback(round=0, selection=selection, clients=ids, update_norms=norms[ids], gradient_norms=norms[ids])


def test_oracle_inclusion_is_water_filled_from_p_times_norm() -> None:
    """q_i = min(1, c p_i ||U_i||) with sum q = m: the big-update client is capped at 1."""
    federation = Federation.from_sizes([1, 1, 1, 1])
    norms = np.array([10.0, 1.0, 1.0, 2.0])
    sampler = OptimalSampler()
    state = sampler.update(sampler.init(federation, 2), _report(federation, norms))
    q = sampler.inclusion(state)
    np.testing.assert_allclose(q, [1.0, 0.25, 0.25, 0.5], rtol=1e-12)
    design = sampler.design(state)
    np.testing.assert_allclose(design.weights, federation.importances / q, rtol=1e-12)


def test_optimal_minimises_the_aggregate_variance_among_inclusion_schemes() -> None:
    """For the same updates, sum_i (1 - q_i)/q_i p_i^2 ||U_i||^2 (the variance of the aggregate) is
    smaller with optimal q than with the proportional (m p_i) and uniform (m/n) budgets of m."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6, 4, 1])
    norms = np.array([0.5, 4.0, 1.0, 0.1, 3.0, 1.0, 2.0, 0.2])
    p, m = federation.importances, 3
    sampler = OptimalSampler()
    q_opt = sampler.inclusion(sampler.update(sampler.init(federation, m), _report(federation, norms)))

    def aggregate_variance(q: np.ndarray) -> float:
        return float(np.sum((1 - q) / q * (p * norms) ** 2))

    assert q_opt.sum() == pytest.approx(m, rel=1e-12)
    best = aggregate_variance(q_opt)
    assert best < aggregate_variance(capped_inclusion(p, m))
    assert best < aggregate_variance(np.full(p.size, m / p.size))


def test_oracle_keeps_the_last_norm_of_clients_that_did_not_report() -> None:
    federation = Federation.from_sizes([1, 1, 1, 1])
    sampler = OptimalSampler()
    state = sampler.update(sampler.init(federation, 2), _report(federation, np.array([4.0, 1.0, 1.0, 2.0])))
    later = sampler.update(state, _report(federation, np.array([1.0, 1.0, 1.0, 1.0]), clients=np.array([1])))
    np.testing.assert_array_equal(later.norms, [4.0, 1.0, 1.0, 2.0])
    assert later.round == 2


def test_protocol_draws_among_the_candidates_with_their_weights() -> None:
    """Protocol mode: q over the reporting candidates only; weights w_i^C / q_i stay unbiased over
    the candidate draw (here a fixed half with weights 2 p_i) by the tower rule."""
    federation = Federation.from_sizes([1, 2, 3, 4])
    sampler = OptimalSampler(mode="protocol")
    norms = np.array([1.0, 1.0, 2.0, 1.0])
    state = sampler.update(sampler.init(federation, 1), _report(federation, norms, clients=np.array([3, 1])))
    np.testing.assert_array_equal(state.candidates, [1, 3])
    q = sampler.inclusion(state)
    assert q[0] == q[2] == 0.0
    np.testing.assert_allclose(q[[1, 3]], [1 / 3, 2 / 3], rtol=1e-12)
    stats = exact_statistics(sampler.design(state), federation.importances)
    np.testing.assert_allclose(stats.mean_weights, [0.0, 0.4, 0.0, 0.8], rtol=1e-12)


def test_protocol_with_every_client_reporting_equals_oracle() -> None:
    federation = Federation.from_sizes([5, 1, 3, 8, 2])
    norms = np.array([0.5, 4.0, 1.0, 0.1, 3.0])
    states = [
        s.update(s.init(federation, 2), _report(federation, norms))
        for s in (OptimalSampler(), OptimalSampler(mode="protocol"))
    ]
    designs = [OptimalSampler().design(states[0]), OptimalSampler(mode="protocol").design(states[1])]
    np.testing.assert_allclose(designs[0].inclusion, designs[1].inclusion, rtol=1e-12)
    np.testing.assert_allclose(designs[0].weights, designs[1].weights, rtol=1e-12)


def test_zero_norm_clients_are_never_drawn_and_nan_reports_are_ignored() -> None:
    federation = Federation.from_sizes([1, 1, 1, 1])
    sampler = OptimalSampler()
    state = sampler.update(sampler.init(federation, 2), _report(federation, np.array([0.0, 1.0, np.nan, 3.0])))
    q = sampler.inclusion(state)
    assert q[0] == 0.0
    assert state.norms[2] == 1.0  # the NaN report left the last known norm
    assert q.sum() == pytest.approx(2.0)


def test_missing_norms_are_one_clear_error() -> None:
    federation = Federation.from_sizes([1, 1])
    feedback = Feedback(round=0, selection=Selection(clients=[0], weights=[1.0]), clients=[0])
    with pytest.raises(FedsampleError, match=r"'feedback'.*update_norms"):
        OptimalSampler().update(OptimalSampler().init(federation, 1), feedback)


def test_optimal_distribution_is_proportional_to_lambda_times_norm() -> None:
    """Paper 001's Optimal: p proportional to lambda_m ||g_m||, weight lambda_m / (K p_m) per draw."""
    federation = Federation.from_sizes([1, 2, 3, 4])
    norms = np.array([4.0, 1.0, 1.0, 0.5])
    sampler = OptimalDistributionSampler()
    state = sampler.update(sampler.init(federation, 3), _report(federation, norms))
    expected = federation.importances * norms / np.sum(federation.importances * norms)
    np.testing.assert_allclose(sampler.probabilities(state), expected, rtol=1e-12)
    stats = exact_statistics(sampler.design(state), federation.importances)
    assert not stats.biased


def test_optimal_distribution_zeroes_negligible_probabilities_like_the_released_code() -> None:
    p = optimal_distribution(np.array([1.0, 1e-12, 1.0]), alpha=0.0)
    np.testing.assert_array_equal(p, [0.5, 0.0, 0.5])
    np.testing.assert_array_equal(optimal_distribution(np.zeros(4), alpha=0.0), np.full(4, 0.25))


def test_optimal_distribution_with_a_floor_minimises_the_variance_loss_on_the_truncated_simplex() -> None:
    """With alpha > 0, p = max(alpha/M, c s): no point of a grid on {p >= alpha/M} has a lower loss."""
    s = np.array([5.0, 1.0, 0.1])
    alpha = 0.6
    p = optimal_distribution(s, alpha=alpha)
    np.testing.assert_allclose(p, project_truncated_simplex(s / s.max(), alpha / 3), rtol=1e-12)
    assert p.min() >= alpha / 3 - 1e-15

    def loss(q: np.ndarray) -> float:
        return float(np.sum(s**2 / q))

    floor = alpha / 3
    for a, b in itertools.product(np.linspace(floor, 1 - 2 * floor, 60), repeat=2):
        c = 1 - a - b
        if c >= floor:
            assert loss(p) <= loss(np.array([a, b, c])) * (1 + 1e-12)


def test_before_any_report_optimal_is_bernoulli_proportional() -> None:
    federation = Federation.from_sizes([100, 1, 1, 1, 1])
    sampler = OptimalSampler()
    q = sampler.inclusion(sampler.init(federation, 2))
    np.testing.assert_allclose(q, [1.0, 0.25, 0.25, 0.25, 0.25], rtol=1e-12)
    assert math.isclose(float(q.sum()), 2.0)
