"""Who actually takes part in a round: availability, over-selection, failures and the weight correction.

A :class:`~fedsample.participation.setting.Participation` setting says which clients can be selected (an
availability model), how many are asked (over-selection), which selected clients fail (dropout; a non-finite update is
always rejected), and how the aggregation weights of the clients that are kept are corrected (the
policy of :func:`fedsample.participation.policies.correct_weights`). The default is the papers' setting:
everyone available, nobody fails, and the weights are the sampler's.

One round, for a sampler state and a run seed ``s`` (numpy only; the engine and
:mod:`fedsample.stats.participation` share these functions):

1. **Selection among available clients** (:func:`select_participants`). The sampler draws
   ``S_t`` from the whole population with the stream ``(s, SAMPLING, t)``. Entries whose client is
   unavailable in round ``t`` are then handled in one of two ways:

   * *redrawn* when the sampler's design draws its entries independently, one per row (the
     :class:`~fedsample.samplers.row_draws.RowDraws` protocol: a :class:`~fedsample.designs.RowDesign`
     of MD, the clustered samplers, OSMD and the bandits drawing with replacement, and the MD and
     clustered population samplers) and ``redraws > 0``: an unavailable entry of row ``k`` is
     replaced by fresh draws from row ``k`` (stream ``(s, AVAILABILITY, t)``) by the one redraw loop,
     :func:`~fedsample.samplers.row_draws.redraw_unavailable` (batches of candidates doubling each
     try, ``redraws`` tries), and gets the weight of the client it lands on. Each row thus draws
     from ``q_k`` restricted to the available set ``A_t``: the round keeps its size, but the weights
     are those of a design
     *conditioned on* ``A_t`` (``E[w_i | A_t] = sum_k w_i q_ki 1{i in A_t} / Q_k(A_t)``), which no
     policy can correct without ``Q_k(A_t)``; :mod:`fedsample.stats.participation` reports the
     resulting bias. An entry still unavailable after ``redraws`` tries is skipped.
   * *skipped* otherwise (fixed-size, Bernoulli, full and data-level designs, or ``redraws = 0``):
     the unavailable client is treated like one that failed, with return probability ``a_i``.
     Under the ``"inverse-probability"`` policy with known ``a_i`` the weights stay unbiased.

2. **Failures after selection.** A selected, available client drops out with probability ``d_i``
   (:class:`~fedsample.participation.availability.Dropout`); it is not trained. A trained client whose update holds
   a NaN or an infinity is rejected.

3. **Over-selection** (``over_selection = o > 0``): the sampler is initialised with
   ``m' = ceil(m (1 + o))`` clients per round and the server keeps the first ``m`` distinct
   clients to reply (reply times are i.i.d. uniforms hashed from ``(s, round, client)``), so that
   given ``R`` returned clients each is kept with probability ``min(1, m / R)``; the others are
   *late*. With ``o = 0`` every returned client is kept. The Flower strategy hands its real reply
   order (the replies' creation times) to :func:`settle_participants` instead (``reply_order``).
   With a system model (:mod:`fedsample.participation.system`), the engine hands the clients'
   simulated round times (``round_times``): the replies come in that order, and a client slower
   than the deadline is late too (docs/system.md).

4. **Correction** (:func:`settle_participants`). The weights of the kept clients are corrected by
   the policy; the others get zero. The inverse-probability policy divides by
   ``r_i * min(1, m / R)`` where ``r_i`` is client ``i``'s return probability once selected:
   ``(1 - d_i)`` times ``a_i`` when unavailability was skipped. Since the reply order is
   independent of everything else, ``E[1{kept} / (r_i min(1, m/R)) | S_t] = 1`` and
   ``E[w'_i] = E[w_i] = p_i`` for an unbiased sampler. With ``return_rates="estimated"``,
   ``r_i`` comes from a :class:`~fedsample.participation.estimators.ReturnRateEstimator` fed with every round's
   returns (available, not dropped and finite); it is the only way to account for rejected
   updates, whose probability no model knows. The policies for unknown rates carry their own
   state: ``"fedau"`` replaces ``r_i`` by FedAU's interval estimate (an
   :class:`~fedsample.participation.estimators.IntervalEstimator` per run), and ``"mifa"`` and
   ``"fedvarp"`` give the correction weights of the engine's remembered updates
   (:mod:`fedsample.participation.policies`, docs/failures.md).

Feedback to the sampler holds the kept clients only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsample._arrays import BoolArray, FloatArray, IntArray
from fedsample.participation.availability import AlwaysAvailable, hashed_uniforms
from fedsample.participation.mifa import Phase
from fedsample.participation.policies import Estimator, RoundWeights
from fedsample.participation.setting import Participation
from fedsample.rng import Stream, stream_rng
from fedsample.samplers._base import Sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers.row_draws import RowDraws, redraw_unavailable

__all__ = [
    "FAILURE_COUNTS",
    "Selected",
    "Settled",
    "select_participants",
    "settle_participants",
    "warmed_up",
]

# The failures a round records, in the order of the metrics columns.
FAILURE_COUNTS: tuple[str, ...] = ("unavailable", "dropped", "rejected", "late")
_SALT_REPLY = 0x4E71


@dataclass(frozen=True, eq=False)
class Selected:
    """A round's selection after availability, before training (arrays per distinct client, sorted)."""

    selection: Selection
    clients: IntArray
    weights: FloatArray
    available: BoolArray
    returns: BoolArray
    return_probabilities: FloatArray | None
    unavailable: int

    @property
    def trains(self) -> BoolArray:
        """The clients that train: available and not dropped out."""
        out: BoolArray = self.available & self.returns
        return out


