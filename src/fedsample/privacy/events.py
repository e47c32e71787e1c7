"""One group's epsilon after ``T`` rounds, computed by dp-accounting's accountants.

Each kind of :class:`~fedsample.privacy.exposure.Exposure` is one dp-accounting event, composed
``T`` times (``sigma`` is the group's noise multiplier ``z / sensitivity``):

* ``poisson``: ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``, add/remove one record;
* ``gaussian``: ``GaussianDpEvent(sigma)``;
* ``without-replacement``: the smaller of two bounds. ``SampledWithoutReplacementDpEvent(n, m, ...)``
  under replace-one, which dp-accounting's RDP accountant computes (Wang, Balle and Kasiviswanathan
  2019, Thm. 27; its PLD accountant has no such event) and which covers a zeroed update, at the
  replace-one sensitivity; and the ``multiplicity`` bound with ``k`` Bernoulli(m / n);
* ``multiplicity``: the mixture over ``k`` of the Gaussian with shift ``k`` (``k = 0``: no loss), the
  privacy loss of a mechanism that reveals ``k``. PLD: the mixture of dp-accounting's Gaussian
  privacy loss distributions (``PrivacyLossDistribution.compute_mixture``), composed ``T`` times; RDP:
  ``log E[exp((a - 1) a k^2 / (2 sigma^2))] / (a - 1)`` at dp-accounting's orders, converted by its
  ``compute_epsilon``.

PLD epsilons are computed with a value discretization of 1e-3, and again at a finer one when the
(pessimistic) rounding could add more than 0.5% to the first (it adds about ``0.2 interval sqrt(T)``,
measured against dp-accounting at 3e-5); a discretization never finer than 1e-4 of the largest mean
loss keeps the grids small for tiny noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsample.errors import FedsampleError
from fedsample.privacy._dp import dp_accounting, quiet
from fedsample.privacy.exposure import GAUSSIAN, MULTIPLICITY, POISSON, WITHOUT_REPLACEMENT, Exposure

__all__ = ["group_epsilon", "revealed_pld", "revealed_rdp"]

COARSE, FINEST, RELATIVE_ERROR = 1e-3, 1e-5, 0.005
# Multiplicities less likely than this are counted as a total loss (their mass is added to delta).
NEGLIGIBLE = 1e-16


def group_epsilon(
    exposure: Exposure, group: int, *, noise_multiplier: float, rounds: int, delta: float, accountant: str
) -> float:
    """Epsilon at ``delta`` of the clients of ``group`` after ``rounds`` rounds at noise multiplier ``z``."""
    rate, sensitivity = float(exposure.rates[group]), float(exposure.sensitivities[group])
    if rounds == 0 or rate == 0.0 or sensitivity == 0.0:
        return 0.0
    sigma = noise_multiplier / sensitivity
    dp = dp_accounting()
    with quiet():
        if exposure.kind in (MULTIPLICITY, WITHOUT_REPLACEMENT):
            law, tail = exposure.multiplicities[group], exposure.tails[group]
            if accountant == "rdp":
                revealed = _multiplicity_rdp(dp, law, tail, sigma, rounds, delta)
            else:
                revealed = _refined(
                    lambda interval: _multiplicity_pld(dp, law, tail, sigma, rounds, delta, interval), rounds
                )
            if exposure.kind == MULTIPLICITY:
                return revealed
            return min(revealed, _without_replacement(dp, exposure, sensitivity, noise_multiplier, rounds, delta))
        if exposure.kind == POISSON:
            event = dp.PoissonSampledDpEvent(rate, dp.GaussianDpEvent(sigma))
        elif exposure.kind == GAUSSIAN:
            event = dp.GaussianDpEvent(sigma)
        else:  # an Exposure of a kind this module does not know
            raise FedsampleError(f"The 'exposure' parameter has an unknown kind. Got {exposure.kind!r} instead.")
        if accountant == "rdp":
            return _rdp(dp, event, rounds, delta, dp.NeighboringRelation.ADD_OR_REMOVE_ONE)
        largest = 0.5 / sigma**2
        return _refined(lambda interval: _pld(dp, event, rounds, delta, max(interval, 1e-4 * largest)), rounds)


def _without_replacement(
    dp: Any, exposure: Exposure, sensitivity: float, noise_multiplier: float, rounds: int, delta: float
) -> float:
    """dp-accounting's RDP of sampling without replacement, under replace-one (which holds for a zeroed
    update too). A round that holds client i leaves out some client j it would otherwise hold, so the
    comparison is of w_i x_i with w_j x_j, at most (w_i + s) C apart; with every client in, 2 w_i C."""
    n, m = exposure.population, exposure.sample_size
    replace_sensitivity = sensitivity + 1.0 if m < n else 2.0 * sensitivity
    inner = dp.GaussianDpEvent(noise_multiplier / replace_sensitivity)
    event = dp.SampledWithoutReplacementDpEvent(n, m, inner)
    return _rdp(dp, event, rounds, delta, dp.NeighboringRelation.REPLACE_ONE)


def _refined(epsilon_at: Callable[[float], float], rounds: int) -> float:
    """``epsilon_at(COARSE)``, computed again at a finer discretization when its error could exceed
    :data:`RELATIVE_ERROR` (the pessimistic rounding adds about ``0.2 interval sqrt(T)`` to epsilon)."""
    coarse = float(epsilon_at(COARSE))
    if not math.isfinite(coarse):
        return coarse
    interval = max(FINEST, min(COARSE, 5.0 * RELATIVE_ERROR * coarse / math.sqrt(rounds)))
    return coarse if interval > COARSE / 1.5 else float(epsilon_at(interval))


def _pld(dp: Any, event: Any, rounds: int, delta: float, interval: float) -> float:
    accountant = dp.pld.PLDAccountant(dp.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=interval)
    accountant.compose(event, rounds)
    return float(accountant.get_epsilon(delta))


def _rdp(dp: Any, event: Any, rounds: int, delta: float, relation: Any) -> float:
    accountant = dp.rdp.RdpAccountant(neighboring_relation=relation)
    accountant.compose(event, rounds)
    return float(accountant.get_epsilon(delta))


def _kept(law: np.ndarray, tail: float) -> tuple[np.ndarray, float]:
    """The multiplicities worth a component (``k`` with ``P(K = k) >= NEGLIGIBLE``; ``k = 0`` always) and
    the mass counted as a total loss (the rest, and the tail beyond the law)."""
    keep = law >= NEGLIGIBLE
    keep[0] = True
    return np.flatnonzero(keep), float(tail + law[~keep].sum())


def _multiplicity_pld(
    dp: Any, law: np.ndarray, tail: float, sigma: float, rounds: int, delta: float, interval: float
) -> float:
    return float(revealed_pld(dp, law, tail, sigma, interval).self_compose(rounds).get_epsilon_for_delta(delta))


def revealed_pld(dp: Any, law: np.ndarray, tail: float, sigma: float, interval: float) -> Any:
    """One round's PLD of the mechanism that reveals the multiplicity ``k ~ law`` (the tail a total loss)."""
    plds = dp.pld.privacy_loss_distribution
    kept, lost = _kept(law, tail)
    interval = max(interval, 1e-4 * 0.5 * (float(kept[-1]) / sigma) ** 2)
    # k = 0 first (always kept): no loss; each further k mixed in with its share of the mass so far.
    mixture, weight = plds.identity(value_discretization_interval=interval), float(law[0])
    for k in kept[1:].tolist():
        mass = float(law[k])
        component = plds.from_gaussian_mechanism(sigma / k, value_discretization_interval=interval)
        mixture = mixture.compute_mixture(component, weight / (weight + mass))
        weight += mass
    if lost > 0.0:
        total_loss = plds.PrivacyLossDistribution.create_from_rounded_probability({0: 0.0}, 1.0, interval)
        mixture = mixture.compute_mixture(total_loss, weight / (weight + lost))
    return mixture


