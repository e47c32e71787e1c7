"""Who actually takes part in a round: availability, over-selection, failures and the weight correction.

A :class:`Participation` setting says which clients can be selected (an availability model), how
many are asked (over-selection), which selected clients fail (dropout; a non-finite update is
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
   ``r_i`` comes from a :class:`~fedsample.participation.policies.ReturnRateEstimator` fed with every round's
   returns (available, not dropped and finite); it is the only way to account for rejected
   updates, whose probability no model knows. The policies for unknown rates carry their own
   state: ``"fedau"`` replaces ``r_i`` by FedAU's interval estimate (an
   :class:`~fedsample.participation.policies.IntervalEstimator` per run), and ``"mifa"`` and
   ``"fedvarp"`` give the correction weights of the engine's remembered updates
   (:mod:`fedsample.participation.policies`, docs/failures.md).

Feedback to the sampler holds the kept clients only.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from fedsample._arrays import BoolArray, FloatArray, IntArray
from fedsample._validation import Constraint, Interval, Options, check_params, invalid
from fedsample.participation.availability import AlwaysAvailable, Availability, Dropout, hashed_uniforms
from fedsample.participation.mifa import MIFA_VARIANTS, MemoryWarmup
from fedsample.participation.policies import (
    POLICIES,
    UNKNOWN_PARTICIPATION_POLICIES,
    AggregationPolicy,
    IntervalEstimator,
    ReturnRateEstimator,
    correct_weights,
    unknown_rate_weights,
)
from fedsample.participation.system import SystemModel
from fedsample.rng import Stream, stream_rng
from fedsample.samplers._base import Sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers.row_draws import RowDraws, redraw_unavailable

__all__ = [
    "FAILURE_COUNTS",
    "Estimator",
    "Participation",
    "Selected",
    "Settled",
    "select_participants",
    "settle_participants",
]

# The failures a round records, in the order of the metrics columns.
FAILURE_COUNTS: tuple[str, ...] = ("unavailable", "dropped", "rejected", "late")
_SALT_REPLY = 0x4E71
# A run's state of a policy that learns across rounds (None when there is none).
Estimator = ReturnRateEstimator | IntervalEstimator | MemoryWarmup | None


def _mix_seed(model_seed: int, run_seed: int) -> int:
    """A model's seed for one run: the runs of a comparison see independent fates."""
    return int(np.random.SeedSequence([int(model_seed), int(run_seed)]).generate_state(1, np.uint64)[0] >> 1)


