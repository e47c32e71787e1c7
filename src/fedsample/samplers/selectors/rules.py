"""Selectors that production simulators ship, and what the loss-driven systems share.

* :class:`HighLossSampler` (``high-loss``, FLSim's ``HighLossActiveUserSelector``): ``m`` clients
  drawn without replacement with probabilities ``softmax(inverse_temperature * loss_i)`` over the
  available clients, from each client's last reported loss, after every client's loss was evaluated
  once before the first selection (``initial_evaluation``).
* :class:`RoundRobinSampler` (``round-robin``): random round robin. Each cycle visits every
  available client once, ``m`` at a time, in a random order.
* FLSim's ``NumberOfSamplesActiveUserSelector`` and ``SequentialActiveUserSelector`` are in
  :mod:`fedsample.samplers.selectors.flsim` (``number-of-samples``, ``sequential``).

All are biased by design (``E[w_i] != p_i``), like Oort, Power-of-Choice and DivFL, which reuse
the pieces here: :class:`LossState` (last reported losses and availability), the aggregation rule
(:func:`participant_weights`), availability from feedback (:func:`feedback_availability`) and the
design that wraps a selection rule (:class:`RuleDesign`, Monte-Carlo statistics only).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import DTypeTable, FloatArray, IntArray
from fedsample._invariants import FieldError, check_mask, check_round, check_values
from fedsample._validation import Boolean, Constraint, Interval, Options
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler, StateT
from fedsample.samplers._feedback import FEEDBACK_LIMIT, Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.two_phase import FirstPhase
from fedsample.serialization import plain_data

__all__ = [
    "AGGREGATION_OPTIONS",
    "Aggregation",
    "HighLossSampler",
    "LossState",
    "RoundRobinSampler",
    "RoundRobinState",
    "RuleDesign",
    "RuleSampler",
    "feedback_availability",
    "gumbel_top_k",
    "init_loss_state",
    "participant_weights",
    "returned_values",
    "update_loss_state",
]

Aggregation = Literal["size", "average"]
AGGREGATION_OPTIONS: Constraint = Options(("size", "average"))


def participant_weights(importances: FloatArray, clients: IntArray, aggregation: str) -> FloatArray:
    """Aggregation weights of the selected ``clients``: FedAvg over the participants.

    ``"size"``: ``p_i / sum_{j in S} p_j`` (McMahan et al.'s weighting by sample counts when
    ``p_i = n_i / M``); ``"average"``: ``1 / |S|``. Either sums to one over the selection.
    """
    if clients.size == 0:
        return np.zeros(0)
    if aggregation == "average":
        return np.full(clients.size, 1.0 / clients.size)
    p = importances[clients]
    return p / p.sum()  # type: ignore[no-any-return]


def gumbel_top_k(log_weights: FloatArray, k: int, rng: np.random.Generator) -> IntArray:
    """Positions of ``k`` draws without replacement with probabilities ``∝ exp(log_weights)``.

    Successive sampling by the Gumbel-top-k trick: the ``k`` largest ``log w_i + G_i`` with
    ``G_i`` standard Gumbel. ``O(len)`` time, no loop over draws.
    """
    size = log_weights.size
    k = min(k, size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    keys = log_weights + rng.gumbel(size=size)
    if k == size:
        return np.argsort(-keys).astype(np.int64)
    top = np.argpartition(-keys, k - 1)[:k]
    return top[np.argsort(-keys[top])].astype(np.int64)


def feedback_availability(feedback: Feedback, current: np.ndarray) -> np.ndarray:
    """The availability mask after ``feedback``: ``feedback.available`` when given, else ``current``.

    The ids are those :meth:`~fedsample.samplers.Sampler.update` checked (clients of the state).
    """
    if feedback.available is None:
        return current
    mask = np.zeros(current.size, dtype=bool)
    mask[feedback.available] = True
    return mask


def returned_values(feedback: Feedback, name: str) -> tuple[IntArray, FloatArray]:
    """The returned clients with a finite value of the feedback field ``name``, and those values
    (a field left out gives no clients; :meth:`~fedsample.samplers.Sampler.update` checked both)."""
    values = getattr(feedback, name)
    if values is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    finite = np.isfinite(values)
    return feedback.clients[finite], values[finite]


@dataclass(frozen=True, eq=False)
class RuleDesign:
    """A design that is a selection rule at a fixed state: draws only, no closed-form statistics.

    :mod:`fedsample.stats` finds no exact moments for it and estimates them by Monte Carlo.
    """

    num_clients: int
    rule: Callable[[np.random.Generator], tuple[IntArray, FloatArray]]

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        return self.rule(rng)


@plain_data
@dataclass(frozen=True, eq=False)
class LossState(SamplerState):
    """Each client's last reported training loss (``-inf`` until one arrives) and who is available."""

    losses: FloatArray
    available: np.ndarray
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {"losses": np.float64, "available": np.bool_}

    def check_invariants(self) -> None:
        owner = type(self).__name__
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled)
        losses = check_values(owner, "losses", self.losses, shape=(n,), finite=False)
        # -inf (no loss yet) or a measurement: a feedback's loss beyond FEEDBACK_LIMIT is never recorded,
        # and AFL's valuations of a saved 1e308 overflowed (issue 32)
        beyond = np.flatnonzero((losses != -np.inf) & ~(np.abs(losses) <= FEEDBACK_LIMIT))
        if beyond.size:
            rule = f"-inf (no loss yet) or floats in [-{FEEDBACK_LIMIT:g}, {FEEDBACK_LIMIT:g}] of shape (n)"
            raise FieldError(owner, "losses", rule, f"{losses[beyond[0]].item()!r} at ({int(beyond[0])},)")
        check_mask(owner, "available", self.available, n)
        check_round(owner, "round", self.round)


