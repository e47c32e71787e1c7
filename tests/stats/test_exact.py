"""Exact statistics: checked against full enumeration of every outcome on tiny populations, and
against the closed forms of paper 003 (Table 1, App. A) and paper 000 (Section 3)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import (
    BernoulliDesign,
    BinomialSampler,
    ClusteredSampler,
    DataLevelDesign,
    FedAvgUniformSampler,
    Federation,
    FixedSizeDesign,
    FullDesign,
    FullSampler,
    MDSampler,
    PoissonSampler,
    RowDesign,
    SizeClusteredSampler,
    UniformSampler,
    exact_statistics,
    weight_covariance,
)
from fedsample.designs import SystematicDesign
from sampler_cases import BIASED_CASES, EXACT_CASES, feasible, make_case, mixed_rows, random_sizes

# --- enumeration -----------------------------------------------------------------------------


class Outcome(NamedTuple):
    probability: float
    weights: np.ndarray  # w_i(S), dense
    counts: np.ndarray  # times each client was drawn


def enumerate_outcomes(design: Any) -> list[Outcome]:
    """Every outcome of ``design`` with its probability, listed by brute force."""
    n = design.num_clients
    if isinstance(design, FullDesign):
        return [Outcome(1.0, np.array(design.weights), np.ones(n, dtype=np.int64))]
    if isinstance(design, FixedSizeDesign):
        subsets = list(itertools.combinations(range(n), design.num_sampled))
        outcomes = []
        for subset in subsets:
            counts = np.zeros(n, dtype=np.int64)
            counts[list(subset)] = 1
            outcomes.append(Outcome(1.0 / len(subsets), counts * design.weights, counts))
        return outcomes
    if isinstance(design, BernoulliDesign):
        outcomes = []
        for pattern in itertools.product((0, 1), repeat=n):
            counts = np.array(pattern, dtype=np.int64)
            q = design.inclusion
            probability = math.prod(float(q[i]) if counts[i] else 1.0 - float(q[i]) for i in range(n))
            outcomes.append(Outcome(probability, counts * design.weights, counts))
        return outcomes
    if isinstance(design, RowDesign):
        draws = []  # one (clients, probabilities) per draw: row u repeated row_counts[u] times
        for u in range(design.num_rows):
            lo, hi = design.indptr[u], design.indptr[u + 1]
            draws += [(design.indices[lo:hi], design.probabilities[lo:hi])] * int(design.row_counts[u])
        outcomes = []
        for choice in itertools.product(*(range(len(ids)) for ids, _ in draws)):
            probability = math.prod(float(probs[j]) for (_, probs), j in zip(draws, choice, strict=True))
            clients = [int(ids[j]) for (ids, _), j in zip(draws, choice, strict=True)]
            counts = np.bincount(clients, minlength=n)
            outcomes.append(Outcome(probability, counts * design.draw_weights, counts))
        return outcomes
    if isinstance(design, DataLevelDesign):
        # every combination of kept counts k_i in 0..n_i, each Binomial(n_i, rate); a client with
        # k_i > 0 is selected once, with weight k_i / K
        outcomes = []
        sizes = [int(s) for s in design.sizes]
        for kept in itertools.product(*(range(s + 1) for s in sizes)):
            probability = math.prod(
                math.comb(s, k) * design.rate**k * (1.0 - design.rate) ** (s - k)
                for s, k in zip(sizes, kept, strict=True)
            )
            k_arr = np.array(kept, dtype=np.int64)
            outcomes.append(Outcome(probability, k_arr / design.divisor, (k_arr > 0).astype(np.int64)))
        return outcomes
    if isinstance(design, SystematicDesign):
        return systematic_outcomes(design)
    raise TypeError(type(design).__name__)


def systematic_outcomes(design: SystematicDesign) -> list[Outcome]:
    """One outcome per stretch of ``u`` between the segment boundaries taken modulo 1: there the
    owners of ``u, u + 1, ...`` on the line do not change (found here by scanning the segments);
    the clients with ``pi_i = 1`` are in every outcome."""
    n = design.num_clients
    pi = [float(design.inclusion[i]) for i in design.line]
    ends = list(itertools.accumulate(pi))
    starts = [e - x for e, x in zip(ends, pi, strict=True)]
    cuts = sorted({0.0, 1.0} | {e - math.floor(e) for e in ends})
    outcomes = []
    for lo, hi in itertools.pairwise(cuts):
        if hi - lo <= 1e-13:
            continue
        u = (lo + hi) / 2
        counts = np.zeros(n, dtype=np.int64)
        counts[design.always] = 1
        for k in range(design.line_draws):
            owner = next(j for j in range(len(pi)) if starts[j] <= u + k < ends[j])
            counts[int(design.line[owner])] += 1
        outcomes.append(Outcome(hi - lo, counts * design.weights, counts))
    return outcomes


class Enumerated(NamedTuple):
    mean: np.ndarray
    cov: np.ndarray
    p_included: np.ndarray
    var_sum: float
    expected_distinct: float
    var_distinct: float
    p_all_distinct: float


def enumerated_statistics(design: Any) -> Enumerated:
    outcomes = enumerate_outcomes(design)
    prob = np.array([o.probability for o in outcomes])
    assert math.isclose(prob.sum(), 1.0, abs_tol=1e-12)
    w = np.array([o.weights for o in outcomes])
    counts = np.array([o.counts for o in outcomes])
    mean = prob @ w
    centred = w - mean
    cov = (centred * prob[:, None]).T @ centred
    total = w.sum(axis=1)
    distinct = (counts > 0).sum(axis=1)
    expected_distinct = float(prob @ distinct)
    return Enumerated(
        mean=mean,
        cov=cov,
        p_included=prob @ (counts > 0),
        var_sum=float(prob @ (total - prob @ total) ** 2),
        expected_distinct=expected_distinct,
        var_distinct=float(prob @ (distinct - expected_distinct) ** 2),
        p_all_distinct=float(prob @ (counts.max(axis=1) <= 1)),
    )


ENUMERATION_FEDERATIONS = {
    "1-3": Federation.from_sizes([1, 3]),
    "2-2": Federation.from_sizes([2, 2]),
    "3-1-2": Federation.from_sizes([3, 1, 2]),
    "5-1-1-3": Federation.from_sizes([5, 1, 1, 3]),
    "4-3-2-1-uniform": Federation.from_sizes([4, 3, 2, 1], importance="uniform"),
    "float-importances": Federation.from_importances([0.15, 0.25, 0.6]),
}
ENUMERATION_CASES = [
    pytest.param(case, fed_id, m, id=f"{case}-{fed_id}-m{m}")
    for case in EXACT_CASES
    for fed_id, fed in ENUMERATION_FEDERATIONS.items()
    for m in range(1, fed.num_clients + 2)
    if feasible(case, fed, m)
]
TOL = 1e-12


@pytest.mark.parametrize(("case", "fed_id", "m"), ENUMERATION_CASES)
def test_exact_statistics_equal_enumeration(case: str, fed_id: str, m: int) -> None:
    """Every exact statistic equals its value over all outcomes, to 1e-12; unbiased samplers have
    E[w_i] = p_i (003, Def. 1) and fedavg-uniform E[w_i] = (m/n) p_i (000, eq. 3)."""
    federation = ENUMERATION_FEDERATIONS[fed_id]
    p, n = federation.importances, federation.num_clients
    sampler, state = make_case(case, federation, m)
    design = sampler.design(state)
    stats = exact_statistics(design, sampler.importances(state))
    truth = enumerated_statistics(design)

    # Unbiasedness, by enumeration. Float importances are rounded to integer masses by the
    # clustered samplers (2**-40 or 2**-30 resolution), hence the looser tolerance there.
    bias_tol = 1e-9 if federation.importance_masses is None else TOL
    if case in BIASED_CASES:
        np.testing.assert_allclose(truth.mean, m / n * p, rtol=0, atol=TOL)
        assert stats.biased == (m < n)  # with m = n every client is always in: no bias
    else:
        np.testing.assert_allclose(truth.mean, p, rtol=0, atol=bias_tol)
        assert not stats.biased

    off_diagonal = truth.cov.sum() - np.trace(truth.cov)
    np.testing.assert_allclose(stats.mean_weights, truth.mean, rtol=0, atol=TOL)
    np.testing.assert_allclose(stats.var_weights, np.diag(truth.cov), rtol=0, atol=TOL)
    np.testing.assert_allclose(stats.p_included, truth.p_included, rtol=0, atol=TOL)
    assert stats.offdiag_cov_sum == pytest.approx(off_diagonal, rel=0, abs=TOL)
    assert stats.var_sum_weights == pytest.approx(truth.var_sum, rel=0, abs=TOL)
    assert stats.expected_distinct == pytest.approx(truth.expected_distinct, rel=0, abs=TOL)
    assert stats.var_distinct is not None
    assert stats.var_distinct == pytest.approx(truth.var_distinct, rel=0, abs=TOL)
    assert stats.p_all_distinct is not None
    assert stats.p_all_distinct == pytest.approx(truth.p_all_distinct, rel=0, abs=TOL)
    if stats.alpha is not None:
        # Cov[w_i, w_j] = -alpha p_i p_j for every i != j (003, Section 2).
        expected = -stats.alpha * np.outer(p, p)
        mask = ~np.eye(n, dtype=bool)
        np.testing.assert_allclose(truth.cov[mask], expected[mask], rtol=0, atol=TOL)
    # alpha_effective is 003's eq. 24 (Property 1 solved for alpha).
    one_minus = 1.0 - float(np.sum(p**2))
    assert stats.alpha_effective == pytest.approx((np.trace(truth.cov) - truth.var_sum) / one_minus, abs=1e-10)
    # The full covariance matrix.
    np.testing.assert_allclose(weight_covariance(design, p), truth.cov, rtol=0, atol=TOL)


def test_enumeration_covers_every_case() -> None:
    """Each sampler with closed-form statistics is enumerated on several federations and values of m
    (learned distributions drawn without replacement have none: tests/samplers/test_unbiasedness.py
    enumerates their ordered draws instead)."""
    for case in EXACT_CASES:
        assert sum(1 for param in ENUMERATION_CASES if param.values[0] == case) >= 10


@pytest.mark.parametrize(
    "design",
    [
        RowDesign.from_probabilities(
            num_clients=3,
            indptr=np.array([0, 2, 5]),
            indices=np.array([0, 1, 0, 1, 2]),
            probabilities=np.array([0.3, 0.7, 0.2, 0.2, 0.6]),
            row_counts=np.array([2, 1]),
            draw_weights=np.array([0.5, 0.25, 1.0]),
        ),
        BernoulliDesign(inclusion=np.array([1.0, 0.5, 0.01, 0.3]), weights=np.array([1.0, 2.0, 3.0, 0.5])),
        FixedSizeDesign(num_sampled=2, weights=np.array([0.1, 0.5, 0.2, 0.7])),
    ],
    ids=["row-repeated-rows", "bernoulli", "fixed-size"],
)
def test_general_designs_equal_enumeration(design: Any) -> None:
    """Designs beyond the registered samplers (repeated rows, arbitrary weights) also match enumeration."""
    p = np.full(design.num_clients, 1.0 / design.num_clients)
    stats = exact_statistics(design, p)
    truth = enumerated_statistics(design)
    np.testing.assert_allclose(stats.mean_weights, truth.mean, rtol=0, atol=TOL)
    np.testing.assert_allclose(stats.var_weights, np.diag(truth.cov), rtol=0, atol=TOL)
    np.testing.assert_allclose(stats.p_included, truth.p_included, rtol=0, atol=TOL)
    assert stats.var_sum_weights == pytest.approx(truth.var_sum, abs=TOL)
    assert stats.var_distinct == pytest.approx(truth.var_distinct, abs=TOL)
    assert stats.p_all_distinct == pytest.approx(truth.p_all_distinct, abs=TOL)
    np.testing.assert_allclose(weight_covariance(design, p), truth.cov, rtol=0, atol=TOL)


# --- known values ----------------------------------------------------------------------------


def _stats(sampler: Any, federation: Federation, m: int) -> Any:
    state = sampler.init(federation, m)
    return exact_statistics(sampler.design(state), sampler.importances(state))


def test_md_probability_of_no_repeat_on_100_equal_clients() -> None:
    """MD, 100 equal clients, m = 10: P(all distinct) = 100! / (90! 100^10) ~ 0.628 (birthday problem)."""
    expected = float(math.prod(Fraction(100 - k, 100) for k in range(10)))
    assert expected == pytest.approx(0.6281565095552947, rel=1e-15)
    stats = _stats(MDSampler(), Federation.from_sizes([7] * 100), 10)
    assert stats.p_all_distinct == pytest.approx(expected, rel=1e-12)


def test_clustered_size_never_repeats_on_100_equal_clients() -> None:
    """Clustered-size on 100 equal clients, m = 10: the rows are disjoint, so P(all distinct) = 1."""
    stats = _stats(SizeClusteredSampler(), Federation.from_sizes([7] * 100), 10)
    assert stats.p_all_distinct == 1.0
    assert stats.expected_distinct == pytest.approx(10.0, abs=1e-12)
    assert stats.var_distinct == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(("n", "m", "size"), [(2, 1, 1), (10, 3, 5), (100, 10, 500), (7, 7, 2)])
def test_uniform_weight_sum_has_zero_variance_for_equal_importances(n: int, m: int, size: int) -> None:
    """Uniform sampling: Var[sum w_i] = 0 exactly when every p_i = 1/n (003, eq. 46)."""
    stats = _stats(UniformSampler(), Federation.from_sizes([size] * n), m)
    assert stats.var_sum_weights == 0.0
    uniform = _stats(UniformSampler(), Federation.from_sizes(list(range(1, n + 1)), importance="uniform"), m)
    assert uniform.var_sum_weights == 0.0


@settings(deadline=None, max_examples=60)
@given(sizes=st.lists(st.integers(1, 1000), min_size=2, max_size=20).filter(lambda s: len(set(s)) > 1), data=st.data())
def test_uniform_weight_sum_varies_for_unequal_importances(sizes: list[int], data: st.DataObject) -> None:
    """Uniform sampling with m < n and unequal p_i: Var[sum w_i] > 0, as 003's eq. 46 says."""
    n = len(sizes)
    m = data.draw(st.integers(1, n - 1))
    p = np.array(sizes) / sum(sizes)
    stats = _stats(UniformSampler(), Federation.from_sizes(sizes), m)
    assert stats.var_sum_weights > 0.0
    assert stats.var_sum_weights == pytest.approx((n - m) / (m * (n - 1)) * (n * np.sum(p**2) - 1), rel=1e-6)


