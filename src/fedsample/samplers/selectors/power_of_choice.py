"""Power-of-Choice (Cho, Wang and Joshi, AISTATS 2022): ask ``d`` candidates, keep the ``m`` with the highest loss.

Each round the server draws a candidate set ``A`` of ``d >= m`` clients *without replacement*
with probabilities ``p_i`` (Alg. 1, step 1), the candidates report their local loss ``F_k(w)`` at
the current global model (step 2), and the ``m`` candidates with the highest loss train (step 3);
the global model is the plain average of their models (weight ``1/m``). The paper's variants
differ only in where the candidates' losses come from:

* ``pow-d``: each candidate evaluates ``F_k(w)`` on all its local data (an extra round trip);
* ``cpow-d``: each candidate estimates it on a mini-batch of ``b`` samples (cheaper);
* ``rpow-d``: no extra communication: the server ranks candidates by the loss each reported the
  last time it trained (the average of its local iterations' losses), a stale value.

The variant is the ``variant`` parameter. ``rpow-d`` (the default) is a one-phase sampler: the
state keeps each client's last reported loss and ``sample`` ranks the candidates by it. ``pow-d``
and ``cpow-d`` are two-phase (:mod:`fedsample.samplers.two_phase`): the engine draws the candidates
(:meth:`PowerOfChoiceSampler.draw_candidates`, among the round's available clients), runs their
forward pass at the global model (all their data, or ``b = loss_batch`` samples), hands the losses
to ``update`` before the draw, and ``sample`` keeps the ``m`` highest. A caller outside the engine
runs the same round with :meth:`PowerOfChoiceSampler.draw_candidates`, ``update`` with the
candidates' losses and ``sample`` (:mod:`fedsample.samplers.two_phase`), or with
:meth:`PowerOfChoiceSampler.candidates` and :meth:`PowerOfChoiceSampler.choose`. pow-d and cpow-d
refuse to draw from a state that read no report, and a second feedback for a round already
reported: in a plain ``sample`` / ``update`` loop the round's feedback would become the next round's
candidates, narrowing them to the last selection (3 distinct clients in 50 rounds).
Selection favours high-loss clients, so the scheme is biased (``E[w_i] != p_i``); the paper shows it
converges faster with a non-vanishing error floor. See ``docs/selection-systems.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._selection import Selection
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
from fedsample.samplers.two_phase import FirstPhase, check_report_round, check_reported, reported_round

__all__ = ["PowerOfChoiceSampler"]


@register_sampler
@dataclass(frozen=True, kw_only=True)
class PowerOfChoiceSampler(RuleSampler[LossState]):
    """Power-of-Choice selection (rpow-d by :meth:`sample`; pow-d and cpow-d through
    :meth:`candidates` and :meth:`choose`).

    Hyperparameters
    ---------------
    num_candidates:
        ``d``, the candidate set's size; ``None`` (default) takes ``d = 2m`` (one of the paper's
        settings), capped at the number of available clients. At least ``m``.
    aggregation:
        ``"average"`` (default, the paper's ``1/m``) or ``"size"`` (``p_i / sum_S p_j``).
    variant:
        ``"rpow-d"`` (default: the candidates' last reported training losses, no extra pass),
        ``"pow-d"`` (their current loss over all their local data) or ``"cpow-d"`` (over a
        mini-batch); the last two make the round two-phase.
    loss_batch:
        cpow-d's mini-batch size ``b``; ``None`` (default) takes the round's training batch size.
        Only with ``variant="cpow-d"``.

    Choices: a client that has never reported a loss ranks above every reported one (so that the
    stale ranking of rpow-d tries each client once); ties are broken at random. Only available
    clients are candidates.
    """

    name = "power-of-choice"
    num_candidates: int | None = None
    aggregation: Aggregation = "average"
    variant: Literal["rpow-d", "pow-d", "cpow-d"] = "rpow-d"
    loss_batch: int | None = None
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "num_candidates": NoneOr(Interval(int, 1, None, closed="left")),
        "aggregation": AGGREGATION_OPTIONS,
        "variant": Options(("rpow-d", "pow-d", "cpow-d")),
        "loss_batch": NoneOr(Interval(int, 1, None, closed="left")),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_batch is not None and self.variant != "cpow-d":
            raise invalid("loss_batch", type(self).__name__, "None unless variant='cpow-d'", self.loss_batch)

    @property
    def two_phase(self) -> bool:  # type: ignore[override]
        """pow-d and cpow-d read the candidates' current losses before the draw."""
        return self.variant != "rpow-d"

    def first_phase(self) -> FirstPhase:
        """The candidates' forward pass at the global model: all their data (pow-d) or ``b`` samples (cpow-d)."""
        if self.variant == "cpow-d":
            return FirstPhase(report="batch-losses", loss_batch=self.loss_batch)
        return FirstPhase(report="losses")

    def init(self, federation: Federation, num_sampled: int) -> LossState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        if self.num_candidates is not None and not m <= self.num_candidates <= federation.num_clients:
            raise invalid(
                "num_candidates",
                f"{type(self).__name__}.init",
                f"an int in the range [num_sampled, num_clients] = [{m}, {federation.num_clients}]",
                self.num_candidates,
            )
        return init_loss_state(federation, m)

    def candidates(self, state: LossState, rng: np.random.Generator) -> IntArray:
        """The candidate set ``A``: ``d`` available clients drawn without replacement by ``p``."""
        return self._candidates_among(state, np.flatnonzero(state.available), rng)

    def _candidates_among(self, state: LossState, ids: IntArray, rng: np.random.Generator) -> IntArray:
        d = 2 * state.num_sampled if self.num_candidates is None else self.num_candidates
        return np.sort(ids[gumbel_top_k(np.log(state.importances[ids]), d, rng)])

    def draw_candidates(self, state: LossState, available: IntArray, rng: np.random.Generator) -> Selection:
        """pow-d and cpow-d's first phase: ``A`` among the ``available`` client ids (weights ``p_i``, not used)."""
        ids = self._candidates_among(state, np.asarray(available, dtype=np.int64), rng)
        return Selection(clients=ids, weights=state.importances[ids])

    def choose(
        self, state: LossState, candidates: IntArray, losses: FloatArray, rng: np.random.Generator
    ) -> tuple[IntArray, FloatArray]:
        """The ``m`` candidates with the highest ``losses``, ties at random, and their weights; a loss
        that is not finite (none reported yet) ranks first."""
        owner = f"{type(self).__name__}.choose"
        ids = np.asarray(candidates, dtype=np.int64)
        n = state.importances.size
        if ids.ndim != 1 or np.any((ids < 0) | (ids >= n)) or np.unique(ids).size != ids.size:
            raise invalid("candidates", owner, f"distinct client ids in [0, {n})", candidates)
        values = np.asarray(losses, dtype=np.float64)
        if values.shape != ids.shape:
            raise invalid("losses", owner, f"one loss per candidate ({ids.size})", values)
        rank = np.where(np.isfinite(values), values, np.inf)
        order = np.lexsort((rng.random(ids.size), -rank))  # highest loss first, random among ties
        clients = np.sort(ids[order[: state.num_sampled]])
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def select(self, state: LossState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        if self.variant != "rpow-d":
            check_reported(state.round, f"{type(self).__name__}.sample", f"variant {self.variant!r}")
        candidates = self.candidates(state, rng)
        return self.choose(state, candidates, state.losses[candidates], rng)

    def update(self, state: LossState, feedback: Feedback) -> LossState:
        """rpow-d: the round's kept clients' losses. pow-d and cpow-d: the report of the round's
        candidates before the draw, which then ranks exactly them (they become the available set);
        a feedback of a round already reported is refused (:func:`~fedsample.samplers.two_phase.check_report_round`)."""
        if self.variant == "rpow-d":
            return update_loss_state(state, feedback)
        check_report_round(state.round, feedback, f"{type(self).__name__}.update", f"variant {self.variant!r}")
        new = update_loss_state(state, feedback)
        available = np.zeros(state.importances.size, dtype=bool)
        available[np.asarray(feedback.selection.clients, dtype=np.int64)] = True
        return replace(new, available=available, round=reported_round(state.round, feedback))
