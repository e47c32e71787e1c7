"""Unbiasedness of the learned-distribution samplers (paper 001 and its baselines): for a fixed
distribution ``p`` the aggregate ``sum_i w_i y_i`` has expectation ``sum_i lambda_i y_i`` for every
``y``, i.e. ``E[w_i] = lambda_i`` for every client, with replacement (weights ``lambda / (K p)`` per
draw, 001 eq. 12) and without (Des Raj's ordered estimator).

Exact: every outcome enumerated on tiny populations (all K-tuples with replacement; all ordered
K-permutations with their successive-sampling probabilities without). Monte Carlo: a larger
population, within 4 standard errors (see the family-wise bound in the test's docstring).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedsample import Federation, monte_carlo_statistics
from fedsample.designs import RowDesign, SuccessiveDesign
from fedsample.samplers.adaptive._distribution import distribution_design
from fedsample.samplers.adaptive.projection import project_truncated_simplex
from sampler_cases import (
    DISTRIBUTION_CASES,
    WITHOUT_REPLACEMENT_CASES,
    feasible,
    make_case,
    random_sizes,
    warm_up,
)

Z = 4.0  # two-sided false-failure probability ~6.3e-5 per comparison under normality
TOL = 1e-12


def enumerate_mean_weights(design: RowDesign | SuccessiveDesign) -> tuple[np.ndarray, float]:
    """``(E[w], total probability)`` over every outcome of a single-row or successive design."""
    n = design.num_clients
    mean = np.zeros(n)
    total = 0.0
    if isinstance(design, RowDesign):
        assert design.num_rows == 1
        p = design.probabilities
        for draws in itertools.product(range(n), repeat=design.num_draws):
            probability = math.prod(float(p[i]) for i in draws)
            np.add.at(mean, list(draws), probability * design.draw_weights[list(draws)])
            total += probability
        return mean, total
    p = design.probabilities
    for order in itertools.permutations(range(n), design.num_sampled):
        probability, taken = 1.0, 0.0
        for client in order:
            probability *= float(p[client]) / (1.0 - taken)
            taken += float(p[client])
        np.add.at(mean, list(order), probability * design.ordered_weights(np.array(order, dtype=np.int64)))
        total += probability
    return mean, total


TINY_FEDERATIONS = {
    "1-3": Federation.from_sizes([1, 3]),
    "3-1-2": Federation.from_sizes([3, 1, 2]),
    "5-1-1-3": Federation.from_sizes([5, 1, 1, 3]),
    "float-importances": Federation.from_importances([0.15, 0.25, 0.6]),
}
ENUMERATION_CASES = [
    pytest.param(case, fed_id, m, id=f"{case}-{fed_id}-m{m}")
    for case in DISTRIBUTION_CASES
    for fed_id, fed in TINY_FEDERATIONS.items()
    for m in range(1, fed.num_clients + 2)
    if feasible(case, fed, m)
]


@pytest.mark.parametrize(("case", "fed_id", "m"), ENUMERATION_CASES)
def test_learned_state_is_unbiased_by_enumeration(case: str, fed_id: str, m: int) -> None:
    """At the state learned from a few rounds of feedback, E[w_i] = lambda_i to 1e-12 over every
    outcome, and the selections the sampler draws carry exactly the weights enumerated."""
    federation = TINY_FEDERATIONS[fed_id]
    sampler, state = make_case(case, federation, m)
    design = sampler.design(state)
    p = sampler.probabilities(state)
    assert isinstance(design, SuccessiveDesign if case in WITHOUT_REPLACEMENT_CASES else RowDesign)
    np.testing.assert_array_equal(design.probabilities, p)
    mean, total = enumerate_mean_weights(design)
    assert total == pytest.approx(1.0, abs=TOL)
    np.testing.assert_allclose(mean, federation.importances, rtol=0, atol=TOL)
    # The sample path uses the enumerated weights: lambda / (K p) per draw, or Des Raj's in draw order.
    rng = np.random.default_rng(3)
    for _ in range(20):
        selection = sampler.sample(state, rng)
        if isinstance(design, SuccessiveDesign):
            expected = design.ordered_weights(selection.clients)
        else:
            expected = federation.importances[selection.clients] / (m * p[selection.clients])
        np.testing.assert_allclose(selection.weights, expected, rtol=1e-14)


def test_enumeration_covers_every_learned_case_in_both_modes() -> None:
    for case in DISTRIBUTION_CASES:
        assert sum(1 for param in ENUMERATION_CASES if param.values[0] == case) >= 9


@pytest.mark.parametrize("replace", [True, False], ids=["with-replacement", "without-replacement"])
@pytest.mark.parametrize("seed", range(6))
def test_random_distributions_are_unbiased_by_enumeration(seed: int, replace: bool) -> None:
    """For random p in the truncated simplex (floors from 0.01 to 1) and random y, the expected
    aggregate E[sum_i w_i y_i] equals sum_i lambda_i y_i to 1e-12."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    k = int(rng.integers(1, n + 1))
    alpha = float(rng.uniform(0.01, 1.0))
    p = project_truncated_simplex(10.0 ** rng.uniform(-3, 3, size=n), alpha / n)
    lam = rng.dirichlet(np.ones(n))
    y = rng.normal(size=n)
    mean, total = enumerate_mean_weights(distribution_design(p, lam, k, replace=replace))
    assert total == pytest.approx(1.0, abs=TOL)
    assert float(mean @ y) == pytest.approx(float(lam @ y), abs=TOL)
    np.testing.assert_allclose(mean, lam, rtol=0, atol=TOL)


MC_CLIENTS, MC_SAMPLED, MC_ROUNDS = 30, 5, 3000


@pytest.mark.parametrize("case", DISTRIBUTION_CASES)
def test_monte_carlo_mean_weights_equal_importances(case: str) -> None:
    """n = 30, K = 5, the state after 30 rounds of feedback: every client's mean weight over 3000
    rounds is within 4 standard errors of lambda_i. 30 comparisons per sampler, 360 over the 12
    cases: family-wise false-failure bound 360 * 6.3e-5 ~ 0.023 (fixed seeds: a failure is a change)."""
    federation = Federation.from_sizes(random_sizes(77, MC_CLIENTS))
    sampler, state = make_case(case, federation, MC_SAMPLED)
    state = warm_up(sampler, state, rounds=30, seed=DISTRIBUTION_CASES.index(case))
    # The learned distribution is not uniform, so the check is not the trivial one.
    p = sampler.probabilities(state)
    if not case.startswith("uniform-is"):
        assert p.max() / p.min() > 1.05
    mc = monte_carlo_statistics(
        sampler, state, np.random.default_rng(500 + DISTRIBUTION_CASES.index(case)), num_rounds=MC_ROUNDS
    )
    deviation = mc.mean_weights.deviation(federation.importances)
    assert deviation.size == MC_CLIENTS
    assert float(deviation.max()) < Z, (case, float(deviation.max()))


def test_monte_carlo_check_has_power() -> None:
    """The Monte-Carlo check detects a 10% error in the importances it compares against."""
    federation = Federation.from_sizes(random_sizes(77, MC_CLIENTS))
    sampler, state = make_case("osmd-noreplace", federation, MC_SAMPLED)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(1), num_rounds=MC_ROUNDS)
    assert float(mc.mean_weights.deviation(federation.importances * 1.1).max()) > Z