RANDOM_FEDERATIONS = [pytest.param(seed, id=f"seed{seed}") for seed in (0, 1, 2)]


def _random_federation(seed: int) -> tuple[Federation, int]:
    """12 clients with sizes in [1, 50), and m = 3 (m p_i <= 1, so Poisson sampling is feasible)."""
    federation = Federation.from_sizes(random_sizes(seed, 12))
    assert 3 * federation.importances.max() <= 1
    return federation, 3


@pytest.mark.parametrize("seed", RANDOM_FEDERATIONS)
def test_alpha_of_each_scheme(seed: int) -> None:
    """alpha: MD 1/m (003, eq. 31), uniform (n-m)/(m(n-1)) (eq. 44), Poisson and binomial 0 (eqs. 49, 54),
    full 0; clustered has no alpha (its covariance is not -alpha p_i p_j)."""
    federation, m = _random_federation(seed)
    n = federation.num_clients
    assert _stats(MDSampler(), federation, m).alpha == pytest.approx(1 / m, rel=1e-12)
    assert _stats(UniformSampler(), federation, m).alpha == pytest.approx((n - m) / (m * (n - 1)), rel=1e-12)
    assert _stats(PoissonSampler(), federation, m).alpha == 0.0
    assert _stats(BinomialSampler(), federation, m).alpha == 0.0
    assert _stats(SizeClusteredSampler(), federation, m).alpha is None
    assert _stats(ClusteredSampler(rows=mixed_rows(federation, m)), federation, m).alpha is None
    # FedAvg's biased variant: Cov = (P(i,j in S) - (m/n)^2) p_i p_j with 003's eq. 42.
    expected = m * (n - m) / (n * n * (n - 1))
    assert _stats(FedAvgUniformSampler(), federation, m).alpha == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", RANDOM_FEDERATIONS)
