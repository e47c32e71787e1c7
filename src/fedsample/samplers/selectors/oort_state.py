"""Oort's state (:class:`OortState`) and what it keeps of each client's round time: the durations
known at registration and the lower bounds the timed-out rounds give (:mod:`.oort` is the sampler)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from fedsample._arrays import DTypeTable, FloatArray, IntArray, frozen
from fedsample._invariants import check_mask, check_real, check_round, check_values
from fedsample._validation import invalid
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.selectors.rules import returned_values
from fedsample.serialization import plain_data

__all__ = ["OortState", "check_durations", "durations_after", "timed_out_of"]

_BOOL_FIELDS = ("explored", "available", "timed_out")


@plain_data
@dataclass(frozen=True, eq=False)
class OortState(SamplerState):
    """Oort's state: :class:`SamplerState`'s ``importances`` and ``num_sampled`` (``K``), and

    Attributes
    ----------
    sizes:
        ``n_i``, the clients' sample counts.
    utility:
        Each client's reward: its last statistical utility; for a client that last timed out, the
        mean utility of that round's returned clients; while unexplored, FedScale's placeholder
        ``min(n_i, samples_per_round)``.
    explored:
        Whether a client has reported (a utility, or a time-out).
    last_round:
        The round (1-based) of the client's last report, 0 if never.
    timed_out:
        Whether that last report was a time-out (FedScale stamps it a round later: the straggler's
        report reaches its selector when the next round starts).
    durations:
        ``t_i``: the client's round time in seconds, ``inf`` while unknown; for a client that timed
        out, at least the seconds the server waited for it.
    available:
        Who may be selected next (all clients unless feedback says otherwise).
    epsilon:
        The exploration factor of the next round.
    percentile:
        The pacer's level of ``T`` among the known round times, in percent (FedScale's
        ``round_threshold``).
    preferred_duration:
        ``T`` in seconds (infinite while no round time is known, or at level 100: no penalty).
    history:
        The pacer's signal of each of the last ``2 W`` rounds: the mean utility of the round's
        exploited clients that reported.
    round:
        Number of updates applied.
    participations:
        How many reports each client made (returned or timed out: the blacklist's count).
    """

    sizes: FloatArray
    utility: FloatArray
    explored: np.ndarray
    last_round: IntArray
    durations: FloatArray
    available: np.ndarray
    epsilon: float
    percentile: float
    preferred_duration: float
    history: FloatArray
    round: int = 0
    participations: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    timed_out: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    _array_dtypes: ClassVar[DTypeTable] = {
        **dict.fromkeys(("sizes", "utility", "durations", "history"), np.float64),
        **dict.fromkeys(_BOOL_FIELDS, np.bool_),
        **dict.fromkeys(("last_round", "participations"), np.int64),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        n = self.importances.size
        if self.participations.size == 0 and n:
            object.__setattr__(self, "participations", frozen(np.zeros(n, dtype=np.int64)))
        if self.timed_out.size == 0 and n:
            object.__setattr__(self, "timed_out", frozen(np.zeros(n, dtype=bool)))
        for name in ("epsilon", "percentile", "preferred_duration"):
            object.__setattr__(self, name, float(getattr(self, name)))

    def check_invariants(self) -> None:
        owner = "OortState"
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        check_values(owner, "sizes", self.sizes, shape=(n,), low=0.0)
        check_values(owner, "utility", self.utility, shape=(n,), low=0.0)
        rounds = check_round(owner, "round", self.round)
        # A client reported in a round already counted: a later round (2**62) would be a round the
        # run has not reached.
        check_values(owner, "last_round", self.last_round, shape=(n,), low=0, high=rounds, integer=True)
        check_values(owner, "participations", self.participations, shape=(n,), low=0, high=rounds, integer=True)
        check_values(owner, "durations", self.durations, shape=(n,), low=0.0, finite=False)
        check_values(owner, "history", self.history, shape=(None,), low=0.0)
        for name in _BOOL_FIELDS:
            check_mask(owner, name, getattr(self, name), n)
        check_real(owner, "epsilon", self.epsilon, 0.0, 1.0)
        check_real(owner, "percentile", self.percentile, 0.0, 100.0)
        check_real(owner, "preferred_duration", self.preferred_duration, 0.0, math.inf)


def check_durations(durations: npt.ArrayLike, n: int) -> FloatArray:
    """``durations`` as ``n`` round times in seconds, each ``>= 0`` (``inf``: unknown)."""
    rule = f"None or {n} round times in seconds, each >= 0 or inf (unknown)"
    try:
        times = np.array(durations, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise invalid("durations", "OortSampler.init", rule, durations) from error
    if times.shape != (n,) or np.isnan(times).any() or (times < 0).any():
        raise invalid("durations", "OortSampler.init", rule, durations)
    return times


def durations_after(durations: FloatArray, feedback: Feedback, late: IntArray, waited: FloatArray) -> FloatArray:
    """The round times after ``feedback``: the returned clients' ``round_times``, and for the timed-out
    ones at least the seconds the server waited (a lower bound; a known time above it is kept)."""
    timed, times = returned_values(feedback, "round_times")
    if timed.size == 0 and late.size == 0:
        return durations
    durations = durations.copy()
    durations[timed[times >= 0]] = times[times >= 0]
    if late.size:
        durations[late] = np.where(np.isfinite(durations[late]), durations[late], -np.inf)
        np.maximum.at(durations, late, waited)
    return durations


def timed_out_of(feedback: Feedback) -> tuple[IntArray, FloatArray]:
    """The feedback's timed-out clients with a finite, non-negative waiting time, and those times
    (none without both fields; :meth:`~fedsample.samplers.Sampler.update` checked that they align)."""
    if feedback.timed_out is None or feedback.timed_out_seconds is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    late, waited = feedback.timed_out, feedback.timed_out_seconds
    known = np.isfinite(waited) & (waited >= 0)
    return late[known], waited[known]
