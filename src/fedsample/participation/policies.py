"""What the server does with the weights of a round in which some selected clients did not return.

Each policy is a small class (a :class:`Policy`): its weights, the state it learns across rounds (its
estimator) and whether the engine remembers every client's update for it. :data:`POLICY_CLASSES` maps
each name to its class, and :func:`build_policy` makes the policy of a name and its parameters; the
round (:func:`~fedsample.participation.procedure.settle_participants`), the engine and the statistics
read the policy's attributes, never its name. A new policy is its class and one line in that table.

For a selection with weights ``w_i`` and kept set ``K`` (the clients that returned, less the late
ones of over-selection), :func:`correct_weights` applies one of :data:`AGGREGATION_POLICIES`:

``"renormalise"`` (the engine's and the Flower strategy's default)
    ``w'_i = w_i * sum_j w_j / sum_{j in K} w_j`` for ``i`` in ``K``: the weights keep their sum.
    Simple, but biased whenever the return probability differs between clients (the clients that
    fail more often are under-represented).
``"inverse-probability"``
    ``w'_i = w_i / r_i`` for ``i`` in ``K``, where ``r_i`` is the probability that client ``i``
    is kept once selected (known, or estimated by :class:`ReturnRateEstimator`). Since
    ``E[1{i in K} / r_i | S] = 1``, ``E[w'_i] = E[w_i]``: an unbiased sampler stays unbiased.
``"ignore"``
    ``w'_i = w_i`` for ``i`` in ``K``: the failed clients' weight is lost (the update shrinks by
    the expected return rate). Without failures this is the sampler's own aggregation.

The policies for participation rates nobody knows (:data:`UNKNOWN_PARTICIPATION_POLICIES`, docs/failures.md)
carry state across rounds, so they are settled by
:func:`~fedsample.participation.procedure.settle_participants` with that state, not by
:func:`correct_weights`:

``"fedau"`` (Wang & Ji, ICLR 2024)
    ``w'_i = w_i * omega_i`` where ``omega_i`` is the mean of client ``i``'s recorded participation
    intervals (:class:`IntervalEstimator`), an online estimate of ``1 / r_i``.
``"mifa"`` (Gu et al., NeurIPS 2021) and ``"fedvarp"`` (Jhunjhunwala et al., UAI 2022)
    the server remembers every client's latest update ``y_i`` (zero before its first) and moves along
    ``sum_j p_j y_j + sum_{i in K} c_i (Delta_i - y_i)``, then stores ``y_i = Delta_i`` for ``i`` in ``K``:
    ``c_i = p_i`` for MIFA (the average of the memory), ``c_i`` the renormalised weights for FedVARP
    (its SAGA-style correction). The weights these policies report are the ``c_i``. MIFA as its
    authors released it (``mifa_variant="released"``, :mod:`fedsample.participation.mifa`) waits until
    every client has taken part, fills the memory then, and averages with ``c_i = 1/N``.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray
from fedsample._validation import Options, check_param, close_names, invalid, one_of
from fedsample.participation.estimators import IntervalEstimator, ReturnRateEstimator
from fedsample.participation.mifa import MemoryWarmup

__all__ = [
    "AGGREGATION_POLICIES",
    "MEMORY_POLICIES",
    "MIFA",
    "POLICIES",
    "POLICY_CLASSES",
    "UNKNOWN_PARTICIPATION_POLICIES",
    "AggregationPolicy",
    "Estimator",
    "FedAU",
    "FedVARP",
    "Ignore",
    "InverseProbability",
    "OneRoundPolicy",
    "Policy",
    "PolicyNames",
    "Renormalise",
    "RoundWeights",
    "build_policy",
    "correct_weights",
    "remembered_weights",
]

AggregationPolicy = Literal["renormalise", "inverse-probability", "ignore", "fedau", "mifa", "fedvarp"]
# A run's state of a policy that learns across rounds (None when there is none).
Estimator = ReturnRateEstimator | IntervalEstimator | MemoryWarmup | None


@dataclass(frozen=True, eq=False)
class RoundWeights:
    """What a policy reads of a settled round, per distinct selected client (sorted ``clients``): the
    sampler's ``weights``, who is ``kept``, the ``rates`` of :meth:`Policy.round_rates` (known or estimated
    ``r_i``, FedAU's ``omega_i``; ``None`` when unknown), ``keep_probability`` ``min(1, m / R)`` of
    over-selection, and every client's ``importances`` ``p_i`` (``None`` when not given)."""

    clients: IntArray
    weights: FloatArray
    kept: BoolArray
    rates: FloatArray | None
    keep_probability: float
    importances: FloatArray | None