def init_loss_state(federation: Federation, num_sampled: int) -> LossState:
    n = federation.num_clients
    return LossState(
        importances=federation.importances,
        num_sampled=num_sampled,
        losses=np.full(n, -np.inf),
        available=np.ones(n, dtype=bool),
    )


def update_loss_state(state: LossState, feedback: Feedback) -> LossState:
    """Record the returned clients' finite losses and the availability the feedback carries."""
    clients, values = returned_values(feedback, "losses")
    losses = state.losses
    if clients.size:
        losses = state.losses.copy()
        losses[clients] = values
    available = feedback_availability(feedback, state.available)
    return replace(state, losses=losses, available=available, round=state.round + 1)


@dataclass(frozen=True, kw_only=True)
class RuleSampler(Sampler[StateT]):
    """A biased sampler whose round is a rule applied to its state (:meth:`select`), wrapped in a
    :class:`RuleDesign` so that the statistics layer estimates its moments by Monte Carlo."""

    biased = True

    @abstractmethod
    def select(self, state: StateT, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        """One round's clients and aggregation weights."""

    def design(self, state: StateT) -> RuleDesign:
        num_clients = int(np.asarray(self.importances(state)).size)
        return RuleDesign(num_clients=num_clients, rule=lambda rng: self.select(state, rng))

    def sample(self, state: StateT, rng: np.random.Generator) -> Selection:
        clients, weights = self.select(state, rng)
        return Selection(clients=clients, weights=weights)


# Every client's loss at the global model over all its data, before the first selection.
EVERY_LOSS = FirstPhase(report="losses")


@register_sampler
@dataclass(frozen=True, kw_only=True)
class HighLossSampler(RuleSampler[LossState]):
    """Highest loss first: ``m`` available clients without replacement, ``P ∝ exp(inverse_temperature * loss_i)``.

    FLSim's ``HighLossActiveUserSelector`` (facebookresearch/FLSim, last at commit ``82b7fb3``).
    Hyperparameters:

    inverse_temperature:
        ``beta >= 0``, which *multiplies* the loss: FLSim's ``softmax_temperature`` is this ``beta``
        (default 1, FLSim's too). A large ``beta`` approaches "the ``m`` highest losses", 0 is
        uniform sampling. (``temperature``, which divided the loss, is refused with a hint.)
    initial_evaluation:
        ``True`` (default, FLSim's): before the first selection every available client evaluates its
        loss at the global model over all its data (a first phase, :mod:`fedsample.samplers.two_phase`;
        the engine runs it and charges it on the clock). ``False``: no first phase; a client that has
        not reported a loss counts as the highest known one, and the first draw is uniform.
    aggregation:
        ``"size"`` (default, FLSim's FedAvg by example counts) or ``"average"`` (:func:`participant_weights`).

    Each client's loss is the last one it reported (the engine's: the round's global model on its first
    batch; FLSim re-evaluates a selected client over all its data at the round's global model).
    FLSim's utility is the summed loss ``n_i L_i`` by default (``count_normalization_exponent = 0``),
    whose float32 ``exp`` overflows past ``beta n_i L_i = 88``; ours is the mean loss, FLSim's
    ``count_normalization_exponent = 1``, with the softmax taken relative to the largest loss.
    """

    name = "high-loss"
    inverse_temperature: float = 1.0
    initial_evaluation: bool = True
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "inverse_temperature": Interval(float, 0, 1e300, closed="both"),
        "initial_evaluation": Boolean(),
        "aggregation": AGGREGATION_OPTIONS,
    }
    _renamed_parameters: ClassVar[dict[str, str]] = {
        "temperature": "use inverse_temperature = 1 / temperature (it multiplies the loss, as FLSim's "
        "softmax_temperature does)",
    }

    def init(self, federation: Federation, num_sampled: int) -> LossState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        return init_loss_state(federation, m)

    def initial_phase(self) -> FirstPhase | None:
        """FLSim's initial evaluation: every available client's loss over all its data, once."""
        return EVERY_LOSS if self.initial_evaluation else None

    def select(self, state: LossState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        ids = np.flatnonzero(state.available)
        losses = state.losses[ids]
        known = np.isfinite(losses)
        top = float(losses[known].max()) if known.any() else 0.0
        # log weights relative to the highest loss: at most 0, so nothing overflows to +inf.
        with np.errstate(over="ignore", invalid="ignore"):
            scores = np.where(known, losses - top, 0.0) * self.inverse_temperature
        scores = np.where(np.isnan(scores), 0.0, scores)  # 0 * inf (beta = 0 and an infinite gap)
        clients = ids[gumbel_top_k(scores, state.num_sampled, rng)]
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: LossState, feedback: Feedback) -> LossState:
        return update_loss_state(state, feedback)