@dataclass(frozen=True, eq=False)
class Settled:
    """A round's outcome: which selected clients are kept, their corrected weights, the failure counts."""

    kept: BoolArray
    weights: FloatArray
    counts: dict[str, int]
    missed_deadline: int = 0
    duration: float = 0.0
    # Per distinct selected client, whether it returned after the deadline (None without a clock).
    missed: BoolArray | None = None


def _row_redraw_design(sampler: Sampler[Any], state: Any, selection: Selection) -> RowDraws | None:
    """The design whose rows the selection's entries come from, when entry ``k`` is a draw of row ``draw_rows[k]``."""
    # A sampler with its own draw: its entries are not the design's rows, unless it says they are.
    if type(sampler).sample is not Sampler.sample and not getattr(sampler, "draws_by_rows", False):
        return None
    design = sampler.design(state)
    if isinstance(design, RowDraws) and design.draw_rows.size == selection.num_draws:
        return design
    return None


def select_participants(
    sampler: Sampler[Any],
    state: Any,
    participation: Participation,
    *,
    seed: int,
    round: int,
    num_clients: int,
) -> Selected:
    """Draw round ``round``'s selection among the available clients and decide who drops out.

    ``participation`` is the run's setting (:meth:`Participation.for_run` of ``seed``). With the
    default setting this is ``sampler.sample(state, stream_rng(seed, SAMPLING, round))``.
    """
    selection = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, round))
    availability = participation.availability
    unavailable = 0
    design: RowDraws | None = None
    if not isinstance(availability, AlwaysAvailable) and selection.num_draws:
        design = _row_redraw_design(sampler, state, selection) if participation.redraws else None
        if design is None:
            unavailable = int((~availability.available(round, selection.clients)).sum())
        else:
            rng = stream_rng(seed, Stream.AVAILABILITY, round)
            redrawn = redraw_unavailable(
                design, design.draw_rows, selection.clients, availability, round, rng, redraws=participation.redraws
            )
            unavailable = redrawn.unavailable
            if redrawn.unavailable:
                selection = Selection(clients=redrawn.clients, weights=design.entry_weights(redrawn.clients))
    ids, weights = selection.distinct()
    available = availability.available(round, ids) if not isinstance(availability, AlwaysAvailable) else None
    if available is None:
        available = np.ones(ids.size, dtype=bool)
    dropout = participation.dropout
    returns = dropout.returns(round, ids) if dropout is not None else np.ones(ids.size, dtype=bool)
    probabilities = _known_return_probabilities(participation, ids, num_clients, availability_skipped=design is None)
    return Selected(selection, ids, weights, available, returns, probabilities, unavailable)


def _known_return_probabilities(
    participation: Participation, clients: IntArray, num_clients: int, *, availability_skipped: bool
) -> FloatArray | None:
    """``r_i = (1 - d_i) a_i`` (``a_i`` only where unavailable clients are skipped), or ``None`` if unknown."""
    r = np.ones(clients.size)
    if participation.dropout is not None:
        r *= participation.dropout.return_probabilities(clients)
    if availability_skipped and not isinstance(participation.availability, AlwaysAvailable):
        a = participation.availability.probabilities(num_clients)
        if a is None:
            return None
        r *= np.asarray(a, dtype=np.float64)[clients]
    return r


