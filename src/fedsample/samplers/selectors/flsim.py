"""FLSim's selectors by sample count and in sequence (facebookresearch/FLSim, ``simple_user_selector.py``).

* :class:`NumberOfSamplesSampler` (``number-of-samples``, FLSim's ``NumberOfSamplesActiveUserSelector``):
  ``m`` distinct available clients drawn one after another with probabilities proportional to
  ``n_i^exponent`` (``torch.multinomial(..., replacement=False)``: successive sampling, which the
  Gumbel-top-k trick draws in one pass). Not ``md``: MD draws *with* replacement (a client can be
  drawn twice) and weighs ``count_i / m``, unbiased; this draws distinct clients and weighs them by
  ``aggregation`` (FLSim's trainer: FedAvg by example counts), biased.
* :class:`SequentialSampler` (``sequential``, FLSim's ``SequentialActiveUserSelector``): clients
  ``0..m-1``, then ``m..2m-1``, and so on; the last round of a pass takes the clients left (fewer
  than ``m`` when ``m`` does not divide ``n``), and the next pass starts again at client 0.

FLSim's ``HighLossActiveUserSelector`` is :class:`~fedsample.samplers.selectors.rules.HighLossSampler`,
its ``RandomRoundRobinActiveUserSelector`` :class:`~fedsample.samplers.selectors.rules.RoundRobinSampler`.
FLSim removed the first two selectors (and ``HighLoss``) in commit ``202df7a`` (2022-06-03); the
last commit holding them is ``82b7fb36de8926e1b63fcc15d0ddc63caad71e2f``, the one
``benchmarks/reference/`` compares against.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from fedsample._arrays import DTypeTable, FloatArray, IntArray
from fedsample._invariants import check_count, check_values
from fedsample._validation import Constraint, Interval
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers.selectors.rules import (
    AGGREGATION_OPTIONS,
    Aggregation,
    LossState,
    RuleSampler,
    gumbel_top_k,
    init_loss_state,
    participant_weights,
    update_loss_state,
)
from fedsample.serialization import plain_data

__all__ = ["NumberOfSamplesSampler", "SequentialSampler", "SequentialState", "SizesState"]


@plain_data
@dataclass(frozen=True, eq=False)
class SizesState(LossState):
    """:class:`LossState` (availability, round) plus each client's number of samples ``n_i``."""

    sizes: FloatArray = field(default_factory=lambda: np.zeros(0))

    _array_dtypes: ClassVar[DTypeTable] = {"sizes": np.float64}

    def check_invariants(self) -> None:
        super().check_invariants()
        check_values("SizesState", "sizes", self.sizes, shape=(int(self.importances.size),), low=1.0)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class NumberOfSamplesSampler(RuleSampler[SizesState]):
    """``m`` distinct available clients, drawn successively with ``P ∝ n_i^exponent`` (FLSim's NumberOfSamples).

    Hyperparameters: ``exponent`` (FLSim's, default 1: proportional to the sizes; 0: uniform) and
    ``aggregation`` (``"size"``, default: ``p_i / sum_S p_j``, FLSim's FedAvg by example counts;
    or ``"average"``). FLSim's ``fraction_uniformly_random`` and ``fraction_with_zero_prob`` are not
    offered (their defaults, 0, are what this draws). Biased (``E[w_i] != p_i``).
    """

    name = "number-of-samples"
    exponent: float = 1.0
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "exponent": Interval(float, -100, 100, closed="both"),
        "aggregation": AGGREGATION_OPTIONS,
    }

    def init(self, federation: Federation, num_sampled: int) -> SizesState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        base = init_loss_state(federation, m)
        return SizesState(**{**base.__dict__, "sizes": federation.sizes.astype(np.float64)})

    def select(self, state: SizesState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        ids = np.flatnonzero(state.available)
        # FLSim: torch.multinomial(n^e / sum n^e, m, replacement=False), successive sampling.
        picks = gumbel_top_k(self.exponent * np.log(state.sizes[ids]), state.num_sampled, rng)
        clients = ids[picks]
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: SizesState, feedback: Feedback) -> SizesState:
        base = update_loss_state(state, feedback)
        return replace(state, losses=base.losses, available=base.available, round=base.round)


@plain_data
@dataclass(frozen=True, eq=False)
class SequentialState(LossState):
    """:class:`LossState` (availability, round) plus the first client id the next round may take."""

    cursor: int = 0

    def check_invariants(self) -> None:
        super().check_invariants()
        check_count("SequentialState", "cursor", self.cursor, 0, int(self.importances.size))


@register_sampler
@dataclass(frozen=True, kw_only=True)
class SequentialSampler(RuleSampler[SequentialState]):
    """Clients in id order, ``m`` a round: FLSim's ``SequentialActiveUserSelector``.

    A round takes the first ``m`` available clients whose id is at least the cursor (0 at first);
    the next round's cursor is one past the last of them. When no available client is left at or
    after the cursor, the pass starts again at client 0. With every client available this is FLSim's
    sequence exactly: ``[0, m)``, ``[m, 2m)``, ..., the remaining ``n mod m`` clients, ``[0, m)``...
    Deterministic; weights by ``aggregation`` (``"size"`` default, or ``"average"``). Biased.
    """

    name = "sequential"
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"aggregation": AGGREGATION_OPTIONS}

    def init(self, federation: Federation, num_sampled: int) -> SequentialState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        base = init_loss_state(federation, m)
        return SequentialState(**{**base.__dict__, "cursor": 0})

    def select(self, state: SequentialState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        ids = np.flatnonzero(state.available)
        ahead = ids[ids >= state.cursor]
        clients = (ahead if ahead.size else ids)[: state.num_sampled].astype(np.int64)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: SequentialState, feedback: Feedback) -> SequentialState:
        clients, _ = self.select(state, np.random.default_rng(0))  # the round drawn from this state
        cursor = int(clients.max()) + 1 if clients.size else state.cursor
        base = update_loss_state(state, feedback)
        return replace(state, losses=base.losses, available=base.available, round=base.round, cursor=cursor)
