"""Rounds for a budget and noise for a budget are the inverses of the epsilon after T rounds; properties
that hold for every design: epsilon grows with T, falls with z, and is 0 for a client never included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import Federation, make_sampler
from fedsample.designs import BernoulliDesign
from fedsample.privacy import design_exposure, exposure_of, noise_for_budget, privacy_cost, rounds_for_budget

pytest.importorskip("dp_accounting")

DELTA = 1e-5
SIZES = [10, 10, 20, 40, 80]


def exposure(name: str) -> object:
    sampler = make_sampler(name)
    return exposure_of(sampler, sampler.init(Federation.from_sizes(SIZES), 2))


def worst(exposure: object, z: float, rounds: int, accountant: str = "pld") -> float:
    return privacy_cost(exposure, noise_multiplier=z, rounds=rounds, delta=DELTA, accountant=accountant).epsilon_max


@pytest.mark.parametrize(
    ("name", "accountant", "z"), [("poisson", "rdp", 6.0), ("md", "pld", 6.0), ("uniform", "pld", 3.0)]
)
def test_rounds_for_budget_is_the_last_t_within_the_budget(name: str, accountant: str, z: float) -> None:
    budget = 2.0
    chosen = exposure(name)
    rounds = rounds_for_budget(chosen, noise_multiplier=z, epsilon=budget, delta=DELTA, accountant=accountant)
    assert rounds > 0
    assert worst(chosen, z, rounds, accountant) <= budget < worst(chosen, z, rounds + 1, accountant)


def test_rounds_for_budget_is_zero_when_one_round_spends_more() -> None:
    assert rounds_for_budget(exposure("full"), noise_multiplier=0.5, epsilon=0.1, delta=DELTA) == 0


@pytest.mark.parametrize("name", ["poisson", "clustered-size"])
def test_noise_for_budget_is_the_least_z_within_the_budget(name: str) -> None:
    budget, rounds = 1.5, 30
    chosen = exposure(name)
    z = noise_for_budget(chosen, rounds=rounds, epsilon=budget, delta=DELTA)
    assert worst(chosen, z, rounds) <= budget < worst(chosen, z * (1 - 2e-3), rounds)


def test_the_budget_of_a_heterogeneous_design_is_set_by_its_most_exposed_client() -> None:
    """A client of a high rate and a small weight against one of a lower rate and the largest weight: the
    worst client depends on z and T, and both solvers check every group."""
    design = BernoulliDesign(inclusion=np.array([0.9, 0.05, 0.2]), weights=np.array([0.2, 1.0, 0.6]))
    chosen = design_exposure(design)
    rounds = rounds_for_budget(chosen, noise_multiplier=2.0, epsilon=1.0, delta=DELTA)
    assert worst(chosen, 2.0, rounds) <= 1.0 < worst(chosen, 2.0, rounds + 1)
    z = noise_for_budget(chosen, rounds=50, epsilon=1.0, delta=DELTA)
    assert worst(chosen, z, 50) <= 1.0 < worst(chosen, z * (1 - 2e-3), 50)


@settings(max_examples=12)
@given(
    rate=st.floats(0.01, 0.5),
    weight=st.floats(0.1, 1.0),
    z=st.floats(0.7, 4.0),
    rounds=st.integers(1, 40),
    more=st.integers(1, 40),
)
def test_epsilon_grows_with_rounds_and_falls_with_noise(
    rate: float, weight: float, z: float, rounds: int, more: int
) -> None:
    chosen = design_exposure(BernoulliDesign(inclusion=np.array([rate, 0.3, 0.0]), weights=np.array([weight, 1, 1])))
    base = privacy_cost(chosen, noise_multiplier=z, rounds=rounds, delta=DELTA)
    longer = privacy_cost(chosen, noise_multiplier=z, rounds=rounds + more, delta=DELTA)
    noisier = privacy_cost(chosen, noise_multiplier=z * 1.5, rounds=rounds, delta=DELTA)
    assert np.all(longer.epsilon >= base.epsilon)
    assert np.all(noisier.epsilon <= base.epsilon)
    assert base.epsilon[2] == 0.0  # never included: nothing to protect, nothing spent
    assert base.epsilon[0] > 0.0


@settings(max_examples=6)
@given(sizes=st.lists(st.integers(1, 30), min_size=2, max_size=6), rounds=st.integers(1, 20))
def test_a_bound_that_reveals_the_multiplicity_is_never_below_the_exact_subsampled_gaussian(
    sizes: list[int], rounds: int
) -> None:
    """Systematic sampling's bound (inclusion revealed) against Poisson sampling of the same rates and weights."""
    federation = Federation.from_sizes(sizes)
    systematic = make_sampler("systematic")
    state = systematic.init(federation, 1)
    design = systematic.design(state)
    revealed = privacy_cost(design_exposure(design), noise_multiplier=1.5, rounds=rounds, delta=DELTA)
    poisson = BernoulliDesign(inclusion=design.inclusion, weights=design.weights)
    exact = privacy_cost(design_exposure(poisson), noise_multiplier=1.5, rounds=rounds, delta=DELTA)
    assert np.all(revealed.epsilon >= exact.epsilon * (1 - 1e-3))
