"""The epsilon a run has spent after each round: one group's privacy loss composed round by round.

:func:`epsilon_per_round` gives, for the clients of one group of an
:class:`~fedsample.privacy.exposure.Exposure`, the epsilon at ``delta`` after rounds ``1..T``, by the
same dp-accounting events as :func:`fedsample.privacy.privacy_cost`, composed one round at a time: a
privacy loss distribution (PLD) is convolved with one round's at each step (value discretization
1e-3, pessimistic, so each value is an upper bound), a Renyi DP curve is ``t`` times one round's.
:func:`spent_per_round` does it for the client that is the most exposed after ``T`` rounds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.privacy._dp import dp_accounting, quiet
from fedsample.privacy.accountant import PrivacyCost, privacy_cost
from fedsample.privacy.events import COARSE, revealed_pld, revealed_rdp
from fedsample.privacy.exposure import GAUSSIAN, MULTIPLICITY, POISSON, WITHOUT_REPLACEMENT, Exposure

__all__ = ["epsilon_per_round", "spent_per_round"]


def spent_per_round(
    exposure: Exposure, *, noise_multiplier: float, rounds: int, delta: float, accountant: str = "pld"
) -> tuple[FloatArray, PrivacyCost]:
    """The epsilon of the client most exposed after ``rounds`` rounds, after each round ``1..rounds``,
    and the :class:`~fedsample.privacy.PrivacyCost` after ``rounds`` (every client's epsilon)."""
    cost = privacy_cost(exposure, noise_multiplier=noise_multiplier, rounds=rounds, delta=delta, accountant=accountant)
    group = int(exposure.client_group[cost.worst_client]) if rounds else -1
    if group < 0:
        return np.zeros(rounds), cost
    curve = epsilon_per_round(
        exposure, group, noise_multiplier=noise_multiplier, rounds=rounds, delta=delta, accountant=accountant
    )
    # The refined value at T (the curve's is coarser, and every value an upper bound): no earlier round spends more.
    curve = np.minimum(curve, cost.epsilon_max)
    curve[-1] = cost.epsilon_max
    return np.maximum.accumulate(curve), cost


def epsilon_per_round(
    exposure: Exposure, group: int, *, noise_multiplier: float, rounds: int, delta: float, accountant: str = "pld"
) -> FloatArray:
    """The epsilon at ``delta`` of the clients of ``group`` after each round ``1..rounds``."""
    rate, sensitivity = float(exposure.rates[group]), float(exposure.sensitivities[group])
    if rounds == 0 or rate == 0.0 or sensitivity == 0.0:
        return np.zeros(rounds)
    sigma = noise_multiplier / sensitivity
    dp = dp_accounting()
    with quiet():
        if exposure.kind in (MULTIPLICITY, WITHOUT_REPLACEMENT):
            law, tail = exposure.multiplicities[group], exposure.tails[group]
            if accountant == "rdp":
                revealed = _rdp_curve(dp, revealed_rdp(dp, law, tail, sigma), rounds, delta)
            else:
                revealed = _pld_curve(revealed_pld(dp, law, tail, sigma, COARSE), rounds, delta)
            if exposure.kind == MULTIPLICITY:
                return revealed
            n, m = exposure.population, exposure.sample_size
            replaced = sensitivity + 1.0 if m < n else 2.0 * sensitivity
            event = dp.SampledWithoutReplacementDpEvent(n, m, dp.GaussianDpEvent(noise_multiplier / replaced))
            return np.minimum(revealed, _rdp_curve(dp, _one_round_rdp(dp, event, replace=True), rounds, delta))
        if exposure.kind not in (POISSON, GAUSSIAN):
            raise ValueError(f"unknown exposure kind {exposure.kind!r}")
        q = rate if exposure.kind == POISSON else 1.0
        if accountant == "rdp":
            event = dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)) if q < 1.0 else dp.GaussianDpEvent(sigma)
            return _rdp_curve(dp, _one_round_rdp(dp, event, replace=False), rounds, delta)
        interval = max(COARSE, 1e-4 * 0.5 / sigma**2)
        pld = dp.pld.privacy_loss_distribution.from_gaussian_mechanism(
            sigma, value_discretization_interval=interval, sampling_prob=q
        )
        return _pld_curve(pld, rounds, delta)


def _pld_curve(one: Any, rounds: int, delta: float) -> FloatArray:
    out, composed = np.zeros(rounds), one
    for t in range(rounds):
        if t:
            composed = composed.compose(one)
        out[t] = float(composed.get_epsilon_for_delta(delta))
    return out


def _one_round_rdp(dp: Any, event: Any, *, replace: bool) -> np.ndarray:
    relation = dp.NeighboringRelation.REPLACE_ONE if replace else dp.NeighboringRelation.ADD_OR_REMOVE_ONE
    accountant = dp.rdp.RdpAccountant(neighboring_relation=relation)
    accountant.compose(event, 1)
    return np.asarray(accountant.rdp, dtype=np.float64)


def _rdp_curve(dp: Any, one: np.ndarray, rounds: int, delta: float) -> FloatArray:
    module = dp.rdp.rdp_privacy_accountant
    orders = np.asarray(module.DEFAULT_RDP_ORDERS, dtype=np.float64)
    out = np.zeros(rounds)
    for t in range(rounds):
        epsilon, _ = module.compute_epsilon(orders, (t + 1) * one, delta)
        out[t] = float(epsilon) if math.isfinite(epsilon) else math.inf
    return out
