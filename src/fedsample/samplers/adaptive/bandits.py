"""Baselines of paper 001 that learn a sampling distribution: MABS, VRB, Avare, and uniform sampling
under the same importance-weighted aggregation.

All draw ``K`` clients from their distribution ``p`` with or without replacement, weight them
``lambda_m c_m`` and read the feedback ``a_m = lambda_m^2 ||g_m||^2`` as described in
:mod:`fedsample.samplers.adaptive._distribution`. Each is written from its own paper; the choices the
papers leave open are stated in the class docstrings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import DTypeTable, FloatArray
from fedsample._invariants import MAX_ROUND, check_real, check_round, check_values
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.adaptive._distribution import (
    DistributionSampler,
    merge_constraints,
    observed_feedback,
    positive_float,
    step_size,
)
from fedsample.samplers.adaptive.osmd import MIN_ALPHA, DistributionState
from fedsample.samplers.adaptive.projection import project_truncated_simplex
from fedsample.serialization import plain_data

__all__ = ["AvareSampler", "MABSHorizonState", "MABSSampler", "ScoreState", "UniformISSampler", "VRBSampler"]

_MIX: dict[str, Constraint] = {"alpha": Interval(float, 0, 1, closed="both")}
# A log-weight so far below the others' that its weight is 0 (exp(-1e300)), yet finite as a state keeps it.
_FAR = 1e300


@register_sampler
@dataclass(frozen=True, kw_only=True)
class UniformISSampler(DistributionSampler[DistributionState]):
    """Uniform sampling with importance-weighted aggregation: ``p_m = 1/M`` always, ``w = lambda_m c_m``.

    With replacement each draw weighs ``lambda_m M / K``. This is the uniform baseline of paper
    001: the same estimator as OSMD, but a distribution that never learns.
    """

    name = "uniform-is"

    def init(self, federation: Federation, num_sampled: int) -> DistributionState:
        n = federation.num_clients
        k = self._check_k(num_sampled, n)
        return DistributionState(importances=federation.importances, num_sampled=k, probabilities=np.full(n, 1.0 / n))

    def probabilities(self, state: DistributionState) -> FloatArray:
        return state.probabilities

    def update(self, state: DistributionState, feedback: Feedback) -> DistributionState:
        return replace(state, round=state.round + 1)


@plain_data
@dataclass(frozen=True, eq=False)
class ScoreState(SamplerState):
    """A per-client score vector (log weights, cumulative losses or last observations) and its summary."""

    scores: FloatArray
    observed: FloatArray
    round: int = 0
    _array_dtypes: ClassVar[DTypeTable] = {"scores": np.float64, "observed": np.float64}

    def check_invariants(self) -> None:
        owner = type(self).__name__
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled)
        check_values(owner, "scores", self.scores, shape=(n,))
        check_values(owner, "observed", self.observed, shape=(n,))
        check_round(owner, "round", self.round)


@plain_data
@dataclass(frozen=True, eq=False)
class MABSHorizonState(ScoreState):
    """MABS's state with the step derived from the horizon: also the mean feedback ``a_bar`` (0 until seen)."""

    mean_feedback: float = 0.0

    def check_invariants(self) -> None:
        super().check_invariants()
        check_real("MABSHorizonState", "mean_feedback", self.mean_feedback, 0.0, float(np.finfo(np.float64).max))


def _init_scores(federation: Federation, k: int, value: float) -> ScoreState:
    n = federation.num_clients
    return ScoreState(importances=federation.importances, num_sampled=k, scores=np.full(n, value), observed=np.zeros(n))