def _multiplicity_rdp(dp: Any, law: np.ndarray, tail: float, sigma: float, rounds: int, delta: float) -> float:
    rdp_module = dp.rdp.rdp_privacy_accountant
    orders = np.asarray(rdp_module.DEFAULT_RDP_ORDERS, dtype=np.float64)
    epsilon, _ = rdp_module.compute_epsilon(orders, rounds * revealed_rdp(dp, law, tail, sigma), delta)
    return float(epsilon) if math.isfinite(epsilon) else math.inf


def revealed_rdp(dp: Any, law: np.ndarray, tail: float, sigma: float) -> np.ndarray:
    """One round's Renyi divergences, at dp-accounting's orders, of the mechanism that reveals ``k ~ law``."""
    if tail > 0.0:
        raise FedsampleError(
            "The 'accountant' parameter of fedsample.privacy must be 'pld' for a design that draws more than "
            "4096 clients a round with replacement (RDP needs the whole law of the multiplicity). Got 'rdp' instead.",
            parameter="accountant",
            value="rdp",
        )
    rdp_module = dp.rdp.rdp_privacy_accountant
    orders = np.asarray(rdp_module.DEFAULT_RDP_ORDERS, dtype=np.float64)
    k = np.arange(law.size, dtype=np.float64)
    positive = law > 0
    log_law, k = np.log(law[positive]), k[positive]
    # Renyi divergence of the mixture that reveals k: log E[exp((a-1) a k^2 / (2 sigma^2))] / (a - 1).
    exponents = log_law[None, :] + (orders[:, None] - 1.0) * orders[:, None] * k[None, :] ** 2 / (2.0 * sigma**2)
    top = exponents.max(axis=1)
    log_moment = top + np.log(np.exp(exponents - top[:, None]).sum(axis=1))
    return np.asarray(log_moment / (orders - 1.0))
