"""Fixed-size sampling with inclusion probabilities pi_i = min(1, c p_i) (systematic sampling):
first- and second-order inclusion probabilities checked by enumerating every stretch of u, and
the properties every round has (m distinct clients, weights summing to one)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import Federation, FedsampleError, exact_statistics, weight_covariance
from fedsample.designs import SystematicDesign
from fedsample.designs.inclusion_moments import pair_inclusion_probabilities
from fedsample.samplers import SystematicSampler, capped_inclusion


def _pairs_by_enumeration(design: SystematicDesign) -> np.ndarray:
    """P(i, j in S) summed over the stretches of u between boundaries modulo 1, each drawn at its midpoint."""
    n = design.num_clients
    ends = np.array(design.boundaries)  # the cumulative probabilities of the line
    cuts = np.unique(np.concatenate([[0.0, 1.0], ends - np.floor(ends)]))
    out = np.zeros((n, n))
    for lo, hi in itertools.pairwise(cuts):
        u = (lo + hi) / 2
        if hi - lo < 1e-13:  # the rounding of a sum: u + k would round across a boundary
            continue
        points = u + np.arange(design.line_draws)
        indicator = np.zeros(n)
        indicator[design.always] = 1.0
        indicator[design.line[np.searchsorted(ends, points, side="right")]] = 1.0
        out += (hi - lo) * np.outer(indicator, indicator)
    return out


@settings(deadline=None, max_examples=60)
@given(
    scores=st.lists(st.floats(0.0, 10.0), min_size=2, max_size=9).filter(lambda v: sum(x > 0 for x in v) >= 1),
    data=st.data(),
)
def test_pair_inclusion_probabilities_equal_enumeration(scores: list[float], data: st.DataObject) -> None:
    s = np.array(scores)
    m = data.draw(st.integers(1, s.size))
    pi = capped_inclusion(s, m)
    order = np.array(data.draw(st.permutations(range(s.size))))
    design = SystematicDesign(inclusion=pi, weights=np.ones(s.size), order=order)
    pairs = pair_inclusion_probabilities(design)
    np.testing.assert_allclose(pairs, _pairs_by_enumeration(design), atol=1e-11)
    np.testing.assert_allclose(pairs.sum(axis=1), m * pi, atol=1e-9)  # sum_j pi_ij = m pi_i (fixed size)


@pytest.mark.parametrize("sizes", [[5, 1, 3, 8, 2, 6, 4, 1], [100, 1, 1, 1, 1], [3, 3, 3, 3]])
@pytest.mark.parametrize("m", [1, 2, 3])
def test_rounds_have_m_distinct_clients_and_weights_summing_to_one(sizes: list[int], m: int) -> None:
    federation = Federation.from_sizes(sizes)
    sampler = SystematicSampler()
    state = sampler.init(federation, m)
    rng = np.random.default_rng(0)
    for _ in range(200):
        selection = sampler.sample(state, rng)
        assert np.unique(selection.clients).size == m == selection.clients.size
        assert float(selection.weights.sum()) == pytest.approx(1.0, rel=1e-12)
    stats = exact_statistics(sampler.design(state), federation.importances)
    assert not stats.biased
    assert stats.var_sum_weights == 0.0
    np.testing.assert_allclose(stats.p_included, capped_inclusion(federation.importances, m), rtol=1e-12)


def test_covariance_matrix_agrees_with_the_sum_of_its_off_diagonal() -> None:
    """The O(n log n) sweep for Var[sum w] and the n x n matrix of pair probabilities agree."""
    rng = np.random.default_rng(4)
    p = rng.random(30)
    p /= p.sum()
    pi = capped_inclusion(rng.random(30), 7)
    design = SystematicDesign(inclusion=pi, weights=p / pi, order=rng.permutation(30))
    stats = exact_statistics(design, p)
    cov = weight_covariance(design, p)
    assert stats.var_sum_weights == pytest.approx(float(cov.sum()), rel=1e-9)
    assert stats.offdiag_cov_sum == pytest.approx(float(cov.sum() - np.trace(cov)), rel=1e-9)


def test_given_order_never_pairs_neighbours_whose_probabilities_fit_in_one_unit() -> None:
    federation = Federation.from_sizes([1, 1, 1, 1])
    state = SystematicSampler(order="given").init(federation, 2)
    pairs = pair_inclusion_probabilities(state.design)
    assert pairs[0, 1] == 0.0
    assert pairs[2, 3] == 0.0
    assert pairs[0, 2] == pytest.approx(0.5)


def test_a_design_whose_probabilities_do_not_sum_to_an_integer_is_refused() -> None:
    with pytest.raises(FedsampleError, match=r"'inclusion'.*Got a sum of 1\.5"):
        SystematicDesign(inclusion=np.array([0.5, 1.0]), weights=np.ones(2), order=np.array([0, 1]))
    with pytest.raises(FedsampleError, match=r"'order'.*permutation"):
        SystematicDesign(inclusion=np.array([0.5, 0.5]), weights=np.ones(2), order=np.array([0, 0]))