@dataclass(frozen=True)
class Policy(ABC):
    """An aggregation policy: how the weights of a round's kept clients are corrected.

    Class attributes say what the round, the engine and the statistics must do for it:
    ``one_round`` (its correction needs nothing but the round: :func:`correct_weights`, the Flower
    strategy's policies), ``remembers_updates`` (the engine keeps every client's latest update,
    :mod:`fedsample.engine.aggregation`), ``still_without_kept`` (a remembered-update policy that moves
    nowhere in a round in which nobody is kept), ``needs_return_rates`` (its weights divide by ``r_i``:
    known rates need an availability model with probabilities), ``renormalises`` (its weights keep the
    round's weight sum, which needs the weights of every selected client).
    """

    name: ClassVar[str]
    one_round: ClassVar[bool] = True
    remembers_updates: ClassVar[bool] = False
    still_without_kept: ClassVar[bool] = False
    needs_return_rates: ClassVar[bool] = False
    renormalises: ClassVar[bool] = False

    @property
    def warms_up(self) -> bool:
        """Whether nothing trains until every client has taken part (the released MIFA)."""
        return False

    def new_estimator(self, num_clients: int, return_rates: str) -> Estimator:
        """A run's state of this policy: estimated return rates (``return_rates="estimated"``), else ``None``."""
        return ReturnRateEstimator(num_clients) if return_rates == "estimated" else None

    def round_rates(
        self, estimator: Estimator, clients: IntArray, returned: BoolArray, known: FloatArray | None
    ) -> FloatArray | None:
        """The round's ``r_i`` of ``clients``: read from a :class:`ReturnRateEstimator` (then fed with who
        ``returned``), else the ``known`` return probabilities."""
        if isinstance(estimator, ReturnRateEstimator):
            rates = estimator.rates(clients)
            estimator.observe(clients, returned)
            return rates
        return known

    @abstractmethod
    def weights(self, round: RoundWeights) -> FloatArray:
        """The corrected weights of the round's distinct selected clients (zero off ``round.kept``)."""


class OneRoundPolicy(Policy):
    """A correction of one round's weights from that round alone (:func:`correct_weights`)."""

    def weights(self, round: RoundWeights) -> FloatArray:
        if round.kept.all() and (round.rates is None or np.all(round.rates == 1.0)):
            return round.weights.copy()
        return self.correct(round.weights, round.kept, self.probabilities(round))

    def probabilities(self, round: RoundWeights) -> FloatArray | None:
        """The probabilities that :meth:`correct` divides by (``None``: it divides by none)."""
        return None

    def correct(
        self, weights: npt.ArrayLike, returned: npt.ArrayLike, return_probabilities: npt.ArrayLike | None = None
    ) -> FloatArray:
        """The weights of a round's entries after failures: zero for the entries that did not return."""
        w = np.asarray(weights, dtype=np.float64)
        back = np.asarray(returned, dtype=bool)
        if back.shape != w.shape:
            raise invalid("returned", "correct_weights", f"one flag per entry, shape {w.shape}", back.shape)
        return self.corrected(np.where(back, w, 0.0), w, back, return_probabilities)

    @abstractmethod
    def corrected(
        self, kept: FloatArray, weights: FloatArray, returned: BoolArray, return_probabilities: npt.ArrayLike | None
    ) -> FloatArray:
        """``kept`` (the weights, zero where ``returned`` is not) corrected by the policy."""


class Renormalise(OneRoundPolicy):
    """``w'_i = w_i sum_j w_j / sum_{j in K} w_j``: the weights keep their sum."""

    name = "renormalise"
    renormalises = True

    def corrected(
        self, kept: FloatArray, weights: FloatArray, returned: BoolArray, return_probabilities: npt.ArrayLike | None
    ) -> FloatArray:
        kept_sum = float(kept.sum())
        total = float(weights.sum())
        if kept_sum > 0 and math.isfinite(total):
            kept *= total / kept_sum
        return kept