@dataclass(frozen=True, kw_only=True)
class Participation:
    """How clients take part in the rounds of a simulation (see the module doc).

    Parameters
    ----------
    availability:
        Which clients can be selected in a round (default: everyone, always).
    dropout:
        Failure after selection (``None``: nobody drops out).
    over_selection:
        ``o >= 0``: ask ``ceil(m (1 + o))`` clients and keep the first ``m`` to reply.
    policy:
        ``"renormalise"``, ``"inverse-probability"`` or ``"ignore"``
        (:func:`~fedsample.participation.policies.correct_weights`), or one of the policies for unknown
        participation rates: ``"fedau"``, ``"mifa"``, ``"fedvarp"`` (:mod:`fedsample.participation.policies`).
    return_rates:
        ``"known"`` (from the models' probabilities) or ``"estimated"`` (a
        :class:`~fedsample.participation.policies.ReturnRateEstimator` per run, part of the checkpoints).
    redraws:
        Tries of the redraw loop for an unavailable entry of a per-row design
        (:func:`~fedsample.samplers.row_draws.redraw_unavailable`; 0: skip unavailable clients).
    system:
        The clients' speeds and links and the round deadline (:mod:`fedsample.participation.system`;
        ``None``: no clock, replies in a hashed random order).
    fedau_cutoff:
        ``K``, FedAU's cutoff: an interval without a return is recorded once it reaches ``K`` rounds
        (:class:`~fedsample.participation.policies.IntervalEstimator`; the authors' default, 100000, is
        effectively none).
    mifa_variant:
        The ``"mifa"`` policy's memory: ``"zeros"`` (IBM/fedau's port) or ``"released"`` (its authors' code,
        with a warm-up until every client has taken part: :mod:`fedsample.participation.mifa`).
    """

    availability: Availability = field(default_factory=AlwaysAvailable)
    dropout: Dropout | None = None
    over_selection: float = 0.0
    policy: AggregationPolicy = "renormalise"
    return_rates: Literal["known", "estimated"] = "known"
    redraws: int = 10
    system: SystemModel | None = None
    fedau_cutoff: int = 100_000
    mifa_variant: Literal["zeros", "released"] = "zeros"

    # The scalar parameters' constraints (fedsample._params.declared reads them with the defaults above).
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "over_selection": Interval(float, 0, 10, closed="both"),
        "policy": Options(POLICIES),
        "return_rates": Options(("known", "estimated")),
        "redraws": Interval(int, 0, 1000, closed="both"),
        "fedau_cutoff": Interval(int, 1, 10**9, closed="both"),
        "mifa_variant": Options(MIFA_VARIANTS),
    }

    def __post_init__(self) -> None:
        owner = "Participation"
        if not isinstance(self.availability, Availability):
            raise invalid("availability", owner, "an Availability model", self.availability)
        if self.dropout is not None and not isinstance(self.dropout, Dropout):
            raise invalid("dropout", owner, "a Dropout model or None", self.dropout)
        if self.system is not None and not isinstance(self.system, SystemModel):
            raise invalid("system", owner, "a SystemModel or None", self.system)
        constraints = self._parameter_constraints
        check_params(owner, {name: getattr(self, name) for name in constraints}, constraints)
        if self.released_mifa and self.over_selection > 0:  # every client fills its memory in one round
            raise invalid("over_selection", owner, "0 with mifa_variant='released'", self.over_selection)

    @property
    def is_default(self) -> bool:
        """Everyone available, nobody fails, nobody over-selected: the sampler's weights as they are."""
        no_deadline = self.system is None or self.system.deadline is None
        return (
            isinstance(self.availability, AlwaysAvailable)
            and self.dropout is None
            and self.over_selection == 0
            and no_deadline
        )

    def num_asked(self, num_sampled: int) -> int:
        """``ceil(m (1 + o))``, the ``num_sampled`` the sampler is initialised with."""
        if self.over_selection == 0:
            return int(num_sampled)
        # The epsilon keeps m (1 + o) = 12.000000000000002 from asking 13 clients.
        return math.ceil(num_sampled * (1.0 + self.over_selection) - 1e-9)

    def for_run(self, seed: int) -> Participation:
        """This setting with the models' seeds mixed with a run's ``seed`` (independent fates per run)."""

        def reseed(model: Any) -> Any:
            if model is None or "seed" not in {f.name for f in dataclasses.fields(model)}:
                return model
            return dataclasses.replace(model, seed=_mix_seed(model.seed, seed))

        return dataclasses.replace(self, availability=reseed(self.availability), dropout=reseed(self.dropout))

    @property
    def released_mifa(self) -> bool:
        """The ``"mifa"`` policy as its authors released it (:mod:`fedsample.participation.mifa`)."""
        return self.policy == "mifa" and self.mifa_variant == "released"

    def new_estimator(self, num_clients: int) -> Estimator:
        """FedAU's interval estimator, the released MIFA's warm-up, else estimated return rates (or ``None``)."""
        if self.policy == "fedau":
            return IntervalEstimator(num_clients, cutoff=self.fedau_cutoff)
        if self.released_mifa:
            return MemoryWarmup(num_clients)
        return ReturnRateEstimator(num_clients) if self.return_rates == "estimated" else None

    def check_known_rates(self, num_clients: int, owner: str) -> None:
        """Fail early when the inverse-probability policy needs availability probabilities the model lacks."""
        if (
            self.policy == "inverse-probability"
            and self.return_rates == "known"
            and self.availability.probabilities(num_clients) is None
        ):
            raise invalid(
                "participation",
                owner,
                "return_rates='estimated' with the inverse-probability policy when the availability model "
                "has no probabilities (a trace)",
                "return_rates='known'",
            )


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

    Under ``"fedau"`` ``estimator`` is the run's :class:`~fedsample.participation.policies.IntervalEstimator`
    (read, then fed with who returned in time); a kept client's weight is ``w_i omega_i / min(1, m / R)``.
    Under ``"mifa"`` the weights are the kept clients' ``importances`` ``p_i`` (every client's, given; ``1/N``
    when released, whose warm-up the caller applies first: :func:`~fedsample.participation.mifa.warmed_up`),
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
    policy = participation.policy
    factors: FloatArray | None = None
    rates: FloatArray | None = selected.return_probabilities
    if policy == "fedau":
        if not isinstance(estimator, IntervalEstimator):
            raise invalid("estimator", "settle_participants", "an IntervalEstimator under 'fedau'", estimator)
        factors = estimator.factors(selected.clients)
        estimator.observe(selected.clients, in_time)
    elif isinstance(estimator, ReturnRateEstimator):
        rates = estimator.rates(selected.clients)
        estimator.observe(selected.clients, in_time)
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
    if policy in UNKNOWN_PARTICIPATION_POLICIES:
        chosen, variant = (selected.clients, selected.weights), participation.mifa_variant
        weights = unknown_rate_weights(
            policy, kept, *chosen, factors, keep_probability, importances, mifa_variant=variant
        )
        return Settled(kept, weights, counts, **extra)
    if kept.all() and (rates is None or np.all(rates == 1.0)):
        return Settled(kept, selected.weights.copy(), counts, **extra)
    probabilities = None
    if policy == "inverse-probability":
        if rates is None:
            raise invalid("participation", "settle_participants", "known return probabilities", None)
        probabilities = rates * keep_probability
    weights = correct_weights(selected.weights, kept, policy, probabilities)
    return Settled(kept, weights, counts, **extra)


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