def test_table_1_closed_forms(seed: int) -> None:
    """Var[w_i] and Var[sum w_i] of 003's Table 1 and App. A: MD eqs. 29, 32; uniform 36, 46;
    Poisson 48, 50; binomial 53, 55; full participation 0.

    Table 1 prints MD's variance as -p^2/m + p/m^2, a typo: App. A, eq. 29 gives p (1 - p) / m.
    """
    federation, m = _random_federation(seed)
    p, n = federation.importances, federation.num_clients
    sum_p2 = float(np.sum(p**2))

    md = _stats(MDSampler(), federation, m)
    np.testing.assert_allclose(md.var_weights, p * (1 - p) / m, rtol=1e-12)  # eq. 29
    assert md.var_sum_weights == pytest.approx(0.0, abs=1e-14)  # eq. 32

    uniform = _stats(UniformSampler(), federation, m)
    np.testing.assert_allclose(uniform.var_weights, (n / m - 1) * p**2, rtol=1e-12)  # eq. 36
    eq_46 = (n - m) / (m * (n - 1)) * (n * sum_p2 - 1)
    assert uniform.var_sum_weights == pytest.approx(eq_46, rel=1e-10)

    poisson = _stats(PoissonSampler(), federation, m)
    np.testing.assert_allclose(poisson.var_weights, p * (1 - m * p) / m, rtol=1e-12)  # eq. 48
    assert poisson.var_sum_weights == pytest.approx(1 / m - sum_p2, rel=1e-10)  # eq. 50

    binomial = _stats(BinomialSampler(), federation, m)
    np.testing.assert_allclose(binomial.var_weights, (n - m) / m * p**2, rtol=1e-12)  # eq. 53
    assert binomial.var_sum_weights == pytest.approx((n - m) / m * sum_p2, rel=1e-10)  # eq. 55

    full = _stats(FullSampler(), federation, m)
    assert np.all(full.var_weights == 0)
    assert full.var_sum_weights == 0.0
    assert full.alpha == 0.0
    assert full.expected_distinct == n


