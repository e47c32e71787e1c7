"""Independent-inclusion samplers: Poisson-binomial needs m p_i <= 1 (003, App. A.5), its capped
variant stays unbiased with m clients in expectation; binomial includes each client w.p. m/n."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import BinomialSampler, Federation, FedsampleError, PoissonSampler, exact_statistics
from fedsample.cli import main
from fedsample.samplers import BernoulliSampler, capped_inclusion


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


@settings(deadline=None, max_examples=200)
@given(
    scores=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 7.0, 1e-9, 40.0]), min_size=1, max_size=25),
    data=st.data(),
)
def test_water_filling_handles_ties_zero_scores_and_m_equal_n(scores: list[float], data: st.DataObject) -> None:
    """Any nonnegative scores: sum q = m exactly (to rounding), 0 <= q <= 1, equal scores get equal q,
    q is monotone in the score, positive scores get q > 0, and m = n gives every client 1."""
    s = np.array(scores)
    m = data.draw(st.integers(1, s.size))
    q = capped_inclusion(s, m)
    assert q.sum() == pytest.approx(m, rel=1e-12)
    assert np.all((q >= 0) & (q <= 1))
    for value in np.unique(s):
        assert np.ptp(q[s == value]) == 0.0  # ties are never split
    order = np.argsort(s, kind="stable")
    assert np.all(np.diff(q[order]) >= -1e-15)
    if np.count_nonzero(s) >= m:
        assert np.all(q[s > 0] > 0)
        assert np.all(q[s == 0] == 0)
    else:  # too few positive scores: they are all in, the zero-score clients share the rest
        assert np.all(q[s > 0] == 1.0)
    if m == s.size:
        np.testing.assert_array_equal(q, np.ones(s.size))


def test_water_filling_refuses_bad_input_in_one_line() -> None:
    with pytest.raises(FedsampleError, match=r"'num_sampled'.*\[1, 3\].*Got 4 instead"):
        capped_inclusion(np.ones(3), 4)
    with pytest.raises(FedsampleError, match=r"'scores'.*nonnegative.*-1\.0"):
        capped_inclusion(np.array([1.0, -1.0]), 1)


@pytest.mark.parametrize("rule", ["proportional", "uniform"])
def test_bernoulli_statistics_are_eqs_65_to_69(rule: str) -> None:
    """003, App. A.8: E[w_i] = p_i, Var[w_i] = (1 - q_i)/q_i p_i^2, Cov = 0, Var[sum w] = sum Var[w_i],
    E[N] = sum q_i, Var[N] = sum q_i (1 - q_i), P(i in S) = q_i."""
    federation = Federation.from_sizes([5, 120, 33, 33, 800, 2, 61, 400, 17, 250])
    sampler = BernoulliSampler(rule=rule)  # type: ignore[arg-type]
    state = sampler.init(federation, 3)
    q = sampler.design(state).inclusion
    p = federation.importances
    stats = exact_statistics(sampler.design(state), p)
    np.testing.assert_allclose(stats.mean_weights, p, rtol=1e-12)
    np.testing.assert_allclose(stats.var_weights, (1 - q) / q * p**2, rtol=1e-12, atol=1e-18)
    assert stats.alpha == 0.0
    assert stats.var_sum_weights == pytest.approx(float(np.sum((1 - q) / q * p**2)), rel=1e-12)
    assert stats.expected_distinct == pytest.approx(float(q.sum()), rel=1e-12)
    assert stats.var_distinct == pytest.approx(float(np.sum(q * (1 - q))), rel=1e-12)
    np.testing.assert_array_equal(stats.p_included, q)
    expected_q = capped_inclusion(p, 3) if rule == "proportional" else np.full(10, 0.3)
    np.testing.assert_allclose(q, expected_q, rtol=1e-12)


def test_bernoulli_with_a_given_vector() -> None:
    federation = Federation.from_sizes([1, 2, 3])
    sampler = BernoulliSampler(inclusion=[0.5, 1.0, 0.25])
    assert sampler.inclusion == (0.5, 1.0, 0.25)
    design = sampler.design(sampler.init(federation, 1))
    np.testing.assert_allclose(design.weights, federation.importances / np.array([0.5, 1.0, 0.25]))
    with pytest.raises(FedsampleError, match=r"'inclusion'.*one probability per client \(3 clients\)"):
        BernoulliSampler(inclusion=[0.5, 0.5]).init(federation, 1)
    with pytest.raises(FedsampleError, match=r"'inclusion'.*\(0, 1\]"):
        BernoulliSampler(inclusion=[0.5, 0.0, 1.0])


@pytest.mark.parametrize("name", ["bernoulli", "optimal", "optimal-distribution", "systematic"])
def test_cli_stats_and_sample_run_the_new_samplers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """fedsample stats (exact and Monte Carlo) and fedsample sample accept the new samplers."""
    assert main(["stats", "--sizes", "5,120,33,33,800,2,61,400,17,250", "-m", "3", "--samplers", name,
                 "--monte-carlo", "2000", "--json"]) == 0  # fmt: skip
    stats = json.loads(capsys.readouterr().out)["samplers"][name]
    assert stats["mean_weights"] == pytest.approx(
        list(np.array([5, 120, 33, 33, 800, 2, 61, 400, 17, 250]) / 1721), rel=1e-12
    )
    assert main(["sample", name, "--sizes", "5,120,33,33,800,2,61,400,17,250", "-m", "3", "--rounds", "2"]) == 0
    assert capsys.readouterr().out.strip()
