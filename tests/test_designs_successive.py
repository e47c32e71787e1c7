"""SuccessiveDesign: ``K`` distinct clients drawn one after another from ``p`` renormalised over the
clients not drawn yet, weighted by Des Raj's ordered estimator (the without-replacement design of
paper 001's samplers, Algorithm 7).

Law: an ordered draw ``(i_1, ..., i_K)`` has probability ``prod_k p_{i_k} / (1 - S_{k-1})`` with
``S_{k-1} = p_{i_1} + ... + p_{i_{k-1}}``. Chi-square tests compare draw frequencies with it; each
uses a critical value at level 1e-4 (false-failure probability 1e-4 per test, 3e-4 for the file).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

from fedsample import FedsampleError, dumps, loads
from fedsample.designs import SuccessiveDesign

LEVEL = 1e-4


def ordered_probability(p: np.ndarray, order: tuple[int, ...]) -> float:
    """``prod_k p_{i_k} / (1 - S_{k-1})``: the successive-sampling probability of an ordered draw."""
    total, taken = 1.0, 0.0
    for client in order:
        total *= p[client] / (1.0 - taken)
        taken += p[client]
    return total


def des_raj_weights(p: np.ndarray, importances: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """Des Raj's coefficients written from the estimator itself: ``t_1 = y_1 / p_1``,
    ``t_k = y_1 + ... + y_{k-1} + y_k (1 - S_{k-1}) / p_k``, estimate ``(1/K) sum_k t_k`` of
    ``sum_i y_i``; with ``y_i = importances[i] x_i`` the coefficient of ``x_{i_k}`` is the weight."""
    num = len(order)
    coefficient = np.zeros(num)
    taken = 0.0
    for k, client in enumerate(order):
        # t_k gives y_{i_k} the factor (1 - S_{k-1}) / p; each later t_j (j > k) adds 1.
        coefficient[k] = (1.0 - taken) / p[client] + (num - 1 - k)
        taken += p[client]
    return importances[list(order)] * coefficient / num


def chi_square_pvalue(observed: dict[tuple[int, ...], int], expected: dict[tuple[int, ...], float]) -> float:
    total = sum(observed.values())
    assert set(observed) <= set(expected), "a draw outside the support"
    stat = sum((observed.get(key, 0) - total * e) ** 2 / (total * e) for key, e in expected.items())
    return float(chi2.sf(stat, df=len(expected) - 1))


def test_ordered_pairs_follow_successive_sampling() -> None:
    """n = 5, K = 2: the 20 ordered pairs appear with frequencies p_i p_j / (1 - p_i) (chi-square,
    19 degrees of freedom, 20000 draws, level 1e-4)."""
    p = np.array([0.1, 0.35, 0.2, 0.05, 0.3])
    design = SuccessiveDesign(probabilities=p, num_sampled=2, importances=np.full(5, 0.2))
    rng = np.random.default_rng(11)
    observed: dict[tuple[int, ...], int] = {}
    for _ in range(20_000):
        key = tuple(int(c) for c in design.draw_order(rng))
        observed[key] = observed.get(key, 0) + 1
    expected = {pair: ordered_probability(p, pair) for pair in itertools.permutations(range(5), 2)}
    assert math.isclose(sum(expected.values()), 1.0)
    assert chi_square_pvalue(observed, expected) > LEVEL


@pytest.mark.parametrize(
    ("dominant", "draws"),
    [pytest.param(0.995, 3000, id="redraws-then-keys"), pytest.param(1 - 1e-6, 1500, id="exponential-keys")],
)
def test_dominated_distribution_follows_successive_sampling(dominant: float, draws: int) -> None:
    """With one client of probability ~1 the redraw budget (32 K + 64 tries) runs out and the draw
    switches to exponential keys. The law must not change: the dominant client comes first and the
    next two follow p renormalised over the rest, (0.4, 0.3, 0.2, 0.1) (chi-square on the 12 ordered
    pairs, 11 degrees of freedom, level 1e-4)."""
    rest = np.array([0.4, 0.3, 0.2, 0.1])
    p = np.concatenate([[dominant], (1 - dominant) * rest])
    design = SuccessiveDesign(probabilities=p, num_sampled=3, importances=np.full(5, 0.2))
    rng = np.random.default_rng(12)
    observed: dict[tuple[int, ...], int] = {}
    first_is_dominant = 0
    for _ in range(draws):
        order = [int(c) for c in design.draw_order(rng)]
        assert len(set(order)) == 3
        if order[0] != 0:
            continue  # probability 1 - dominant: 0.5% and 1e-6
        first_is_dominant += 1
        key = (order[1] - 1, order[2] - 1)
        observed[key] = observed.get(key, 0) + 1
    assert first_is_dominant >= 0.98 * draws
    expected = {pair: ordered_probability(rest, pair) for pair in itertools.permutations(range(4), 2)}
    assert chi_square_pvalue(observed, expected) > LEVEL


def test_draws_are_distinct_reproducible_and_skip_zero_probability_clients() -> None:
    """K distinct ids per draw; clients with p = 0 are never drawn; equal seeds give equal draws."""
    p = np.array([0.0, 0.5, 0.0, 0.25, 0.25])
    design = SuccessiveDesign(probabilities=p, num_sampled=3, importances=np.full(5, 0.2))
    first = [design.draw(np.random.default_rng(seed)) for seed in range(200)]
    again = [design.draw(np.random.default_rng(seed)) for seed in range(200)]
    for (clients, weights), (clients2, weights2) in zip(first, again, strict=True):
        assert sorted(clients.tolist()) == [1, 3, 4]
        np.testing.assert_array_equal(clients, clients2)
        np.testing.assert_array_equal(weights, weights2)


@settings(deadline=None, max_examples=60, derandomize=True, database=None)
@given(data=st.data(), num_clients=st.integers(1, 5))
def test_des_raj_weights_are_unbiased_by_enumeration(data: st.DataObject, num_clients: int) -> None:
    """Over all ordered K-permutations with their successive-sampling probabilities, the weights
    equal Des Raj's coefficients and E[w_i] = importances[i] exactly (to 1e-12): the aggregate
    sum_i w_i y_i is unbiased for sum_i lambda_i y_i whatever y."""
    raw = np.array(data.draw(st.lists(st.floats(0.01, 1.0), min_size=num_clients, max_size=num_clients)))
    p = raw / raw.sum()
    importances = np.array(data.draw(st.lists(st.floats(0.01, 1.0), min_size=num_clients, max_size=num_clients)))
    importances /= importances.sum()
    k = data.draw(st.integers(1, num_clients))
    design = SuccessiveDesign(probabilities=p, num_sampled=k, importances=importances)
    mean = np.zeros(num_clients)
    total_probability = 0.0
    for order in itertools.permutations(range(num_clients), k):
        probability = ordered_probability(p, order)
        weights = design.ordered_weights(np.array(order, dtype=np.int64))
        np.testing.assert_allclose(weights, des_raj_weights(p, importances, order), rtol=1e-12)
        np.add.at(mean, list(order), probability * weights)
        total_probability += probability
    assert total_probability == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(mean, importances, rtol=0, atol=1e-12)


def test_single_draw_is_the_importance_weight() -> None:
    """With K = 1, Des Raj's weight is lambda_i / p_i, the with-replacement importance weight."""
    p = np.array([0.2, 0.5, 0.3])
    lam = np.array([0.1, 0.6, 0.3])
    design = SuccessiveDesign(probabilities=p, num_sampled=1, importances=lam)
    for client in range(3):
        assert design.ordered_weights(np.array([client]))[0] == pytest.approx(lam[client] / p[client])