class InverseProbability(OneRoundPolicy):
    """``w'_i = w_i / r_i``: an unbiased sampler stays unbiased."""

    name = "inverse-probability"
    needs_return_rates = True

    def probabilities(self, round: RoundWeights) -> FloatArray | None:
        if round.rates is None:
            raise invalid("participation", "settle_participants", "known return probabilities", None)
        out: FloatArray = round.rates * round.keep_probability
        return out

    def corrected(
        self, kept: FloatArray, weights: FloatArray, returned: BoolArray, return_probabilities: npt.ArrayLike | None
    ) -> FloatArray:
        owner = "correct_weights"
        if return_probabilities is None:
            raise invalid("return_probabilities", owner, "given for the 'inverse-probability' policy", None)
        r = np.asarray(return_probabilities, dtype=np.float64)
        if r.shape != weights.shape or not np.all((r > 0) & (r <= 1)):
            shown = r.shape if r.shape != weights.shape else r[~((r > 0) & (r <= 1))][0]
            raise invalid("return_probabilities", owner, f"probabilities in (0, 1] of shape {weights.shape}", shown)
        return np.divide(kept, r, out=np.zeros_like(kept), where=returned)


class Ignore(OneRoundPolicy):
    """``w'_i = w_i``: the failed clients' weight is lost."""

    name = "ignore"

    def corrected(
        self, kept: FloatArray, weights: FloatArray, returned: BoolArray, return_probabilities: npt.ArrayLike | None
    ) -> FloatArray:
        return kept


@dataclass(frozen=True)
class FedAU(Policy):
    """``w'_i = w_i omega_i / min(1, m / R)``, ``omega_i`` FedAU's interval estimate of ``1 / r_i``
    (:class:`IntervalEstimator` with the cutoff ``K``, ``fedau_cutoff``)."""

    name: ClassVar[str] = "fedau"
    one_round: ClassVar[bool] = False
    fedau_cutoff: int = 100_000

    def new_estimator(self, num_clients: int, return_rates: str) -> Estimator:
        return IntervalEstimator(num_clients, cutoff=self.fedau_cutoff)

    def round_rates(
        self, estimator: Estimator, clients: IntArray, returned: BoolArray, known: FloatArray | None
    ) -> FloatArray | None:
        """The ``omega_i`` of ``clients``, read from the run's :class:`IntervalEstimator` (then fed)."""
        if not isinstance(estimator, IntervalEstimator):
            raise invalid("estimator", "settle_participants", "an IntervalEstimator under 'fedau'", estimator)
        factors = estimator.factors(clients)
        estimator.observe(clients, returned)
        return factors

    def weights(self, round: RoundWeights) -> FloatArray:
        assert round.rates is not None
        out: FloatArray = np.where(round.kept, round.weights * round.rates / round.keep_probability, 0.0)
        return out


@dataclass(frozen=True)
class MIFA(Policy):
    """The average of every client's latest update: the weights ``c_i = p_i`` of the remembered updates
    (``1/N`` under ``mifa_variant="released"``, which waits until every client has taken part:
    :mod:`fedsample.participation.mifa`)."""

    name: ClassVar[str] = "mifa"
    one_round: ClassVar[bool] = False
    remembers_updates: ClassVar[bool] = True
    mifa_variant: str = "zeros"

    @property
    def warms_up(self) -> bool:
        return self.mifa_variant == "released"

    def new_estimator(self, num_clients: int, return_rates: str) -> Estimator:
        return MemoryWarmup(num_clients) if self.warms_up else super().new_estimator(num_clients, return_rates)

    def weights(self, round: RoundWeights) -> FloatArray:
        if round.importances is None:
            raise invalid("importances", "settle_participants", "every client's p_i under 'mifa'", None)
        p = np.asarray(round.importances, dtype=np.float64)
        average = np.full(round.clients.size, 1.0 / p.size) if self.warms_up else p[round.clients]
        out: FloatArray = np.where(round.kept, average, 0.0)
        return out


class FedVARP(Policy):
    """The SAGA-style correction of the remembered updates: ``c_i`` the renormalised ``w_i``; no move in a
    round in which nobody is kept (its authors' code)."""

    name = "fedvarp"
    one_round = False
    remembers_updates = True
    still_without_kept = True
    renormalises = True

    def weights(self, round: RoundWeights) -> FloatArray:
        return Renormalise().correct(round.weights, round.kept)


