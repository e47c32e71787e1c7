"""OSMD and Adaptive-OSMD samplers (paper 001: Zhao et al., JMLR 2025).

Online stochastic mirror descent on the variance loss ``l_t(p) = (1/K) sum_m a_m / p_m`` over the
truncated simplex ``A = {p : sum p = 1, p_m >= alpha / M}`` (``alpha`` in [1e-100, 1]; ``alpha = 1``
is uniform sampling). One round:

1. the gradient estimate from the clients that returned (see
   :mod:`fedsample.samplers.adaptive._distribution`): ``-a_m c_m / (K p_m^2)``; with replacement
   ``c_m = N_m / (K p_m)``, so the exponent below is ``eta a_m N_m / (K^2 p_m^3)``;
2. the exponentiated mirror step ``p~_m = p_m exp(eta a_m c_m / (K p_m^2))`` on those clients;
3. the exact KL projection onto ``A`` (:func:`~fedsample.samplers.adaptive.projection.project_truncated_simplex`).

The step is taken in log space and rescaled before the projection, which is scale-invariant, so
large exponents do not overflow and need no clipping.

**Adaptive-OSMD** needs no learning rate. It runs ``E`` OSMD experts with learning rates on a
geometric grid and mixes them with exponentially weighted averaging. Here:

* ``E = ceil(0.5 log2(1 + 4 (T-1) ln(M/alpha) / ln M)) + 1``;
* the rates are ``eta_e = 2^(e-1) eta_min`` with ``eta_min = sqrt(2 ln M / T) / G``, where ``G``
  bounds the gradient estimate ``a_m c_m / (K p_m^2)``. With ``anchor="typical"`` (default)
  ``G = a_max M^3 / K^2``, the bound at the uniform probability ``p = 1/M``. With
  ``anchor="worst-case"``, ``G = a_max M^3 / (K alpha^3)`` (at the floor ``alpha/M``), which
  gives the paper's ``eta_min = (K alpha^3 / (M^3 a_max)) sqrt(2 ln M / T)``. The worst-case bound
  is ``K / alpha^3`` (78 with the defaults) times larger, because it assumes that every drawn
  client sits on the floor. In our reproduction of paper 001's simulation even its fastest expert
  then stays near uniform sampling: see docs/adaptive.md;
* the meta learning rate is ``gamma = (alpha / M) sqrt(8 K / (T a_max))``;
* the prior expert weights are ``(1 + 1/E) / (e (e + 1))``;
* the sampling distribution is the weighted mixture of the experts.

Each expert's gradient estimate uses the clients drawn from the *mixture*, so ``c_m`` is computed
with the mixture's probabilities and every expert's estimate stays unbiased. The article's code
listing uses each expert's own probabilities there instead.

With an unknown horizon (``horizon=None``) the doubling trick runs epochs of 1, 2, 4, ... rounds,
each with the grid and ``gamma`` of its own length. Every epoch warm-starts from the current
mixture: its experts start there, with the prior weights. An unknown ``a_max``
(``a_max=None``) is the running maximum of the observed ``a_m`` since the epoch began: as training
converges the gradients shrink by orders of magnitude, and a maximum kept from the first rounds
would make every expert's rate too small to follow the distribution the losses now call for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import DTypeTable, FloatArray, IntArray
from fedsample._invariants import (
    MAX_ROUND,
    FieldError,
    check_count,
    check_distribution,
    check_real,
    check_round,
    check_values,
)
from fedsample._validation import Constraint, Interval, NoneOr, Options
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.adaptive._distribution import (
    FEEDBACK_BOUND_RANGE,
    DistributionSampler,
    merge_constraints,
    step_size,
)
from fedsample.samplers.adaptive.projection import project_truncated_simplex
from fedsample.serialization import plain_data

__all__ = [
    "MIN_ALPHA",
    "AdaptiveOSMDSampler",
    "AdaptiveOSMDState",
    "DistributionState",
    "OSMDSampler",
    "mirror_step",
    "num_experts",
]


@plain_data
@dataclass(frozen=True, eq=False)
class DistributionState(SamplerState):
    """A learned distribution: ``probabilities`` over the clients, ``round`` rounds learned so far."""

    probabilities: FloatArray
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {"probabilities": np.float64}

    def check_invariants(self) -> None:
        owner = type(self).__name__
        check_sampling_fields(owner, self.importances, self.num_sampled)
        check_distribution(owner, "probabilities", self.probabilities, size=self.importances.size)
        check_round(owner, "round", self.round)


def mirror_step(
    q: FloatArray, clients: IntArray, a: FloatArray, c: FloatArray, *, lr: float, num_sampled: int, floor: float
) -> FloatArray:
    """One OSMD step of the distribution ``q`` from feedback ``a`` and coefficients ``c`` on ``clients``."""
    log_q = np.log(q)
    if clients.size:
        log_q = log_q.copy()
        with np.errstate(over="ignore"):  # a step beyond float's range is +inf, handled below
            log_q[clients] += lr * a * c / (num_sampled * q[clients] ** 2)
    # The projection is invariant to scaling its input: shift by the maximum before exponentiating.
    # A step beyond float's range has a limit: all the mass on the clients it sent to +inf, equally.
    top = log_q.max()
    shifted = (log_q == np.inf).astype(np.float64) if np.isinf(top) else np.exp(log_q - top)
    return project_truncated_simplex(np.maximum(shifted, 1e-300), floor)


def num_experts(horizon: int, num_clients: int, alpha: float) -> int:
    """``E = ceil(0.5 log2(1 + 4 (T-1) ln(M/alpha) / ln M)) + 1``."""
    if num_clients < 2:
        return 1
    ratio = 1 + 4 * (horizon - 1) * math.log(num_clients / alpha) / math.log(num_clients)
    return math.ceil(0.5 * math.log2(ratio)) + 1


# alpha's floor: alpha^3 (the worst-case anchor) stays a normal float, M / alpha finite, and the weights
# p_i / (K q_i) <= M / (K alpha) far from overflow; near 0 (5e-324) the expert count was NaN and the
# statistics of the weights overflowed.
MIN_ALPHA = 1e-100
_COMMON: dict[str, Constraint] = {"alpha": Interval(float, MIN_ALPHA, 1, closed="both")}


@register_sampler
@dataclass(frozen=True, kw_only=True)
class OSMDSampler(DistributionSampler[DistributionState]):
    """OSMD sampler (paper 001, Algorithm 1 with the exact projection of Algorithm 2).

    Hyperparameters: ``alpha`` (floor ``alpha/M``, default 0.4), ``eta`` (learning rate),
    ``replace`` (with or without replacement), ``feedback`` (``"update"`` or ``"gradient"``).
    Starts from the uniform distribution.

    ``eta`` multiplies the feedback ``a_m = lambda_m^2 ||g_m||^2`` in the exponent, so its good
    values depend on the scale of the gradients: tune it (the default, 1e-3, is only a starting
    point; on paper 001's regression the best of {1e-4, 1e-3, 1e-2} is 1e-4), or use
    ``adaptive-osmd``, which needs no learning rate.
    """

    name = "osmd"
    alpha: float = 0.4
    eta: float = 1e-3
    _parameter_constraints: ClassVar[dict[str, Constraint]] = merge_constraints(
        DistributionSampler._parameter_constraints, _COMMON, {"eta": step_size()}
    )

    def init(self, federation: Federation, num_sampled: int) -> DistributionState:
        n = federation.num_clients
        k = self._check_k(num_sampled, n)
        return DistributionState(
            importances=federation.importances, num_sampled=k, probabilities=np.full(n, 1.0 / n), round=0
        )

    def probabilities(self, state: DistributionState) -> FloatArray:
        p: FloatArray = state.probabilities
        return p

    def update(self, state: DistributionState, feedback: Feedback) -> DistributionState:
        clients, a, c = self._observed(state, feedback)
        n = state.probabilities.size
        p = mirror_step(
            state.probabilities, clients, a, c, lr=self.eta, num_sampled=state.num_sampled, floor=self.alpha / n
        )
        return replace(state, probabilities=p, round=state.round + 1)


@plain_data
@dataclass(frozen=True, eq=False)
class AdaptiveOSMDState(SamplerState):
    """Adaptive-OSMD's experts (``E x M``), their log weights, and the doubling epoch."""

    experts: FloatArray
    log_weights: FloatArray
    horizon: int
    epoch_start: int
    a_max: float
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {"experts": np.float64, "log_weights": np.float64}

    def check_invariants(self) -> None:
        owner = "AdaptiveOSMDState"
        check_sampling_fields(owner, self.importances, self.num_sampled)
        check_distribution(owner, "experts", self.experts, size=self.importances.size, axis_rows=True)
        # Log weights may underflow to -inf for a discarded expert, never reach +inf or NaN.
        logs = check_values(owner, "log_weights", self.log_weights, shape=(self.experts.shape[0],), finite=False)
        if np.any(logs == np.inf) or not np.any(np.isfinite(logs)):
            raise FieldError(owner, "log_weights", "floats below +inf, one of them finite", f"{logs.tolist()!r:.60}")
        check_count(owner, "horizon", self.horizon, 1, MAX_ROUND)
        rounds = check_round(owner, "round", self.round)
        check_round(owner, "epoch_start", self.epoch_start, rounds)  # an epoch starts at a round already done
        check_real(owner, "a_max", self.a_max, 0.0, float(np.finfo(np.float64).max))


def _meta_step(log_weights: FloatArray, rate: float, losses: FloatArray) -> FloatArray:
    """Exponentially weighted averaging: ``log w_e - rate * loss_e``, normalised. A step that sends
    every weight to ``-inf`` (overflow) keeps its limit instead: the experts of least loss, as they were."""
    with np.errstate(over="ignore", invalid="ignore"):
        moved = log_weights - rate * losses
    if not np.any(np.isfinite(moved)):
        moved = np.where(losses == losses.min(), log_weights, -np.inf)
        if not np.any(np.isfinite(moved)):  # the least losses are themselves infinite: no information
            moved = log_weights
    normalised: FloatArray = moved - np.logaddexp.reduce(moved)
    return normalised


def _prior_log_weights(count: int) -> FloatArray:
    e = np.arange(1, count + 1, dtype=np.float64)
    prior = (1 + 1 / count) / (e * (e + 1))
    logs: FloatArray = np.log(prior / prior.sum())
    return logs


@register_sampler
@dataclass(frozen=True, kw_only=True)
class AdaptiveOSMDSampler(DistributionSampler[AdaptiveOSMDState]):
    """Adaptive-OSMD (paper 001, Algorithm 5): an ensemble of OSMD experts, no learning rate to tune.

    Hyperparameters: ``alpha`` (default 0.4); ``horizon`` (the number of rounds ``T`` if known,
    else ``None`` for the doubling trick); ``a_max`` (a bound on ``a_m``, else estimated as the
    running maximum); ``gamma`` (meta learning rate, else the theoretical value); ``anchor``
    (``"typical"`` or the paper's ``"worst-case"`` bound behind the learning-rate grid, see the
    module docstring); ``replace``; ``feedback``.
    """

    name = "adaptive-osmd"
    alpha: float = 0.4
    horizon: int | None = None
    a_max: float | None = None
    gamma: float | None = None
    anchor: Literal["typical", "worst-case"] = "typical"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = merge_constraints(
        DistributionSampler._parameter_constraints,
        _COMMON,
        {
            "horizon": NoneOr(Interval(int, 1, MAX_ROUND, closed="both")),
            "a_max": NoneOr(FEEDBACK_BOUND_RANGE),
            "gamma": NoneOr(step_size()),
            "anchor": Options(("typical", "worst-case")),
        },
    )

    def init(self, federation: Federation, num_sampled: int) -> AdaptiveOSMDState:
        n = federation.num_clients
        k = self._check_k(num_sampled, n)
        horizon = self.horizon if self.horizon is not None else 1
        count = num_experts(horizon, n, self.alpha)
        return AdaptiveOSMDState(
            importances=federation.importances,
            num_sampled=k,
            experts=np.full((count, n), 1.0 / n),
            log_weights=_prior_log_weights(count),
            horizon=horizon,
            epoch_start=0,
            a_max=float(self.a_max) if self.a_max is not None else 0.0,
            round=0,
        )

    def probabilities(self, state: AdaptiveOSMDState) -> FloatArray:
        w = np.exp(state.log_weights - state.log_weights.max())
        mixture: FloatArray = (w / w.sum()) @ state.experts
        normalised: FloatArray = mixture / mixture.sum()
        return normalised

    def learning_rates(self, state: AdaptiveOSMDState) -> FloatArray:
        """The experts' learning rates ``2^(e-1) eta_min`` for the current epoch and ``a_max``."""
        n, k, T = state.experts.shape[1], state.num_sampled, state.horizon
        if state.a_max <= 0 or n < 2:
            return np.zeros(state.experts.shape[0])
        scale = k * k if self.anchor == "typical" else k * self.alpha**3
        eta_min = scale / (n**3 * state.a_max) * math.sqrt(2 * math.log(n) / T)
        with np.errstate(over="ignore"):
            rates: FloatArray = eta_min * 2.0 ** np.arange(state.experts.shape[0])
        # An estimated a_max of a subnormal feedback (1e-320) gives no finite rate: nothing to learn from.
        return rates if np.all(np.isfinite(rates)) else np.zeros(state.experts.shape[0])

    def meta_rate(self, state: AdaptiveOSMDState) -> float:
        if self.gamma is not None:
            return float(self.gamma)
        n, k, T = state.experts.shape[1], state.num_sampled, state.horizon
        if state.a_max <= 0:
            return 0.0
        rate = (self.alpha / n) * math.sqrt(8 * k / (T * state.a_max))
        return rate if math.isfinite(rate) else 0.0  # a subnormal a_max, as for the learning rates

    def update(self, state: AdaptiveOSMDState, feedback: Feedback) -> AdaptiveOSMDState:
        clients, a, c = self._observed(state, feedback)
        n, k = state.experts.shape[1], state.num_sampled
        a_max = state.a_max
        if self.a_max is None and a.size:
            a_max = max(a_max, float(a.max()))
        state = replace(state, a_max=a_max)
        experts, log_weights = state.experts, state.log_weights
        if clients.size and a_max > 0:
            # Meta step: the estimated loss of each expert, sum_m c_m a_m / (K q_em), from the mixture's draws.
            losses = (experts[:, clients] ** -1.0) @ (c * a) / k
            log_weights = _meta_step(log_weights, self.meta_rate(state), losses)
            floor = self.alpha / n
            experts = np.stack(
                [
                    mirror_step(q, clients, a, c, lr=float(lr), num_sampled=k, floor=floor)
                    for q, lr in zip(experts, self.learning_rates(state), strict=True)
                ]
            )
        state = replace(state, experts=experts, log_weights=log_weights, round=state.round + 1)
        if self.horizon is None and state.round - state.epoch_start >= state.horizon:
            state = self._next_epoch(state)
        return state

    def _next_epoch(self, state: AdaptiveOSMDState) -> AdaptiveOSMDState:
        """Doubling trick: a twice longer epoch, its own grid, experts warm-started at the mixture."""
        horizon = 2 * state.horizon
        n = state.experts.shape[1]
        count = num_experts(horizon, n, self.alpha)
        mixture = self.probabilities(state)
        return replace(
            state,
            experts=np.tile(mixture, (count, 1)),
            log_weights=_prior_log_weights(count),
            horizon=horizon,
            epoch_start=state.round,
            # An estimated bound is re-estimated in each epoch: gradients shrink as training
            # converges, and a maximum kept from the first rounds would freeze every expert.
            a_max=state.a_max if self.a_max is not None else 0.0,
        )
