"""Independent-inclusion samplers: Poisson-binomial needs m p_i <= 1 (003, App. A.5), its capped
variant stays unbiased with m clients in expectation; binomial includes each client w.p. m/n."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import BinomialSampler, Federation, FedsampleError, PoissonSampler, exact_statistics
from fedsample.samplers import capped_inclusion


def _stats(sampler: PoissonSampler | BinomialSampler, federation: Federation, m: int) -> Any:
    state = sampler.init(federation, m)
    return exact_statistics(sampler.design(state), federation.importances)


@pytest.mark.parametrize(
    ("federation", "m"),
    [
        (Federation.from_sizes([100, 1, 1, 1, 1]), 2),  # m p_1 = 1.92
        (Federation.from_sizes([3, 1]), 2),  # m p_1 = 1.5
        (Federation.from_importances([0.7, 0.1, 0.1, 0.1]), 2),  # float importances
        (Federation.from_sizes([1, 1, 1]), 4),  # m > n
    ],
    ids=["dominant", "two-clients", "float-importances", "m-above-n"],
)
def test_poisson_rejects_inclusion_probabilities_above_one(federation: Federation, m: int) -> None:
    """Poisson-binomial sampling needs m p_i <= 1: otherwise FedsampleError naming num_sampled and m."""
    with pytest.raises(FedsampleError, match=rf"'num_sampled'.*capped=True.*Got {m} instead") as info:
        PoissonSampler().init(federation, m)
    assert info.value.parameter == "num_sampled"


def test_poisson_accepts_m_p_max_equal_to_one() -> None:
    """The bound is inclusive and exact: sizes (2, 1, 1) and m = 2 give q_1 = 1 exactly."""
    federation = Federation.from_sizes([2, 1, 1])
    stats = _stats(PoissonSampler(), federation, 2)
    np.testing.assert_array_equal(stats.p_included, [1.0, 0.5, 0.5])
    assert not stats.biased


@pytest.mark.parametrize("sizes", [[100, 1, 1, 1, 1], [50, 30, 1, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1]])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_capped_poisson_is_unbiased_with_m_clients_in_expectation(sizes: list[int], m: int) -> None:
    """Capped Poisson: q_i = min(1, c p_i) with sum q_i = m, weights p_i / q_i: E[w_i] = p_i, E[N] = m."""
    federation = Federation.from_sizes(sizes)
    stats = _stats(PoissonSampler(capped=True), federation, m)
    assert stats.max_bias < 1e-15
    assert not stats.biased
    assert stats.p_included.sum() == pytest.approx(m, rel=1e-12)
    assert stats.expected_distinct == pytest.approx(m, rel=1e-12)
    assert np.all(stats.p_included <= 1.0)
    # Capped clients are the largest ones: q is monotone in p.
    order = np.argsort(federation.importances, kind="stable")
    assert np.all(np.diff(stats.p_included[order]) >= -1e-15)


def test_capped_poisson_caps_the_dominant_client() -> None:
    """With p = (100, 1, 1, 1, 1)/104 and m = 2 the big client is always in; the four others share one slot."""
    stats = _stats(PoissonSampler(capped=True), Federation.from_sizes([100, 1, 1, 1, 1]), 2)
    np.testing.assert_allclose(stats.p_included, [1.0, 0.25, 0.25, 0.25, 0.25], rtol=1e-12)


@settings(deadline=None, max_examples=100)
@given(
    p=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=30).map(lambda v: np.array(v) / np.sum(v)),
    data=st.data(),
)
def test_capped_inclusion_properties(p: np.ndarray, data: st.DataObject) -> None:
    """capped_inclusion: 0 < q_i <= 1, sum q_i = m, q_i = m p_i when no client needs capping."""
    m = data.draw(st.integers(1, p.size))
    q = capped_inclusion(p, m)
    assert np.all(q > 0)
    assert np.all(q <= 1.0)
    assert q.sum() == pytest.approx(m, rel=1e-9)
    uncapped = q < 1.0
    if uncapped.any():
        # The uncapped clients share one proportionality constant.
        ratio = q[uncapped] / p[uncapped]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    if m * p.max() <= 1.0:
        np.testing.assert_allclose(q, m * p, rtol=1e-9)


def test_capped_poisson_equals_plain_poisson_when_feasible() -> None:
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6, 4, 1])
    plain = _stats(PoissonSampler(), federation, 3)
    capped = _stats(PoissonSampler(capped=True), federation, 3)
    np.testing.assert_allclose(capped.p_included, plain.p_included, rtol=1e-12)
    np.testing.assert_allclose(capped.var_weights, plain.var_weights, rtol=1e-12)


def test_binomial_includes_each_client_with_probability_m_over_n() -> None:
    """Binomial sampling (003, App. A.6): P(i in S) = m/n and w_i = (n/m) p_i when included."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2])
    sampler = BinomialSampler()
    state = sampler.init(federation, 2)
    design = sampler.design(state)
    np.testing.assert_allclose(design.inclusion, 0.4)
    np.testing.assert_allclose(design.weights, 2.5 * federation.importances)