# Every policy by name: a new policy is its class and one line here.
POLICY_CLASSES: dict[str, type[Policy]] = {
    "renormalise": Renormalise,
    "inverse-probability": InverseProbability,
    "ignore": Ignore,
    "fedau": FedAU,
    "mifa": MIFA,
    "fedvarp": FedVARP,
}
POLICIES: tuple[str, ...] = tuple(POLICY_CLASSES)
# The weight corrections of one round (correct_weights; the Flower strategy's policies).
AGGREGATION_POLICIES: tuple[str, ...] = tuple(name for name, cls in POLICY_CLASSES.items() if cls.one_round)
# The policies with state across rounds, for participation rates nobody knows.
UNKNOWN_PARTICIPATION_POLICIES: tuple[str, ...] = tuple(n for n, cls in POLICY_CLASSES.items() if not cls.one_round)
# Those whose state is every client's latest update (the engine keeps it, docs/failures.md).
MEMORY_POLICIES: tuple[str, ...] = tuple(name for name, cls in POLICY_CLASSES.items() if cls.remembers_updates)


class PolicyNames:
    """The names of the registered policies (:data:`POLICY_CLASSES`, read when a value is checked), or of
    those of them that correct one round (``one_round``)."""

    def __init__(self, *, one_round: bool = False) -> None:
        self.one_round = one_round

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(name for name, cls in POLICY_CLASSES.items() if cls.one_round or not self.one_round)

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, str) and value in self.values

    def __str__(self) -> str:
        return one_of(self.values)

    def suggest(self, value: object) -> tuple[str, ...]:
        return close_names(value, self.values)


def build_policy(name: str, **parameters: object) -> Policy:
    """The policy ``name`` (a key of :data:`POLICY_CLASSES`) with those of ``parameters`` it declares as its
    fields (``fedau_cutoff`` for FedAU, ``mifa_variant`` for MIFA; the others are ignored): the one builder
    behind :attr:`~fedsample.participation.setting.Participation.aggregation`, which the config reader,
    the CLI and the Flower strategy all build."""
    cls = POLICY_CLASSES[name]
    own = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in parameters.items() if key in own})


def correct_weights(
    weights: npt.ArrayLike,
    returned: npt.ArrayLike,
    policy: str,
    return_probabilities: npt.ArrayLike | None = None,
) -> FloatArray:
    """The weights of a round's entries after failures: zero for the entries that did not return.

    ``weights``, ``returned`` and ``return_probabilities`` are aligned per entry of the selection
    (a client drawn twice has two entries with the same fate). A round in which nobody returned
    gets all-zero weights (the server keeps its model), under every policy. ``policy`` is one that
    corrects one round (:class:`OneRoundPolicy`).
    """
    check_param("policy", "correct_weights", policy, PolicyNames(one_round=True))
    rule = build_policy(policy)
    assert isinstance(rule, OneRoundPolicy)
    return rule.correct(weights, returned, return_probabilities)


def remembered_weights(
    policy: str, importances: npt.ArrayLike, seen: npt.NDArray[np.bool_], clients: npt.ArrayLike, weights: npt.ArrayLike
) -> FloatArray:
    """The weight each client's update gets in a round of a memory policy when every client's update is fixed.

    With fixed updates ``u_i``, ``Delta_i - y_i`` is ``u_i`` for a client kept for the first time and 0
    after, so the aggregate is ``sum_i e_i u_i`` with ``e_i = p_i`` for the clients seen before the round,
    plus ``c_i`` (``weights``, the round's correction weights of the kept ``clients``) for those kept for
    the first time; under ``"mifa"`` ``c_i = p_i``, so ``e_i = p_i`` for every client seen by the end of the
    round. ``"fedvarp"`` moves nowhere in a round in which nobody is kept (the authors' code). ``seen``
    (one flag per client) is updated in place. Dense: one value per client.
    """
    check_param("policy", "remembered_weights", policy, Options(MEMORY_POLICIES))
    rule = build_policy(policy)
    p = np.asarray(importances, dtype=np.float64)
    ids = np.asarray(clients, dtype=np.int64)
    c = np.asarray(weights, dtype=np.float64)
    if rule.still_without_kept and ids.size == 0:
        return np.zeros(p.size)
    out = np.where(seen, p, 0.0)
    fresh = ~seen[ids]
    out[ids[fresh]] += c[fresh]
    seen[ids] = True
    return out
