"""Heterogeneous designs: each client's epsilon is a direct dp-accounting computation on its own rate,
sensitivity and multiplicity law, written here from the design's definition (not from the package's
grouping); the noise the mechanism adds; the grouping and its rounding (an upper bound)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from fedsample import Federation, make_sampler
from fedsample.designs import BernoulliDesign, FullDesign, SystematicDesign
from fedsample.privacy import design_exposure, exposure_of, noise_std, privacy_cost

dp = pytest.importorskip("dp_accounting")
plds = dp.pld.privacy_loss_distribution

Z, ROUNDS, DELTA = 2.5, 40, 1e-5
# The revealed mixtures are discretized at 1e-3 here: the rounding adds about 0.2 * 1e-3 * sqrt(40) ~ 0.001.
INTERVAL = 1e-3


def direct_poisson(rate: float, sigma: float) -> float:
    accountant = dp.pld.PLDAccountant()
    accountant.compose(dp.PoissonSampledDpEvent(rate, dp.GaussianDpEvent(sigma)), ROUNDS)
    return float(accountant.get_epsilon(DELTA))


def direct_revealed(law: list[float], sigma: float) -> float:
    """The mechanism that reveals the multiplicity k (law[k]) and adds N(0, sigma^2) to k times a unit shift."""
    mixture, weight = plds.identity(INTERVAL), law[0]
    for k, mass in enumerate(law[1:], start=1):
        if mass > 0:
            component = plds.from_gaussian_mechanism(sigma / k, value_discretization_interval=INTERVAL)
            mixture = mixture.compute_mixture(component, weight / (weight + mass))
            weight += mass
    return float(mixture.self_compose(ROUNDS).get_epsilon_for_delta(DELTA))


def poisson_binomial(rates: list[float]) -> list[float]:
    """P(K = k) for a sum of independent Bernoulli(rates), by enumerating every outcome."""
    law = [0.0] * (len(rates) + 1)
    for outcome in itertools.product((0, 1), repeat=len(rates)):
        law[sum(outcome)] += math.prod(r if x else 1 - r for r, x in zip(rates, outcome, strict=True))
    return law


def test_independent_inclusions_each_client_its_own_rate_and_weight() -> None:
    q = np.array([0.02, 0.05, 0.05, 0.1, 0.3, 0.0])
    w = np.array([1.0, 0.5, 1.0, 0.25, 0.8, 2.0])  # the last client is never included: no part of s
    exposure = design_exposure(BernoulliDesign(inclusion=q, weights=w))
    assert exposure.scale == 1.0
    cost = privacy_cost(exposure, noise_multiplier=Z, rounds=ROUNDS, delta=DELTA)
    expected = [direct_poisson(q[i], Z / w[i]) for i in range(5)] + [0.0]
    np.testing.assert_allclose(cost.epsilon, expected, rtol=0.01)
    assert cost.worst_client == 4


def test_md_is_a_binomial_multiplicity_per_client() -> None:
    sizes = [1, 2, 3, 4, 10]
    sampler = make_sampler("md")
    exposure = exposure_of(sampler, sampler.init(Federation.from_sizes(sizes), 3))
    assert exposure.scale == pytest.approx(1 / 3)  # each draw weighs 1/m
    cost = privacy_cost(exposure, noise_multiplier=Z, rounds=ROUNDS, delta=DELTA)
    expected = [direct_revealed(list(stats.binom.pmf(range(4), 3, n / 20)), Z) for n in sizes]
    np.testing.assert_allclose(cost.epsilon, expected, rtol=0.01)


def test_clustered_is_a_poisson_binomial_multiplicity_per_client() -> None:
    rows = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]])  # each column sums to m p_i = 0.5
    sampler = make_sampler("clustered", rows=rows.tolist())
    state = sampler.init(Federation.from_sizes([5, 5, 5, 5]), 2)
    exposure = exposure_of(sampler, state)
    weights = sampler.design(state).draw_weights
    cost = privacy_cost(exposure, noise_multiplier=Z, rounds=ROUNDS, delta=DELTA)
    expected = [
        direct_revealed(poisson_binomial(rows[:, i].tolist()), Z * exposure.scale / weights[i]) for i in range(4)
    ]
    np.testing.assert_allclose(cost.epsilon, expected, rtol=0.01)
    # Clients 0 and 3 share their law (0.4 and 0.1): one group, one computation.
    assert cost.epsilon[0] == cost.epsilon[3]
    assert exposure.num_groups == 2


def test_without_replacement_is_the_smaller_of_the_wor_rdp_and_the_revealed_bound() -> None:
    sizes = [1, 2, 3, 4]
    sampler = make_sampler("uniform")
    exposure = exposure_of(sampler, sampler.init(Federation.from_sizes(sizes), 2))
    cost = privacy_cost(exposure, noise_multiplier=Z, rounds=ROUNDS, delta=DELTA)
    weight = np.array(sizes) / 10 * 4 / 2  # (n / m) p_i
    relative = weight / weight.max()
    for i in range(4):
        rdp = dp.rdp.RdpAccountant(neighboring_relation=dp.NeighboringRelation.REPLACE_ONE)
        # Replace-one: i's term against the term of a client it displaces, (w_i + s) C apart.
        rdp.compose(dp.SampledWithoutReplacementDpEvent(4, 2, dp.GaussianDpEvent(Z / (relative[i] + 1))), ROUNDS)
        revealed = direct_revealed([0.5, 0.5], Z / relative[i])
        assert cost.epsilon[i] == pytest.approx(min(rdp.get_epsilon(DELTA), revealed), rel=0.01)


def test_full_participation_and_systematic_sampling() -> None:
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    full = privacy_cost(design_exposure(FullDesign(weights=weights)), noise_multiplier=Z, rounds=ROUNDS, delta=DELTA)
    gaussian = [dp.pld.PLDAccountant() for _ in weights]
    for accountant, w in zip(gaussian, weights, strict=True):
        accountant.compose(dp.GaussianDpEvent(Z * 0.4 / w), ROUNDS)
    np.testing.assert_allclose(full.epsilon, [a.get_epsilon(DELTA) for a in gaussian], rtol=0.01)
    pi = np.array([0.5, 0.5, 0.25, 0.75])
    design = SystematicDesign(inclusion=pi, weights=0.25 / pi, order=np.arange(4))
    systematic = privacy_cost(design_exposure(design), noise_multiplier=Z, rounds=ROUNDS, delta=DELTA)
    scale = (0.25 / pi).max()
    expected = [direct_revealed([1 - p, p], Z * scale / (0.25 / p)) for p in pi]
    np.testing.assert_allclose(systematic.epsilon, expected, rtol=0.01)


def test_the_noise_is_z_c_s_and_a_clients_sensitivity_its_weight_times_c() -> None:
    q = np.array([0.1, 0.2, 0.4])
    w = np.array([0.5, 2.0, 1.0])
    exposure = design_exposure(BernoulliDesign(inclusion=q, weights=w))
    assert noise_std(exposure, noise_multiplier=0.8, clip_norm=3.0) == pytest.approx(0.8 * 3.0 * 2.0)
    np.testing.assert_allclose(exposure.client_sensitivities(3.0), w * 3.0)
    # No client's one-inclusion multiplier is below z: the noise is calibrated to the largest weight.
    assert np.all(exposure.sensitivities <= 1.0)


def test_many_distinct_rates_are_rounded_up_to_a_bound_that_keeps_the_worst_client_exact() -> None:
    sampler = make_sampler("poisson")
    state = sampler.init(Federation.from_sizes(list(range(1, 41))), 8)
    exact = privacy_cost(exposure_of(sampler, state, max_groups=64), noise_multiplier=Z, rounds=10, delta=DELTA)
    rounded_exposure = exposure_of(sampler, state, max_groups=5)
    assert rounded_exposure.num_groups <= 5
    assert rounded_exposure.rounding > 0
    rounded = privacy_cost(rounded_exposure, noise_multiplier=Z, rounds=10, delta=DELTA)
    assert np.all(rounded.epsilon >= exact.epsilon * (1 - 1e-3))
    # The grid ends at the largest rate, so the most exposed client keeps its exact epsilon.
    assert rounded.epsilon[39] == pytest.approx(exact.epsilon[39], rel=1e-3) == exact.epsilon_max


def test_ten_thousand_clients_of_few_sizes_need_one_computation_per_size() -> None:
    sizes = np.tile([100, 250, 500, 750, 1000], 2000)
    sampler = make_sampler("poisson")
    exposure = exposure_of(sampler, sampler.init(Federation.from_sizes(sizes), 100))
    assert exposure.num_clients == 10_000
    assert exposure.num_groups == 5
    assert exposure.rounding == 0
    cost = privacy_cost(exposure, noise_multiplier=1.0, rounds=100, delta=DELTA)
    assert np.array_equal(cost.epsilon[:5], cost.epsilon[5:10])
    assert cost.worst_client == 4
    assert np.all(np.diff(cost.epsilon[:5]) > 0)


def test_a_round_of_more_than_4096_draws_keeps_the_likely_multiplicities_and_counts_the_rest_as_lost() -> None:
    sampler = make_sampler("md")
    exposure = exposure_of(sampler, sampler.init(Federation.from_sizes([1] * 1000), 5000))
    (law,), (tail,) = exposure.multiplicities, exposure.tails
    assert 0 <= tail < 1e-15
    assert law.size < 100
    assert law @ np.arange(law.size) == pytest.approx(5.0, rel=1e-9)  # Binomial(5000, 1/1000) has mean 5
    cost = privacy_cost(exposure, noise_multiplier=20.0, rounds=5, delta=DELTA)
    assert 0 < cost.epsilon_max < math.inf
