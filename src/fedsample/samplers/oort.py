"""Oort (Lai, Zhu, Madhyastha and Chowdhury, OSDI 2021): guided participant selection.

Oort ranks clients by a utility that multiplies *statistical* utility (how much a client's data
would reduce the loss) by a *system* penalty (how much it would lengthen the round), exploits the
best explored clients and explores unexplored ones:

* statistical utility (§4.2): ``U_i = |B_i| sqrt((1/|B_i|) sum_{k in B_i} Loss(k)^2)`` from the
  per-sample training losses of the client's last round; from :class:`Feedback`,
  ``n_i sqrt(loss_squares_i)``;
* staleness bonus (Alg. 1): ``+ sqrt(0.1 log R / L_i)``, ``R`` the current round and ``L_i`` the
  round the client last took part in, so clients not seen for long are revisited;
* system penalty (§4.3, eq. 2): ``x (T / t_i)^alpha`` when the client's round time ``t_i``
  exceeds the preferred round duration ``T``;
* pacer (§4.3, Alg. 1): every ``W`` rounds, when the summed utility of the last ``W`` rounds fell
  below that of the ``W`` before, ``T`` is relaxed (``T <- T + Delta``);
* exploitation with a cut-off (§4.4): of the ``(1 - epsilon) K`` exploited slots, every explored
  client whose utility is at least ``c`` times the ``(1 - epsilon) K``-th highest is admitted
  (``c = 0.95``, the confidence interval of the paper) and the slots are drawn among the admitted
  with probability proportional to utility;
* exploration (§4.4): the other ``epsilon K`` slots go to unexplored clients; ``epsilon`` decays
  by a factor per round down to a floor; they are drawn uniformly among the unexplored clients;
* stragglers (FedScale's aggregator, where Oort's selector runs): a selected client that did not
  reply before the round's deadline (``Feedback.timed_out``) counts as explored, with the mean
  statistical utility of the round's returned clients (0 when none returned) and, as its time, how
  long the server waited for it (a lower bound; FedScale's simulation uses the client's true time),
  so the system penalty keeps it out of later rounds instead of exploration retrying it;
* robustness (§4.4): statistical utilities are clipped at a high quantile of the explored
  clients' (``clip_quantile``), so one outlier loss cannot dominate, and clients that reported in
  more than ``blacklist_rounds`` rounds are no longer exploited (at most ``blacklist_fraction`` of
  the clients, the most frequent first).

Selection is among the available clients. Oort is biased by design: it does not reweight the
updates it gathers (the aggregation stays the framework's FedAvg over participants). Its bias at
a state is measured by :func:`fedsample.stats.monte_carlo_statistics` (``fedsample stats
--sampler-state``). Our choices where the paper leaves room are in ``docs/selection-systems.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from fedsample._arrays import BoolArray, DTypeTable, FloatArray, IntArray, frozen
from fedsample._invariants import check_mask, check_real, check_round, check_values
from fedsample._validation import Constraint, Interval, NoneOr
from fedsample.federation import Federation
from fedsample.samplers._base import Feedback, SamplerState, check_sampling_fields
from fedsample.samplers._registry import register_sampler
from fedsample.samplers.selectors import (
    AGGREGATION_OPTIONS,
    Aggregation,
    RuleSampler,
    feedback_availability,
    gumbel_top_k,
    participant_weights,
    returned_values,
)
from fedsample.serialization import plain_data

__all__ = ["OortSampler", "OortState"]

_BOOL_FIELDS = ("explored", "available")
_TINY = 1e-300


@plain_data
@dataclass(frozen=True, eq=False)
class OortState(SamplerState):
    """Oort's state: :class:`SamplerState`'s ``importances`` and ``num_sampled`` (``K``), and

    Attributes
    ----------
    sizes:
        ``|B_i|``: the samples a client trains on in a round (its ``n_i``).
    utility:
        Each explored client's last statistical utility ``U_i`` (0 while unexplored); for a client
        that last timed out, the mean utility of that round's returned clients.
    explored:
        Whether a client has reported a utility or timed out.
    last_round:
        ``L_i``: the round (1-based) the client was last selected, 0 if never.
    durations:
        ``t_i``: the client's last round time in seconds, ``inf`` while unknown; for a client that
        timed out, at least the seconds the server waited for it.
    available:
        Who may be selected next (all clients unless feedback says otherwise).
    epsilon:
        The current exploration factor.
    quantile:
        The level of the preferred duration ``T`` among the known round times (raised by the pacer).
    preferred_duration:
        ``T`` in seconds (infinite while no round time is known: no penalty).
    history:
        The summed statistical utility of each of the last ``2 W`` rounds (the pacer's window).
    round:
        Number of updates applied.
    participations:
        How many rounds each client reported a utility in (the blacklist's count). A state saved
        before this count was kept has none: every client then starts from zero.
    """

    sizes: FloatArray
    utility: FloatArray
    explored: np.ndarray
    last_round: IntArray
    durations: FloatArray
    available: np.ndarray
    epsilon: float
    quantile: float
    preferred_duration: float
    history: FloatArray
    round: int = 0
    participations: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    _array_dtypes: ClassVar[DTypeTable] = {
        **dict.fromkeys(("sizes", "utility", "durations", "history"), np.float64),
        **dict.fromkeys(_BOOL_FIELDS, np.bool_),
        **dict.fromkeys(("last_round", "participations"), np.int64),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.participations.size == 0 and self.importances.size:
            object.__setattr__(self, "participations", frozen(np.zeros(self.importances.size, dtype=np.int64)))
        for name in ("epsilon", "quantile", "preferred_duration"):
            object.__setattr__(self, name, float(getattr(self, name)))

    def check_invariants(self) -> None:
        owner = "OortState"
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        check_values(owner, "sizes", self.sizes, shape=(n,), low=0.0)
        check_values(owner, "utility", self.utility, shape=(n,), low=0.0)
        rounds = check_round(owner, "round", self.round)
        # A client was last selected, and reported, in a round already counted: a later round (2**62)
        # would be a round the run has not reached.
        check_values(owner, "last_round", self.last_round, shape=(n,), low=0, high=rounds, integer=True)
        check_values(owner, "participations", self.participations, shape=(n,), low=0, high=rounds, integer=True)
        check_values(owner, "durations", self.durations, shape=(n,), low=0.0, finite=False)
        check_values(owner, "history", self.history, shape=(None,), low=0.0)
        for name in _BOOL_FIELDS:
            check_mask(owner, name, getattr(self, name), n)
        check_real(owner, "epsilon", self.epsilon, 0.0, 1.0)
        check_real(owner, "quantile", self.quantile, 0.0, 1.0)
        check_real(owner, "preferred_duration", self.preferred_duration, 0.0, math.inf)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class OortSampler(RuleSampler[OortState]):
    """Oort's participant selection (see the module docstring for the rules and their sections).

    Hyperparameters
    ---------------
    exploration, exploration_decay, exploration_min:
        ``epsilon``'s start (0.9), its factor per round (0.98) and its floor (0.2).
    round_penalty:
        ``alpha`` of the system penalty ``(T / t_i)^alpha`` (2.0); 0 ignores round times.
    duration_quantile:
        The starting level of ``T`` among the known round times (0.3: the 30th percentile).
    pacer_window, pacer_step:
        ``W`` (20 rounds) and ``Delta``, the rise of ``T``'s level when utility stalls (0.1).
    cutoff:
        ``c``, the confidence cut-off of exploitation (0.95).
    staleness:
        The constant of the staleness bonus (0.1, Alg. 1).
    clip_quantile:
        Statistical utilities above this quantile of the exploitable clients' are clipped to it
        (0.95, §4.4); 1 keeps the largest, that is, no clipping.
    blacklist_rounds, blacklist_fraction:
        A client that reported in more than ``blacklist_rounds`` rounds is not exploited any more
        (``None``, the default, never blacklists, as Oort's released selector); at most a
        ``blacklist_fraction`` (0.3) of the clients are, those that took part most often first.
    aggregation:
        ``"size"`` (default: FedAvg over participants, ``p_i / sum_S p_j``) or ``"average"``.
    """

    name = "oort"
    needs_loss_squares = True
    exploration: float = 0.9
    exploration_decay: float = 0.98
    exploration_min: float = 0.2
    round_penalty: float = 2.0
    duration_quantile: float = 0.3
    pacer_window: int = 20
    pacer_step: float = 0.1
    cutoff: float = 0.95
    staleness: float = 0.1
    clip_quantile: float = 0.95
    blacklist_rounds: int | None = None
    blacklist_fraction: float = 0.3
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "exploration": Interval(float, 0, 1, closed="both"),
        "exploration_decay": Interval(float, 0, 1, closed="right"),
        "exploration_min": Interval(float, 0, 1, closed="both"),
        "round_penalty": Interval(float, 0, None, closed="left"),
        "duration_quantile": Interval(float, 0, 1, closed="both"),
        "pacer_window": Interval(int, 1, None, closed="left"),
        "pacer_step": Interval(float, 0, 1, closed="both"),
        "cutoff": Interval(float, 0, 1, closed="right"),
        "staleness": Interval(float, 0, None, closed="left"),
        "clip_quantile": Interval(float, 0, 1, closed="right"),
        "blacklist_rounds": NoneOr(Interval(int, 0, None, closed="left")),
        "blacklist_fraction": Interval(float, 0, 1, closed="both"),
        "aggregation": AGGREGATION_OPTIONS,
    }

    def init(self, federation: Federation, num_sampled: int) -> OortState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        n = federation.num_clients
        return OortState(
            importances=federation.importances,
            num_sampled=m,
            sizes=federation.sizes.astype(np.float64),
            utility=np.zeros(n),
            explored=np.zeros(n, dtype=bool),
            last_round=np.zeros(n, dtype=np.int64),
            durations=np.full(n, np.inf),
            available=np.ones(n, dtype=bool),
            epsilon=self.exploration,
            quantile=self.duration_quantile,
            preferred_duration=math.inf,
            history=np.zeros(0),
        )

    def scores(self, state: OortState, clients: IntArray) -> FloatArray:
        """Oort's utility of explored ``clients`` at the next round: normalised statistical utility
        plus the staleness bonus, times the system penalty."""
        utility = self.clipped_utility(state.utility[clients])
        top = float(utility.max(initial=0.0))
        score = utility / top if top > 0 else np.zeros(clients.size)
        current = state.round + 1
        last = np.maximum(state.last_round[clients], 1)
        score += np.sqrt(self.staleness * math.log(current) / last) if current > 1 else 0.0
        t = state.durations[clients]
        slow = np.isfinite(t) & (t > state.preferred_duration)  # unknown (infinite) times are not penalised
        if self.round_penalty > 0 and slow.any():
            score[slow] *= (state.preferred_duration / t[slow]) ** self.round_penalty
        return score

    def clipped_utility(self, utility: FloatArray) -> FloatArray:
        """``utility`` clipped at its ``clip_quantile``: the value at position ``floor(q k)`` (the
        last if beyond) of the ``k`` positive utilities sorted, as Oort's released selector does."""
        positive = utility[utility > 0]
        if positive.size == 0:
            return utility
        position = min(int(positive.size * self.clip_quantile), positive.size - 1)
        bound = float(np.partition(positive, position)[position])  # O(k), the sorted value at that position
        return np.minimum(utility, bound)

    def blacklisted(self, state: OortState) -> BoolArray:
        """The clients not to exploit: more than ``blacklist_rounds`` reports, at most
        ``floor(blacklist_fraction n)`` of them, the most frequent first (ties by id)."""
        blacklist = np.zeros(state.participations.size, dtype=bool)
        if self.blacklist_rounds is None:
            return blacklist
        over = np.flatnonzero(state.participations > self.blacklist_rounds)
        cap = int(self.blacklist_fraction * state.participations.size)
        if over.size > cap:
            over = over[np.argsort(-state.participations[over], kind="stable")[:cap]]
        blacklist[over] = True
        return blacklist

    def select(self, state: OortState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        explored = np.flatnonzero(state.explored & state.available & ~self.blacklisted(state))
        unexplored = np.flatnonzero(~state.explored & state.available)
        k = min(state.num_sampled, explored.size + unexplored.size)
        explore = min(unexplored.size, max(k - explored.size, round(state.epsilon * k)))
        exploit = k - explore
        chosen = [self._exploit(state, explored, exploit, rng)] if exploit else []
        if explore:
            chosen.append(rng.choice(unexplored, size=explore, replace=False).astype(np.int64))
        clients = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def _exploit(self, state: OortState, explored: IntArray, count: int, rng: np.random.Generator) -> IntArray:
        """``count`` explored clients: admitted above ``c`` times the ``count``-th score, drawn by score."""
        score = self.scores(state, explored)
        kth = float(np.partition(score, explored.size - count)[explored.size - count])
        admitted = np.flatnonzero(score >= self.cutoff * kth)
        # A zero score (no loss yet, no staleness in round 1) keeps a tiny weight: all-zero is uniform.
        log_w = np.log(np.maximum(score[admitted], _TINY))
        return explored[admitted[gumbel_top_k(log_w, count, rng)]]

    def update(self, state: OortState, feedback: Feedback) -> OortState:
        utility, explored = state.utility, state.explored
        clients, squares = returned_values(feedback, "loss_squares")
        if feedback.loss_squares is None:  # mean loss only: |mean| <= root mean square, a lower bound
            clients, means = returned_values(feedback, "losses")
            with np.errstate(over="ignore"):
                squares = means * means
        keep = np.isfinite(squares) & (squares >= 0)  # a mean loss beyond 1e154 squares to inf: not reported
        clients, squares = clients[keep], squares[keep]
        gained = 0.0
        participations = state.participations
        if clients.size:
            utility, explored, participations = utility.copy(), explored.copy(), participations.copy()
            utility[clients] = state.sizes[clients] * np.sqrt(squares)  # |B_i| sqrt(mean Loss^2)
            explored[clients] = True
            participations[clients] += 1
            gained = float(utility[clients].sum())
        last_round = state.last_round.copy()
        last_round[feedback.selection.clients] = state.round + 1
        durations = state.durations
        timed, times = returned_values(feedback, "round_times")
        if timed.size:
            durations = durations.copy()
            durations[timed[times >= 0]] = times[times >= 0]
        late, waited = _timed_out(feedback)
        if late.size:  # stragglers: the round's mean utility, and max(known time, waited) as their time
            mean_utility = float(utility[clients].mean()) if clients.size else 0.0
            if utility is state.utility:
                utility, explored = utility.copy(), explored.copy()
            stragglers = np.setdiff1d(late, clients)  # a client that also returned keeps its own utility
            utility[stragglers] = mean_utility
            explored[stragglers] = True
            durations = durations.copy() if durations is state.durations else durations
            durations[late] = np.where(np.isfinite(durations[late]), durations[late], -np.inf)
            np.maximum.at(durations, late, waited)
        history = np.append(state.history, gained)[-2 * self.pacer_window :]
        quantile = self._pace(state.quantile, history, state.round + 1)
        known = durations[np.isfinite(durations)]
        preferred = float(np.quantile(known, quantile)) if known.size else math.inf
        return replace(
            state,
            utility=utility,
            explored=explored,
            last_round=last_round,
            durations=durations,
            available=feedback_availability(feedback, state.available),
            epsilon=max(self.exploration_min, state.epsilon * self.exploration_decay),
            quantile=quantile,
            preferred_duration=preferred,
            history=history,
            round=state.round + 1,
            participations=participations,
        )

    def _pace(self, quantile: float, history: FloatArray, rounds: int) -> float:
        """The pacer (Alg. 1): relax ``T`` when the last window's utility fell below the one before."""
        w = self.pacer_window
        if rounds % w or history.size < 2 * w:
            return quantile
        if float(history[:w].sum()) > float(history[w:].sum()):
            return min(1.0, quantile + self.pacer_step)
        return quantile


def _timed_out(feedback: Feedback) -> tuple[IntArray, FloatArray]:
    """The feedback's timed-out clients with a finite, non-negative waiting time, and those times
    (none without both fields; :meth:`~fedsample.samplers.Sampler.update` checked that they align)."""
    if feedback.timed_out is None or feedback.timed_out_seconds is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    late, waited = feedback.timed_out, feedback.timed_out_seconds
    known = np.isfinite(waited) & (waited >= 0)
    return late[known], waited[known]