@pytest.mark.parametrize("seed", RANDOM_FEDERATIONS)
def test_sigma_and_gamma(seed: int) -> None:
    """003, eq. 12: Sigma_MD = (1 - sum p^2)/m, gamma_MD = 1/m; eq. 13: Sigma_U = (n/m - 1) sum p^2,
    gamma_U = (1 + 1/(n-1)) Sigma_U."""
    federation, m = _random_federation(seed)
    p, n = federation.importances, federation.num_clients
    sum_p2 = float(np.sum(p**2))
    md = _stats(MDSampler(), federation, m)
    assert md.sigma == pytest.approx((1 - sum_p2) / m, rel=1e-12)
    assert md.gamma == pytest.approx(1 / m, rel=1e-12)
    uniform = _stats(UniformSampler(), federation, m)
    assert uniform.sigma == pytest.approx((n / m - 1) * sum_p2, rel=1e-12)
    assert uniform.gamma == pytest.approx((1 + 1 / (n - 1)) * uniform.sigma, rel=1e-12)


@pytest.mark.parametrize("seed", RANDOM_FEDERATIONS)
def test_property_1(seed: int) -> None:
    """003, Property 1 (eq. 9): Var[sum w_i] = sum Var[w_i] - alpha (1 - sum p_i^2) for every scheme with an alpha."""
    federation, m = _random_federation(seed)
    one_minus = 1 - float(np.sum(federation.importances**2))
    for sampler in (MDSampler(), UniformSampler(), PoissonSampler(), BinomialSampler()):
        stats = _stats(sampler, federation, m)
        assert stats.alpha is not None
        assert 0 <= stats.alpha <= 1
        assert stats.var_sum_weights == pytest.approx(stats.sigma - stats.alpha * one_minus, abs=1e-14)