@plain_data
@dataclass(frozen=True, eq=False)
class RoundRobinState(LossState):
    """:class:`LossState` plus the clients already visited in the current cycle."""

    visited: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    _array_dtypes: ClassVar[DTypeTable] = {"visited": np.bool_}

    def check_invariants(self) -> None:
        super().check_invariants()
        check_mask("RoundRobinState", "visited", self.visited, int(self.importances.size))


@register_sampler
@dataclass(frozen=True, kw_only=True)
class RoundRobinSampler(RuleSampler[LossState]):
    """Random round robin: ``m`` available clients a round, uniformly among those not yet visited
    in the current cycle; a cycle ends when every available client has been visited.

    When fewer than ``m`` unvisited clients remain, all of them are taken and the round is filled
    uniformly from the others; those fill-ins count as visited in the next cycle. A client is
    visited when it is selected, whether or not it returns. Weights by ``aggregation``.
    """

    name = "round-robin"
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"aggregation": AGGREGATION_OPTIONS}

    def init(self, federation: Federation, num_sampled: int) -> RoundRobinState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        n = federation.num_clients
        base = init_loss_state(federation, m)
        return RoundRobinState(**{**base.__dict__, "visited": np.zeros(n, dtype=bool)})

    def select(self, state: LossState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        assert isinstance(state, RoundRobinState)
        fresh = np.flatnonzero(state.available & ~state.visited)
        m = state.num_sampled
        if fresh.size >= m:
            clients = rng.choice(fresh, size=m, replace=False)
        else:
            others = np.flatnonzero(state.available & state.visited)
            fill = rng.choice(others, size=min(m - fresh.size, others.size), replace=False)
            clients = np.concatenate([rng.permutation(fresh), fill])
        clients = clients.astype(np.int64)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: LossState, feedback: Feedback) -> RoundRobinState:
        assert isinstance(state, RoundRobinState)
        base = update_loss_state(state, feedback)
        selected = np.zeros(state.visited.size, dtype=bool)
        selected[feedback.selection.clients] = True
        visited = state.visited | selected
        if visited[base.available].all():  # the cycle is complete: fill-ins open the next one
            visited = selected & state.visited
        return RoundRobinState(**{**base.__dict__, "visited": visited})
