"""Oort (Lai, Zhu, Madhyastha and Chowdhury, OSDI 2021) as released: FedScale 1.0's training selector.

The rules are those of ``thirdparty/oort/oort.py`` (``_training_selector``) called through
``fedscale/cloud/client_manager.py`` at FedScale 1.0 (commit ``7ec441c``), at FedScale's default
hyperparameters; ``benchmarks/reference/README.md`` walks through that code line by line and
``benchmarks/reference/compare_oort.py`` checks this sampler against it in distribution. A round:

* the first round is uniform among the available clients (FedScale's ``ClientManager`` shuffles;
  Oort's selector is asked from the second round on, so its counter ``t`` is the round minus one);
* statistical utility (§4.2): ``U_i = |B_i| sqrt(loss_squares_i)`` with ``|B_i| = min(n_i,
  samples_per_round)``; an unexplored client holds the placeholder ``min(n_i, samples_per_round)``;
* scores of the explored clients (``getTopK``): the utility clipped at the ``clip_quantile``
  position of the rewards of all available, non-blacklisted clients with a positive reward
  (unexplored placeholders included), minus ``0.999`` times their smallest, over their range; plus
  the staleness bonus ``sqrt(0.1 ln t / L_i)`` (``L_i`` the round of the client's last report, one
  later for a time-out); the whole times ``(T / t_i)^alpha`` when its round time ``t_i`` exceeds the
  preferred duration ``T``;
* ``T`` is the order statistic at index ``int(n x level / 100)`` of the clients' known round times
  (infinite at level 100); the pacer moves ``level`` (percent) every ``W`` rounds: up by ``Delta``
  when the exploited clients' mean utility summed over the last ``W`` rounds is within 10% of the
  ``W`` before, down by ``Delta`` when the two differ by 5 times the older or more;
* ``epsilon`` decays by a factor per round to a floor; ``int(epsilon K)`` slots explore;
* exploitation: the candidates are the explored clients scoring at least ``cutoff`` times the
  ``(k + 1)``-th best score (``k`` the exploited slots), or the best ``10 k + 1`` when fewer; ``k``
  are drawn from them without replacement proportionally to score;
* exploration: the unexplored clients weigh their placeholder times the same duration penalty; the
  best ``exploration_window`` (5) times the exploration count form a shortlist, drawn proportionally
  to weight;
* stragglers (FedScale's aggregator): a selected client that timed out (``Feedback.timed_out``) is
  reported with the mean utility of the round's returned clients and counts as explored.

One departure, FedScale's upstream defect fixed: FedScale keeps the last exploration list and
returns it again every round once nobody is unexplored; here exploitation takes the slots
exploration cannot fill, so a round has ``num_sampled`` clients (``refill`` in the harness).
Round times: FedScale's selector knows every client's from registration; ``init`` takes them as
``durations`` (the engine passes its system model's with a ``[system]`` table); unknown times are
infinite, are not penalised and do not enter ``T`` until reported.

Oort is biased by design: it does not reweight what it gathers (the aggregation stays the
framework's FedAvg over participants); :func:`fedsample.stats.monte_carlo_statistics` measures its
bias at a state. docs/selection-systems.md states the departures and their reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray
from fedsample._invariants import MAX_COUNT
from fedsample._validation import Constraint, Interval, NoneOr
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers.selectors.oort_state import OortState, check_durations, durations_after, timed_out_of
from fedsample.samplers.selectors.rules import (
    AGGREGATION_OPTIONS,
    Aggregation,
    RuleSampler,
    feedback_availability,
    participant_weights,
    returned_values,
)

__all__ = ["OortSampler", "OortState"]

_TINY = 1e-300
# FedScale's constants (oort.py): at least 10 candidates per exploited slot (330), the pacer's
# "stagnated" (193) and "changed sharply" (199) ratios, the reward range's floor (399), the
# smallest reward's shrink (398), the duration floor of the penalty (306, 350) and the pacer
# signal's count offset (168).
_CANDIDATES_PER_SLOT = 10
_STAGNATION = 0.1
_SHARP_CHANGE = 5.0
_MIN_RANGE = 1e-4
_BOTTOM_SHRINK = 0.999
_MIN_DURATION = 1e-4
_COUNT_OFFSET = 1e-4


@register_sampler
@dataclass(frozen=True, kw_only=True)
class OortSampler(RuleSampler[OortState]):
    """Oort's participant selection as FedScale 1.0 releases it (see the module docstring).

    Hyperparameters (FedScale's name and default in brackets)
    ---------------------------------------------------------
    exploration, exploration_decay, exploration_min:
        ``epsilon``'s start, its factor per round and its floor (``exploration_factor`` 0.9,
        ``exploration_decay`` 0.98, ``exploration_min`` 0.3).
    round_penalty:
        ``alpha`` of the duration penalty ``(T / t_i)^alpha`` (``round_penalty`` 2.0); 0 ignores times.
    duration_percentile:
        The pacer's starting level of ``T`` among the round times, in percent (``round_threshold`` 30).
    pacer_window, pacer_delta:
        ``W``, the rounds between the pacer's checks (``pacer_step`` 20), and ``Delta``, its step in
        percentage points (``pacer_delta`` 5).
    cutoff:
        Exploitation admits scores at least this fraction of the ``(k + 1)``-th best
        (``cut_off_util`` 0.05), and at least the best ``10 k + 1``.
    staleness:
        The constant of the staleness bonus (0.1, a literal in FedScale).
    clip_quantile:
        The position of the reward clip in the sorted rewards (``clip_bound`` 0.9); 1 clips nothing.
    exploration_window:
        Exploration's shortlist, in multiples of the exploration count (``sample_window`` 5).
    samples_per_round:
        The cap on ``|B_i|``, the samples a client trains on in a round (FedScale's ``local_steps x
        batch_size``, 20 x 30 = 600 at its defaults); ``None``: ``|B_i| = n_i``.
    blacklist_rounds, blacklist_fraction:
        A client that reported more than ``blacklist_rounds`` times is not exploited any more
        (``None``, the default, never blacklists: FedScale's -1); at most a ``blacklist_fraction``
        (``blacklist_max_len`` 0.3) of the clients are, the most frequent first.
    aggregation:
        ``"size"`` (default: FedAvg over participants, ``p_i / sum_S p_j``) or ``"average"``.
    """

    name = "oort"
    needs_loss_squares = True
    known_durations = True
    exploration: float = 0.9
    exploration_decay: float = 0.98
    exploration_min: float = 0.3
    round_penalty: float = 2.0
    duration_percentile: float = 30.0
    pacer_window: int = 20
    pacer_delta: float = 5.0
    cutoff: float = 0.05
    staleness: float = 0.1
    clip_quantile: float = 0.9
    exploration_window: float = 5.0
    samples_per_round: int | None = 600
    blacklist_rounds: int | None = None
    blacklist_fraction: float = 0.3
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "exploration": Interval(float, 0, 1, closed="both"),
        "exploration_decay": Interval(float, 0, 1, closed="right"),
        "exploration_min": Interval(float, 0, 1, closed="both"),
        "round_penalty": Interval(float, 0, None, closed="left"),
        "duration_percentile": Interval(float, 0, 100, closed="both"),
        "pacer_window": Interval(int, 1, None, closed="left"),
        "pacer_delta": Interval(float, 0, 100, closed="both"),
        "cutoff": Interval(float, 0, 1, closed="both"),
        "staleness": Interval(float, 0, None, closed="left"),
        "clip_quantile": Interval(float, 0, 1, closed="right"),
        "exploration_window": Interval(float, 1, None, closed="left"),
        "samples_per_round": NoneOr(Interval(int, 1, MAX_COUNT, closed="both")),  # compared as a float
        "blacklist_rounds": NoneOr(Interval(int, 0, None, closed="left")),
        "blacklist_fraction": Interval(float, 0, 1, closed="both"),
        "aggregation": AGGREGATION_OPTIONS,
    }
    _renamed_parameters: ClassVar[dict[str, str]] = {
        "duration_quantile": "use duration_percentile, in percent (30 for the 30th percentile, FedScale's "
        "round_threshold)",
        "pacer_step": "the pacer now moves its level by pacer_delta percentage points (5, FedScale's pacer_delta) "
        "every pacer_window rounds",
    }

    def init(self, federation: Federation, num_sampled: int, *, durations: npt.ArrayLike | None = None) -> OortState:
        """The state before round 1; ``durations``: every client's round time in seconds if known
        (``inf`` for an unknown one), as FedScale's selector has them from registration."""
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        n = federation.num_clients
        times = np.full(n, np.inf) if durations is None else check_durations(durations, n)
        sizes = federation.sizes.astype(np.float64)
        return OortState(
            importances=federation.importances,
            num_sampled=m,
            sizes=sizes,
            utility=self.trained_samples(sizes),
            explored=np.zeros(n, dtype=bool),
            last_round=np.zeros(n, dtype=np.int64),
            durations=times,
            available=np.ones(n, dtype=bool),
            epsilon=self.exploration,
            percentile=self.duration_percentile,
            preferred_duration=self.preferred(times, self.duration_percentile),
            history=np.zeros(0),
        )

    def trained_samples(self, sizes: FloatArray) -> FloatArray:
        """``|B_i| = min(n_i, samples_per_round)`` (FedScale's ``client_manager.py`` 62)."""
        return sizes if self.samples_per_round is None else np.minimum(sizes, float(self.samples_per_round))

    @staticmethod
    def preferred(durations: FloatArray, percentile: float) -> float:
        """``T``: the known round time at index ``min(int(n x percentile / 100), n - 1)`` of the ``n``
        known ones sorted (``oort.py`` 274-278); infinite at 100 or when none is known."""
        known = durations[np.isfinite(durations)]
        if percentile >= 100.0 or known.size == 0:
            return math.inf
        position = min(int(known.size * percentile / 100.0), known.size - 1)
        return float(np.partition(known, position)[position])

    def scores(self, state: OortState, clients: IntArray) -> FloatArray:
        """FedScale's score of explored ``clients`` at the next round (``oort.py`` 280-311)."""
        clip, bottom, span = self.normalisation(state)
        score = state.utility[clients]  # a copy, worked on in place: this runs over every explored client
        np.minimum(score, clip, out=score)
        score -= bottom
        score /= span
        current = state.round  # the selector's counter: the round being drawn minus one
        if current > 1 and self.staleness > 0:
            stamp = np.maximum(state.last_round[clients] + state.timed_out[clients], 1)
            score += np.sqrt((self.staleness * math.log(current)) / stamp)
        score *= self.penalty(state, clients)
        return np.abs(score, out=score)

    def normalisation(self, state: OortState) -> tuple[float, float, float]:
        """The clip value, the bottom and the range of the positive rewards of the available,
        non-blacklisted clients, unexplored placeholders included (``get_norm``, ``oort.py`` 393-401)."""
        rewards = state.utility[state.available & ~self.blacklisted(state) & (state.utility > 0)]
        if rewards.size == 0:  # FedScale fails on an empty list; nothing then to normalise
            return 0.0, 0.0, _MIN_RANGE
        position = min(int(rewards.size * self.clip_quantile), rewards.size - 1)
        clip = float(np.partition(rewards, position)[position])
        top, bottom = float(rewards.max()), _BOTTOM_SHRINK * float(rewards.min())
        return clip, bottom, max(top - bottom, _MIN_RANGE)

    def penalty(self, state: OortState, clients: IntArray) -> FloatArray:
        """``(T / t_i)^alpha`` for the ``clients`` slower than ``T``, 1 for the others and the unknown."""
        t, preferred = state.durations[clients], state.preferred_duration
        if math.isinf(preferred):
            return np.ones(clients.size)
        with np.errstate(over="ignore"):  # only the clients faster than T can overflow, and they get 1
            factor = (preferred / np.maximum(t, _MIN_DURATION)) ** self.round_penalty
        return np.where(np.isfinite(t) & (t > preferred), factor, 1.0)

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
        if state.round == 0:  # ClientManager's first round: a uniform draw, Oort is not asked
            ids = np.flatnonzero(state.available)
            clients = rng.choice(ids, size=min(state.num_sampled, ids.size), replace=False).astype(np.int64)
        else:
            clients = self._oort_round(state, rng)
        clients = np.sort(clients)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def _oort_round(self, state: OortState, rng: np.random.Generator) -> IntArray:
        """``getTopK`` (``oort.py`` 314-364) with the exploration list refilled (the module docstring)."""
        scored = np.flatnonzero(state.explored & state.available & ~self.blacklisted(state))
        unexplored = np.flatnonzero(~state.explored & state.available)
        num = state.num_sampled
        explore = min(int(num * state.epsilon), unexplored.size)  # refill: only the slots it can fill
        exploit = min(num - explore, scored.size)
        explore = min(unexplored.size, num - exploit)
        chosen = [self._exploit(state, scored, exploit, rng), self._explore(state, unexplored, explore, rng)]
        return np.concatenate(chosen)

    def _exploit(self, state: OortState, scored: IntArray, count: int, rng: np.random.Generator) -> IntArray:
        """``count`` of the ``scored`` clients: candidates by the cut-off, drawn proportionally to score."""
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        score = self.scores(state, scored)
        pool = np.arange(scored.size)
        if count < scored.size:
            bar = self.cutoff * _descending(score, count)  # the (count + 1)-th best score
            admitted = np.flatnonzero(score >= bar)
            least = min(_CANDIDATES_PER_SLOT * count + 1, scored.size)
            pool = admitted if admitted.size >= least else _top_positions(score, least)
        return scored[pool[_successive(score[pool], count, rng)]]

    def _explore(self, state: OortState, unexplored: IntArray, count: int, rng: np.random.Generator) -> IntArray:
        """``count`` unexplored clients: the shortlist by placeholder x penalty, drawn proportionally."""
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        weight = state.utility[unexplored] * self.penalty(state, unexplored)
        shortlist = _top_positions(weight, int(min(self.exploration_window * count, unexplored.size)))  # inf: all
        return unexplored[shortlist[_successive(weight[shortlist], count, rng)]]

    def update(self, state: OortState, feedback: Feedback) -> OortState:
        clients, squares = returned_values(feedback, "loss_squares")
        if feedback.loss_squares is None:  # mean loss only: |mean| <= root mean square, a lower bound
            clients, means = returned_values(feedback, "losses")
            with np.errstate(over="ignore"):
                squares = means * means
        keep = np.isfinite(squares) & (squares >= 0)  # a mean loss beyond 1e154 squares to inf: not reported
        clients, squares = clients[keep], squares[keep]
        late, waited = timed_out_of(feedback)
        stragglers = np.setdiff1d(late, clients)  # a client that also returned keeps its own utility
        reporters = np.concatenate([clients, stragglers])
        now = state.round + 1
        utility, explored = state.utility.copy(), state.explored.copy()
        last_round, timed_out = state.last_round.copy(), state.timed_out.copy()
        participations = state.participations.copy()
        utility[clients] = self.trained_samples(state.sizes[clients]) * np.sqrt(squares)
        # FedScale's aggregator reports its stragglers with the mean utility of the round's returned clients.
        utility[stragglers] = float(utility[clients].mean()) if clients.size else 0.0
        explored[reporters] = True
        last_round[reporters] = now
        timed_out[clients], timed_out[stragglers] = False, True
        participations[reporters] += 1
        durations = durations_after(state.durations, feedback, late, waited)
        history = np.append(state.history, self._pacer_signal(state, feedback, reporters, utility))
        history = history[-2 * self.pacer_window :]
        percentile = self._pace(state.percentile, history, now)
        return replace(
            state,
            utility=utility,
            explored=explored,
            last_round=last_round,
            timed_out=timed_out,
            durations=durations,
            available=feedback_availability(feedback, state.available),
            epsilon=max(self.exploration_min, state.epsilon * self.exploration_decay),
            percentile=percentile,
            preferred_duration=self.preferred(durations, percentile),
            history=history,
            round=now,
            participations=participations,
        )

    @staticmethod
    def _pacer_signal(state: OortState, feedback: Feedback, reporters: IntArray, utility: FloatArray) -> float:
        """The mean utility of the round's exploited clients that reported (``calculateSumUtil``,
        ``oort.py`` 167-175): those selected while already explored, since exploration takes only
        unexplored ones."""
        selected = np.unique(feedback.selection.clients)
        exploited = selected[state.explored[selected]]
        counted = np.intersect1d(exploited, reporters)
        return float(sum(utility[counted].tolist())) / (counted.size + _COUNT_OFFSET)

    def _pace(self, percentile: float, history: FloatArray, rounds: int) -> float:
        """The pacer (``oort.py`` 187-202): every ``W`` rounds from ``2 W``, relax ``T`` by ``Delta``
        when the last window's signal is within 10% of the one before, tighten it when it changed by
        5 times the older window's or more."""
        w = self.pacer_window
        if rounds < 2 * w or rounds % w or history.size < 2 * w:
            return percentile
        older, current = sum(history[:w].tolist()), sum(history[w:].tolist())  # left to right, as FedScale
        if abs(current - older) <= older * _STAGNATION:
            return min(100.0, percentile + self.pacer_delta)
        if abs(current - older) >= older * _SHARP_CHANGE:
            return max(self.pacer_delta, percentile - self.pacer_delta)
        return percentile


def _successive(weights: FloatArray, count: int, rng: np.random.Generator) -> IntArray:
    """Positions of ``count`` draws without replacement, each proportional to ``weights`` among those
    left: successive sampling, as FedScale's ``numpy.random.choice(p=w / sum, replace=False)``.

    An exponential race: the ``count`` smallest ``E_i / w_i`` (``E_i`` standard exponential), the
    Gumbel top-k of :func:`~fedsample.samplers.selectors.rules.gumbel_top_k` with ``G = -log E``, equal in
    distribution and a third of its cost over a million clients (numpy's exponential is the cheaper
    draw). A zero weight counts as 1e-300: drawn only when nothing else is left, then uniformly.
    """
    count = min(count, weights.size)
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    keys = rng.standard_exponential(weights.size) / np.maximum(weights, _TINY)
    if count < weights.size:
        last = np.partition(keys, count - 1)[count - 1]
        chosen = np.flatnonzero(keys <= last)[:count]
    else:
        chosen = np.arange(weights.size)
    return chosen[np.argsort(keys[chosen], kind="stable")].astype(np.int64)


def _descending(values: FloatArray, position: int) -> float:
    """The value at 0-based ``position`` of ``values`` sorted from the largest."""
    return float(np.partition(values, values.size - 1 - position)[values.size - 1 - position])


def _top_positions(values: FloatArray, count: int) -> IntArray:
    """Positions of the ``count`` largest ``values``, ties to the lower position (FedScale's stable
    descending sort over clients in id order), in ``O(len)``."""
    if count >= values.size:
        return np.arange(values.size)
    kth = _descending(values, count - 1)
    above = np.flatnonzero(values > kth)
    ties = np.flatnonzero(values == kth)[: count - above.size]
    return np.concatenate([above, ties]).astype(np.int64)