@pytest.mark.parametrize("seed", RANDOM_FEDERATIONS)
def test_number_of_clients(seed: int) -> None:
    """Distinct clients N: MD E[N] = n - sum (1 - p_i)^m (003, eq. 33) with P(i in S) = 1 - (1 - p_i)^m
    (000, eq. 20); uniform N = m; Poisson E[N] = m, Var[N] = m - m^2 sum p^2 (003, eq. 51);
    binomial E[N] = m, Var[N] = m - m^2/n (eq. 56)."""
    federation, m = _random_federation(seed)
    p, n = federation.importances, federation.num_clients
    md = _stats(MDSampler(), federation, m)
    np.testing.assert_allclose(md.p_included, 1 - (1 - p) ** m, rtol=1e-12)
    assert md.expected_distinct == pytest.approx(n - np.sum((1 - p) ** m), rel=1e-12)
    assert md.expected_distinct <= m
    uniform = _stats(UniformSampler(), federation, m)
    np.testing.assert_allclose(uniform.p_included, m / n, rtol=1e-12)  # eq. 35
    assert (uniform.expected_distinct, uniform.var_distinct) == (m, 0.0)
    poisson = _stats(PoissonSampler(), federation, m)
    np.testing.assert_allclose(poisson.p_included, m * p, rtol=1e-12)
    assert poisson.expected_distinct == pytest.approx(m, rel=1e-12)
    assert poisson.var_distinct == pytest.approx(m - m**2 * np.sum(p**2), rel=1e-12)
    binomial = _stats(BinomialSampler(), federation, m)
    assert binomial.expected_distinct == pytest.approx(m, rel=1e-12)
    assert binomial.var_distinct == pytest.approx(m - m**2 / n, rel=1e-12)