def settle_participants(
    selected: Selected,
    finite: BoolArray,
    participation: Participation,
    *,
    seed: int,
    round: int,
    num_kept: int,
    estimator: Estimator,
    reply_order: IntArray | None = None,
    round_times: FloatArray | None = None,
    importances: FloatArray | None = None,
) -> Settled:
    """Keep the first ``num_kept`` returned clients and correct their weights by the policy.

    ``finite`` flags, per distinct client of ``selected``, whether its update was finite (only read
    where the client trained). ``estimator`` (estimated return rates) is read, then fed this round.
    ``reply_order`` is the hook for real reply times: the positions of ``selected.clients`` in the
    order their replies came (a permutation; the Flower strategy sorts by the replies' creation
    times). By default the order is simulated: i.i.d. uniforms hashed from ``(seed, round, client)``.
    The correction is exact when the order is independent of the clients.

    ``round_times`` (seconds per distinct client of ``selected``, from the run's system model) is the
    simulated clock: the replies come in the order of these times, a client whose time exceeds the
    model's deadline is late (counted in ``late`` and in ``missed_deadline``), and the round lasts
    until the kept clients have replied, or until the deadline when fewer than ``num_kept`` replied
    in time and a selected client is still awaited (see docs/system.md).

    Under ``"fedau"`` ``estimator`` is the run's :class:`~fedsample.participation.estimators.IntervalEstimator`
    (read, then fed with who returned in time); a kept client's weight is ``w_i omega_i / min(1, m / R)``.
    Under ``"mifa"`` the weights are the kept clients' ``importances`` ``p_i`` (every client's, given; ``1/N``
    when released, whose warm-up the caller applies first: :func:`warmed_up`),
    under ``"fedvarp"`` the renormalised ``w_i``: the correction weights ``c_i`` of the remembered updates
    (:func:`~fedsample.engine.aggregation.memory_step` applies them).
    """
    returned = selected.trains & np.asarray(finite, dtype=bool)
    on_time = np.ones(returned.size, dtype=bool)
    deadline = participation.system.deadline if participation.system is not None else None
    if round_times is not None:
        times = np.asarray(round_times, dtype=np.float64)
        if deadline is not None:
            on_time = times <= deadline
        if reply_order is None:
            reply_order = np.argsort(np.where(returned, times, np.inf), kind="stable")
    missed = returned & ~on_time
    in_time = returned & on_time
    num_returned = int(in_time.sum())
    kept = in_time
    keep_probability = 1.0
    if participation.over_selection > 0 and num_returned > num_kept:
        if reply_order is None:
            reply = hashed_uniforms(seed, _SALT_REPLY, round, selected.clients)
            reply_order = np.argsort(np.where(returned, reply, np.inf), kind="stable")
        order = np.asarray(reply_order, dtype=np.int64)
        kept = np.zeros_like(returned)
        kept[order[in_time[order]][:num_kept]] = True
        keep_probability = num_kept / num_returned
    policy = participation.aggregation
    rates = policy.round_rates(estimator, selected.clients, in_time, selected.return_probabilities)
    counts = {
        "unavailable": selected.unavailable,
        "dropped": int((selected.available & ~selected.returns).sum()),
        "rejected": int((selected.trains & ~np.asarray(finite, dtype=bool)).sum()),
        "late": int((returned & ~kept).sum()),
    }
    extra: dict[str, Any] = {}
    if round_times is not None:
        duration = _duration(selected, kept, times, num_kept, deadline)
        extra = {"missed_deadline": int(missed.sum()), "missed": missed, "duration": duration}
    chosen = RoundWeights(selected.clients, selected.weights, kept, rates, keep_probability, importances)
    return Settled(kept, policy.weights(chosen), counts, **extra)


def _duration(selected: Selected, kept: BoolArray, times: FloatArray, num_kept: int, deadline: float | None) -> float:
    """The simulated round's length: the last kept reply, or the deadline while a selected client is awaited.

    The server knows who was unavailable (not asked) but not who dropped out or is slow: with fewer
    than ``num_kept`` kept replies it waits for every trained or dropped client until the deadline.
    """
    last = float(times[kept].max()) if kept.any() else 0.0
    if int(kept.sum()) >= num_kept or deadline is None:
        return last
    awaited = selected.available & ~kept & ~(selected.trains & (times <= deadline))
    return float(deadline) if awaited.any() else last


def warmed_up(selected: Selected, phase: Phase, num_clients: int) -> Selected:
    """What trains in a round of ``phase`` of the released MIFA (:mod:`fedsample.participation.mifa`):
    ``selected`` itself (``"train"``), nobody (``"wait"``), or every one of the ``num_clients`` clients,
    available or not, as the released code fills its memory (``"fill"``; nobody drops out). The round's
    selection and its count of unavailable entries stay."""
    if phase == "train":
        return selected
    ids = np.arange(num_clients if phase == "fill" else 0, dtype=np.int64)
    flags = np.ones(ids.size, dtype=bool)
    weights = np.full(ids.size, 1.0 / num_clients)
    return dataclasses.replace(
        selected, clients=ids, weights=weights, available=flags, returns=flags.copy(), return_probabilities=None
    )
