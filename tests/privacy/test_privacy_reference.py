"""Uniform Poisson sampling: the accountant's epsilon is dp-accounting's and Opacus's published one.

With every client of one size, ``poisson`` includes each client with probability ``q = m / n`` and
weight ``1 / (n q)``, which is the noise scale ``s``: every client's noise multiplier is ``z``, so each
client's epsilon must be that of DP-SGD's Poisson-subsampled Gaussian at ``(q, z, T, delta)``, as
dp-accounting's own accountants (at their default settings) and Opacus's RDP and PRV accountants
compute it, within 1%.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, make_sampler
from fedsample.privacy import exposure_of, privacy_cost

dp = pytest.importorskip("dp_accounting")

CASES = [
    pytest.param(0.01, 1.0, 1000, 1e-5, id="q0.01-z1-T1000"),
    pytest.param(0.1, 1.0, 100, 1e-5, id="q0.1-z1-T100"),
    pytest.param(0.02, 1.5, 500, 1e-6, id="q0.02-z1.5-T500-d1e-6"),
]
SLOW_CASES = [
    pytest.param(0.05, 0.8, 200, 1e-5, id="q0.05-z0.8-T200"),
    pytest.param(0.001, 0.6, 5000, 1e-5, id="q0.001-z0.6-T5000"),
    pytest.param(0.004, 2.0, 10000, 1e-7, id="q0.004-z2-T10000-d1e-7"),
]
ALL_CASES = CASES + [pytest.param(*case.values, id=case.id, marks=pytest.mark.slow) for case in SLOW_CASES]


def uniform_poisson(q: float, n: int = 1000) -> object:
    sampler = make_sampler("poisson")
    return exposure_of(sampler, sampler.init(Federation.from_sizes([7] * n), round(q * n)))


def published(accountant: object, q: float, z: float, rounds: int, delta: float) -> float:
    accountant.compose(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(z)), rounds)  # type: ignore[attr-defined]
    return float(accountant.get_epsilon(delta))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("q", "z", "rounds", "delta"), ALL_CASES)
def test_every_client_has_dp_accountings_pld_epsilon(q: float, z: float, rounds: int, delta: float) -> None:
    cost = privacy_cost(uniform_poisson(q), noise_multiplier=z, rounds=rounds, delta=delta)
    expected = published(dp.pld.PLDAccountant(), q, z, rounds, delta)
    np.testing.assert_allclose(cost.epsilon, expected, rtol=0.01)
    # Both are pessimistic discretizations of the same loss: ours is never below by more than rounding.
    assert cost.epsilon_max >= expected * (1 - 1e-3)


@pytest.mark.parametrize(("q", "z", "rounds", "delta"), ALL_CASES)
def test_the_rdp_option_is_dp_accountings_rdp_epsilon(q: float, z: float, rounds: int, delta: float) -> None:
    cost = privacy_cost(uniform_poisson(q), noise_multiplier=z, rounds=rounds, delta=delta, accountant="rdp")
    np.testing.assert_allclose(cost.epsilon, published(dp.rdp.RdpAccountant(), q, z, rounds, delta), rtol=1e-9)


@pytest.mark.parametrize(("q", "z", "rounds", "delta"), ALL_CASES)
def test_opacus_rdp_and_prv_accountants_agree_within_one_percent(q: float, z: float, rounds: int, delta: float) -> None:
    accountants = pytest.importorskip("opacus.accountants")
    exposure = uniform_poisson(q)
    rdp = accountants.RDPAccountant()
    rdp.history = [(z, q, rounds)]
    prv = accountants.PRVAccountant()
    prv.history = [(z, q, rounds)]
    ours_rdp = privacy_cost(exposure, noise_multiplier=z, rounds=rounds, delta=delta, accountant="rdp")
    ours_pld = privacy_cost(exposure, noise_multiplier=z, rounds=rounds, delta=delta)
    assert ours_rdp.epsilon_max == pytest.approx(rdp.get_epsilon(delta), rel=0.01)
    assert ours_pld.epsilon_max == pytest.approx(prv.get_epsilon(delta), rel=0.01)