def test_ordered_weights_worked_example() -> None:
    """p = (0.5, 0.3, 0.2), K = 2, drawn (1, 0): client 1 gets lambda (1/0.3 + 1)/2, client 0
    gets lambda (0.7/0.5 + 0)/2."""
    design = SuccessiveDesign(probabilities=np.array([0.5, 0.3, 0.2]), num_sampled=2, importances=np.ones(3))
    np.testing.assert_allclose(design.ordered_weights(np.array([1, 0])), [(1 / 0.3 + 1) / 2, (0.7 / 0.5) / 2])


def test_more_draws_than_positive_clients_raises() -> None:
    with pytest.raises(FedsampleError, match="'num_sampled'") as info:
        SuccessiveDesign(probabilities=np.array([0.5, 0.5, 0.0]), num_sampled=3, importances=np.ones(3) / 3)
    assert info.value.parameter == "num_sampled"


def test_design_round_trips_through_json() -> None:
    """SuccessiveDesign is plain data: JSON restores it (derived fields rebuilt) and it draws the same."""
    design = SuccessiveDesign(probabilities=np.array([0.1, 0.6, 0.3]), num_sampled=2, importances=np.ones(3) / 3)
    restored = loads(dumps(design))
    assert type(restored) is SuccessiveDesign
    np.testing.assert_array_equal(restored.cumulative, design.cumulative)
    assert not restored.probabilities.flags.writeable
    for seed in range(5):
        a, b = design.draw(np.random.default_rng(seed)), restored.draw(np.random.default_rng(seed))
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