def _check_nonnegative(state: ScoreState, owner: str) -> None:
    """VRB's cumulative feedback and Avare's last observations are sums and norms, never negative: a saved
    state holding negative ones is refused (VRB took their square root, NaN; Avare drew from negative p)."""
    lowest = min(float(state.scores.min(initial=0.0)), float(state.observed.min(initial=0.0)))
    if lowest < 0:
        raise invalid("state", f"{owner}.probabilities", "a ScoreState of non-negative scores and observations", lowest)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class MABSSampler(DistributionSampler[ScoreState]):
    """MABS (Salehi, Celis and Thiran, 2017): exponential weights on the variance-loss gradient.

    ``p_m = (1 - alpha) w_m / sum w + alpha / M``. After a round, a client that returned gains
    ``delta * a_m c_m / (K p_m^2)`` in ``log w_m``: the reward is the unbiased estimate of
    ``-d l / d p_m``, the same bandit gradient as OSMD. Paper 001's released code mixes with
    ``alpha / M`` as here.

    Choices: the weights live in log space, so nothing overflows. The step is one of:

    - ``step="fixed"`` (default): ``delta`` (default 0.01), to be tuned like OSMD's ``eta``;
    - ``step="horizon"``: the step paper 001's released code derives from the horizon
      ``T = horizon``, ``delta = K^2 sqrt(alpha^4 ln M / (T M^5 a_bar))``. The released code adds
      ``delta_0 a_m / p_m^3`` per draw with ``delta_0 = sqrt(alpha^4 ln M / (T M^5 a_bar))``; our
      increment ``delta a_m c_m / (K p_m^2)`` is ``delta a_m / (K^2 p_m^3)`` per draw, hence the
      ``K^2``. ``a_bar`` is the mean feedback over the clients; the released code computes it from
      every client's gradient at the initial model, which bandit feedback does not reveal, so it
      is estimated without bias from the first round with feedback, ``a_bar = sum_m a_m c_m / M``,
      and kept (:class:`MABSHorizonState`). ``delta`` is then unused.
    """

    name = "mabs"
    alpha: float = 0.4
    delta: float = 0.01
    step: Literal["fixed", "horizon"] = "fixed"
    horizon: int | None = None
    _parameter_constraints: ClassVar[dict[str, Constraint]] = merge_constraints(
        DistributionSampler._parameter_constraints,
        _MIX,
        {
            # Exponential weights explore only through the mixing: at alpha = 0 a large step left clients
            # at p_m = 0 (an unbiased sampler no longer unbiased, its saved state refused), near 0 the
            # weights lambda_m / (K p_m) overflowed. The floor of OSMD's alpha.
            "alpha": Interval(float, MIN_ALPHA, 1, closed="both"),
            "delta": step_size(),
            "step": Options(("fixed", "horizon")),
            "horizon": NoneOr(Interval(int, 1, MAX_ROUND, closed="both")),
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step == "horizon" and self.horizon is None:
            raise invalid(
                "horizon", type(self).__name__, "an int >= 1 (the number of rounds T) when step='horizon'", None
            )

    def init(self, federation: Federation, num_sampled: int) -> ScoreState:
        k = self._check_k(num_sampled, federation.num_clients)
        if self.step == "horizon":
            n = federation.num_clients
            return MABSHorizonState(
                importances=federation.importances, num_sampled=k, scores=np.zeros(n), observed=np.zeros(n)
            )
        return _init_scores(federation, k, 0.0)

    def _delta(self, state: ScoreState, a: FloatArray, c: FloatArray) -> tuple[float, float]:
        """The step of this round and the mean feedback ``a_bar`` to keep (0 when not used)."""
        if not isinstance(state, MABSHorizonState):
            return self.delta, 0.0
        n, k = state.scores.size, state.num_sampled
        mean_feedback = state.mean_feedback if state.mean_feedback > 0 else float(np.sum(a * c)) / n
        if mean_feedback <= 0:  # every observed gradient was zero: nothing to learn from yet
            return 0.0, 0.0
        assert self.horizon is not None
        return k * k * math.sqrt(self.alpha**4 * math.log(n) / (self.horizon * n**5 * mean_feedback)), mean_feedback

    def probabilities(self, state: ScoreState) -> FloatArray:
        w = np.exp(state.scores - state.scores.max())
        n = w.size
        p: FloatArray = (1 - self.alpha) * w / w.sum() + self.alpha / n
        return p

    def update(self, state: ScoreState, feedback: Feedback) -> ScoreState:
        if isinstance(state, MABSHorizonState) != (self.step == "horizon"):  # a saved state with other params
            made = "MABSHorizonState" if self.step == "horizon" else "ScoreState"
            got = f"a {type(state).__name__}"
            raise invalid("state", f"{type(self).__name__}.update", f"a {made} (as step={self.step!r} makes)", got)
        clients, a, c = self._observed(state, feedback)
        if not clients.size:
            return replace(state, round=state.round + 1)
        p = self.probabilities(state)
        delta, mean_feedback = self._delta(state, a, c)
        scores = state.scores.copy()
        with np.errstate(over="ignore"):  # a gain beyond float's range is +inf, handled below
            scores[clients] += delta * a * c / (state.num_sampled * p[clients] ** 2)
        if np.isinf(scores).any():  # the gain's limit: the weight on the clients it sent to +inf, equally
            scores = np.where(np.isinf(scores), 0.0, -_FAR)
        if isinstance(state, MABSHorizonState):
            return replace(state, scores=scores, round=state.round + 1, mean_feedback=mean_feedback)
        return replace(state, scores=scores, round=state.round + 1)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class VRBSampler(DistributionSampler[ScoreState]):
    """VRB (Borsos, Lucic and Krause, 2018): follow-the-regularized-leader on the variance loss.

    The cumulative importance-weighted losses are ``C_m = sum_t a_{t,m} c_{t,m}``, each term an
    unbiased estimate of ``a_{t,m}``. The next distribution minimises
    ``sum_m (C_m + lambda) / p_m`` over ``{sum p = 1, p_m >= alpha / M}``. Its closed form is
    ``p_m = max(alpha/M, z sqrt(C_m + lambda))``, computed by the same sort-based routine as OSMD's
    projection.

    Choices:
    - ``lambda`` (the regulariser) defaults to the mean of the observed ``a``, so unseen clients
      keep a reasonable share.
    - ``feedback="loss"`` takes paper 001's released code's feedback, the squared local loss
      instead of the squared gradient norm. The default is Borsos et al.'s gradient feedback.
    - ``form="projection"`` (default) is the exact minimiser above. ``form="mixture"`` is the
      released code's form, ``p_m = (1 - alpha) s_m / sum s + alpha / M`` with
      ``s_m = sqrt(C_m + lambda)``: the unconstrained minimiser mixed with uniform, which also
      keeps ``p_m >= alpha / M`` but moves every client's share, not only the floored ones'.
      The released code's regulariser, ``1.5 M max_m l_m(0)^2 / alpha`` over every client at the
      initial model, needs a full pass that bandit feedback does not give; ``lambda`` stays ours.
    """

    name = "vrb"
    alpha: float = 0.4
    regularizer: float | None = None
    feedback: Literal["update", "gradient", "loss"] = "update"  # type: ignore[assignment]
    form: Literal["projection", "mixture"] = "projection"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = merge_constraints(
        DistributionSampler._parameter_constraints,
        _MIX,
        {
            "regularizer": NoneOr(positive_float()),
            "feedback": Options(("update", "gradient", "loss")),
            "form": Options(("projection", "mixture")),
        },
    )

    def init(self, federation: Federation, num_sampled: int) -> ScoreState:
        return _init_scores(federation, self._check_k(num_sampled, federation.num_clients), 0.0)

    def _lambda(self, state: ScoreState) -> float:
        if self.regularizer is not None:
            return float(self.regularizer)
        seen = state.observed[state.observed > 0]
        return float(seen.mean()) if seen.size else 1.0

    def probabilities(self, state: ScoreState) -> FloatArray:
        _check_nonnegative(state, type(self).__name__)
        n = state.scores.size
        scores = np.sqrt(state.scores + self._lambda(state))
        if self.form == "mixture":
            p: FloatArray = (1 - self.alpha) * scores / scores.sum() + self.alpha / n
            return p
        return project_truncated_simplex(scores, self.alpha / n)

    def update(self, state: ScoreState, feedback: Feedback) -> ScoreState:
        clients, a, c = observed_feedback(feedback, state.importances, kind=self.feedback)
        if not clients.size:
            return replace(state, round=state.round + 1)
        scores = state.scores.copy()
        scores[clients] += a * c
        observed = state.observed.copy()
        observed[clients] = a
        return replace(state, scores=scores, observed=observed, round=state.round + 1)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class AvareSampler(DistributionSampler[ScoreState]):
    """Avare (El Hanchi and Stephens, NeurIPS 2020): importance sampling from the latest observed
    gradient norms, for decreasing step sizes.

    The variance-optimal distribution is ``p*_m ∝ sqrt(a_m)``. Avare plugs in, for each client, the
    last observation of ``sqrt(a_m)`` (stale for clients not drawn lately) and mixes with uniform:
    ``p_m = (1 - alpha) s_m / sum s + alpha / M``. El Hanchi and Stephens show the staleness is
    harmless when the step sizes decrease, since the gradients then move slowly.

    Choices: clients never observed get the mean score of the observed ones (the uniform
    distribution before any feedback). The mixing weight ``alpha`` defaults to 0.4, like the other
    baselines' floor.
    """

    name = "avare"
    alpha: float = 0.4
    _parameter_constraints: ClassVar[dict[str, Constraint]] = merge_constraints(
        DistributionSampler._parameter_constraints, _MIX
    )

    def init(self, federation: Federation, num_sampled: int) -> ScoreState:
        return _init_scores(federation, self._check_k(num_sampled, federation.num_clients), 0.0)

    def probabilities(self, state: ScoreState) -> FloatArray:
        _check_nonnegative(state, type(self).__name__)
        n = state.scores.size
        seen = state.observed > 0
        if not seen.any():
            return np.full(n, 1.0 / n)
        scores = np.where(seen, state.scores, state.scores[seen].mean())
        total = scores.sum()
        if total <= 0:
            return np.full(n, 1.0 / n)
        p: FloatArray = (1 - self.alpha) * scores / total + self.alpha / n
        return p

    def update(self, state: ScoreState, feedback: Feedback) -> ScoreState:
        clients, a, _ = self._observed(state, feedback)
        if not clients.size:
            return replace(state, round=state.round + 1)
        scores = state.scores.copy()
        scores[clients] = np.sqrt(a)
        observed = state.observed.copy()
        observed[clients] = 1.0
        return replace(state, scores=scores, observed=observed, round=state.round + 1)