def test_clustered_variance_follows_000_eq_16() -> None:
    """Clustered: Var[w_i] = (1/m^2) sum_k r_ki (1 - r_ki) (000, eq. 16), P(i in S) = 1 - prod_k (1 - r_ki) (eq. 22)."""
    federation = Federation.from_sizes([9, 1, 4, 4, 2, 30, 5])
    m = 4
    rows = mixed_rows(federation, m)
    stats = _stats(ClusteredSampler(rows=rows), federation, m)
    np.testing.assert_allclose(stats.var_weights, (rows * (1 - rows)).sum(axis=0) / m**2, rtol=1e-12)
    np.testing.assert_allclose(stats.p_included, 1 - np.prod(1 - rows, axis=0), rtol=1e-12)


def test_weight_covariance_is_consistent_with_the_statistics() -> None:
    """weight_covariance is symmetric, its diagonal is Var[w_i] and its off-diagonal sum is offdiag_cov_sum."""
    federation = Federation.from_sizes(random_sizes(5, 9))
    for case in EXACT_CASES:
        if not feasible(case, federation, 3):
            continue
        sampler, state = make_case(case, federation, 3)
        design = sampler.design(state)
        stats = exact_statistics(design, federation.importances)
        cov = weight_covariance(design, federation.importances)
        np.testing.assert_allclose(cov, cov.T, rtol=0, atol=1e-15)
        np.testing.assert_array_equal(np.diag(cov), stats.var_weights)
        assert cov.sum() - np.trace(cov) == pytest.approx(stats.offdiag_cov_sum, abs=1e-13)
        assert cov.sum() == pytest.approx(stats.var_sum_weights, abs=1e-13)


def test_statistics_reject_unknown_designs() -> None:
    with pytest.raises(TypeError, match="'design' parameter of exact_statistics must be a sampling design"):
        exact_statistics(object(), np.array([1.0]))


@pytest.mark.parametrize(("n", "m"), [(400, 1), (400, 7), (60, 25)])
def test_var_distinct_of_md_equals_the_pairwise_sum(n: int, m: int) -> None:
    """``Var[N]`` of MD through the binomial expansion equals the direct sum over pairs of clients,
    ``sum_i P_i (1 - P_i) + sum_{i != j} [(1 - r_i - r_j)^m - (1 - r_i)^m (1 - r_j)^m]``."""
    sizes = np.random.default_rng(n + m).integers(1, 50, size=n)
    federation = Federation.from_sizes(sizes)
    sampler = MDSampler()
    stats = exact_statistics(sampler.design(sampler.init(federation, num_sampled=m)), federation.importances)
    r = federation.importances
    excluded = (1 - r) ** m
    both = (1 - r[:, None] - r[None, :]) ** m - np.outer(excluded, excluded)
    np.fill_diagonal(both, 0.0)
    direct = float(np.sum(excluded * (1 - excluded)) + both.sum())
    assert stats.var_distinct == pytest.approx(direct, rel=1e-9, abs=1e-12)
