"""Availability with memory across rounds: a two-state Markov chain per client, and periodic windows.

Both follow the participation patterns of FedAU's experiments (Wang & Ji, ICLR 2024; the authors'
repository IBM/fedau, ``util.WorkerSampler``), under fedsample's rule that a client's fate depends on
``(seed, round, client)`` only: nothing is stepped round by round, so a client's availability in round
``t`` is the same whoever else is asked, in whatever order, and whether or not the run was resumed.

* :class:`MarkovAvailability`: client ``i`` is on or off; from on it switches off with probability
  ``b_i``, from off it switches on with probability ``a_i``, and round 0 is drawn from the
  stationary law ``P(on) = a_i / (a_i + b_i)``. The chain is evaluated by *coupling from the past*:
  round ``t`` (``t >= 1``) reads one hashed uniform ``U_t``; the move from the previous state is
  "on if ``U_t < a_i``" from off and "on if ``U_t < 1 - b_i``" from on. Where
  ``U_t < min(a_i, 1 - b_i)`` the state is on and where ``U_t >= max(a_i, 1 - b_i)`` it is off
  whatever the previous state was; in between it repeats the previous state (``a_i + b_i <= 1``) or
  flips it (``a_i + b_i > 1``). Reading back from ``t`` to the latest such round gives ``X_t``
  exactly, at an expected cost of ``1 / (1 - |1 - a_i - b_i|)`` rounds (about 10 for FedAU's
  setting), and round 0's stationary draw ends the search.
  :meth:`MarkovAvailability.stationary` sets ``(a_i, b_i)`` from a stationary probability ``p_i`` as
  FedAU does: ``a_i = q``, ``b_i = q (1 / p_i - 1)``, both divided by ``b_i`` where ``b_i > 1``.
* :class:`CyclicAvailability`: client ``i`` is on for ``A_i = max(1, rint(C p_i))`` consecutive
  rounds and off for ``I_i = max(1, C - A_i)``, a cycle of ``A_i + I_i`` rounds (``C`` is the period),
  starting off for ``u_i`` rounds, ``u_i`` uniform on ``{0, ..., I_i - 1}`` (FedAU's offsets): on in
  round ``t`` iff ``(t - u_i) mod (A_i + I_i) < A_i``. Its long-run fraction on is ``A_i / (A_i + I_i)``.

:func:`label_correlated_rates` gives the heterogeneous rates of FedAU's experiments, correlated with
the clients' labels, so that the clients that are rarely there hold data the others lack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample._validation import Interval, check_param, invalid
from fedsample.participation.availability import Availability, checked_probabilities, hashed_uniforms
from fedsample.rng import Stream, stream_rng

__all__ = ["CyclicAvailability", "MarkovAvailability", "label_correlated_rates"]

_SALT_MARKOV_START = 0x3C71
_SALT_MARKOV_MOVE = 0x3C72
_SALT_CYCLIC_PHASE = 0xC7C1
_SALT_LABEL_RATES = 0x1AB


def _per_client(value: float | FloatArray, clients: IntArray, name: str, owner: str) -> FloatArray:
    """``value`` for each of ``clients`` (one value for all, or one per client)."""
    if isinstance(value, float):
        return np.full(clients.shape, value)
    if clients.size and (clients.min() < 0 or clients.max() >= value.size):
        bad = clients.max() if clients.max() >= value.size else clients.min()
        raise invalid("clients", owner, f"client ids in [0, {value.size}) (the length of {name!r})", bad)
    out: FloatArray = value[clients]
    return out


def _scalar_positive(name: str, owner: str, value: Any) -> None:
    """A single rate of 0 would leave every client off (or on) forever: refuse it, as BernoulliAvailability does."""
    if np.ndim(value) == 0 and Interval(float, 0, 0).is_satisfied_by(value):
        raise invalid(name, owner, "a float in the range (0, 1] or a 1-D array", value)


@dataclass(frozen=True)
class MarkovAvailability(Availability):
    """Each client's availability is a two-state Markov chain, started from its stationary law (module doc).

    Parameters
    ----------
    on_to_off:
        ``b_i``, the probability that an available client is unavailable in the next round (one value
        in ``[0, 1]`` or an array of them).
    off_to_on:
        ``a_i``, the probability that an unavailable client is available in the next round (one value
        in ``(0, 1]`` or an array in ``[0, 1]``); ``a_i + b_i > 0`` for every client.
    seed:
        Keys the chains (mixed with each run's seed in a simulation).

    >>> chain = MarkovAvailability.stationary(0.2, off_to_on=0.05)
    >>> (round(float(chain.on_to_off), 6), float(chain.off_to_on), float(chain.probabilities(3)[0]))
    (0.2, 0.05, 0.2)
    """

    on_to_off: float | FloatArray
    off_to_on: float | FloatArray
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "MarkovAvailability"
        _scalar_positive("off_to_on", owner, self.off_to_on)
        b = checked_probabilities("on_to_off", owner, self.on_to_off, upper_open=False)
        a = checked_probabilities("off_to_on", owner, self.off_to_on, upper_open=False)
        if not isinstance(a, float) and not isinstance(b, float) and a.size != b.size:
            raise invalid("off_to_on", owner, f"one value or {b.size} values (the length of 'on_to_off')", a.size)
        frozen = np.asarray(a) + np.asarray(b) == 0
        if np.any(frozen):
            where = int(np.argmax(np.ravel(frozen)))
            raise invalid("on_to_off", owner, "positive where 'off_to_on' is 0 (a chain that never moves)", where)
        object.__setattr__(self, "on_to_off", b)
        object.__setattr__(self, "off_to_on", a)
        check_param("seed", owner, self.seed, Interval(int, 0, None, closed="left"))

    @classmethod
    def stationary(
        cls, probability: float | npt.ArrayLike, *, off_to_on: float = 0.05, seed: int = 0
    ) -> MarkovAvailability:
        """The chain with stationary probability ``p_i`` and switch-on probability ``q = off_to_on`` (FedAU's
        ``markov-q``): ``a_i = q``, ``b_i = q (1 / p_i - 1)``, both divided by ``b_i`` where it exceeds 1."""
        owner = "MarkovAvailability.stationary"
        _scalar_positive("probability", owner, probability)
        p = checked_probabilities("probability", owner, probability, upper_open=False)
        if np.any(np.asarray(p) == 0):
            raise invalid("probability", owner, "probabilities in (0, 1]", 0.0)
        check_param("off_to_on", owner, off_to_on, Interval(float, 0, 1, closed="right"))
        a = np.full(np.shape(p), float(off_to_on))
        b = a * (1.0 / np.asarray(p) - 1.0)
        over = b > 1
        a = np.where(over, a / np.where(over, b, 1.0), a)
        b = np.where(over, 1.0, b)
        if isinstance(p, float):
            return cls(on_to_off=float(b), off_to_on=float(a), seed=seed)
        return cls(on_to_off=b, off_to_on=a, seed=seed)

    def probabilities(self, num_clients: int) -> FloatArray:
        """The stationary probabilities ``a_i / (a_i + b_i)``: the chance to be available in any round."""
        clients = np.arange(num_clients)
        a = _per_client(self.off_to_on, clients, "off_to_on", "MarkovAvailability.probabilities")
        b = _per_client(self.on_to_off, clients, "on_to_off", "MarkovAvailability.probabilities")
        out: FloatArray = a / (a + b)
        return out

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        owner = "MarkovAvailability.available"
        ids = np.asarray(clients, dtype=np.int64)
        flat = ids.ravel()
        a = _per_client(self.off_to_on, flat, "off_to_on", owner)
        b = _per_client(self.on_to_off, flat, "on_to_off", owner)
        on_whatever = np.minimum(a, 1.0 - b)  # U_t below this: on, whatever the previous state
        off_whatever = np.maximum(a, 1.0 - b)  # U_t at or above this: off, whatever the previous state
        flips = a > 1.0 - b  # in between: the previous state flipped (a + b > 1) or repeated
        out = np.zeros(flat.size, dtype=bool)
        parity = np.zeros(flat.size, dtype=bool)  # flips between the deciding round and `round`
        pending = np.arange(flat.size)
        # Rounds top, top - 1, ... are read a block at a time, first about three times the typical read back
        # 1 / P(a round decides), then doubling.
        deciding = np.maximum(on_whatever + 1.0 - off_whatever, 1e-3)
        top = int(round)
        block = int(np.clip(np.ceil(3.0 / np.median(deciding)), 4, 1024)) if flat.size else 4
        while pending.size and top > 0:
            rounds = np.arange(top, max(top - block, 0), -1)
            u = hashed_uniforms(self.seed, _SALT_MARKOV_MOVE, rounds, flat[pending])  # (rounds, pending)
            on = u < on_whatever[pending]
            decided = on | (u >= off_whatever[pending])
            flipped = ~decided & flips[pending]
            first = np.argmax(decided, axis=0)  # the latest deciding round of each pending client
            found = decided[first, np.arange(pending.size)]
            # Flips in the rounds read before the deciding one (all of the block's when none decides).
            before: IntArray = np.cumsum(flipped, axis=0) - flipped
            count = np.where(found, before[first, np.arange(pending.size)], flipped.sum(axis=0))
            parity[pending] ^= (count % 2).astype(bool)
            chosen = pending[found]
            out[chosen] = on[first[found], np.flatnonzero(found)] ^ parity[chosen]
            pending = pending[~found]
            top -= rounds.size
            block = min(2 * block, 1024)
        if pending.size:  # round 0: the stationary start
            u = hashed_uniforms(self.seed, _SALT_MARKOV_START, 0, flat[pending])
            out[pending] = (u * (a[pending] + b[pending]) < a[pending]) ^ parity[pending]
        return out.reshape(ids.shape)


@dataclass(frozen=True)
class CyclicAvailability(Availability):
    """Client ``i`` is available in periodic windows: on ``A_i = max(1, rint(period p_i))`` rounds, then off
    ``I_i = max(1, period - A_i)``, from a uniform offset ``u_i`` in ``[0, I_i)`` (module doc; FedAU's ``cyclic-C``).

    ``probability`` is one ``p`` in ``(0, 1]`` or an array of ``p_i`` in ``[0, 1]``; ``period`` is ``C``.
    ``rint`` rounds half to even (numpy's ``round``), as FedAU's code does.

    >>> cyclic = CyclicAvailability(0.25, period=8)
    >>> [int(cyclic.available(t, [0])[0]) for t in range(16)] == [int((t - cyclic.offsets([0])[0]) % 8 < 2)
    ...                                                           for t in range(16)]
    True
    """

    probability: float | FloatArray
    period: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "CyclicAvailability"
        _scalar_positive("probability", owner, self.probability)
        object.__setattr__(
            self, "probability", checked_probabilities("probability", owner, self.probability, upper_open=False)
        )
        check_param("period", owner, self.period, Interval(int, 2, 10**9, closed="both"))
        check_param("seed", owner, self.seed, Interval(int, 0, None, closed="left"))

    def windows(self, clients: npt.ArrayLike) -> tuple[IntArray, IntArray]:
        """``(A_i, I_i)``: the rounds on and the rounds off of each client's cycle."""
        ids = np.asarray(clients, dtype=np.int64)
        p = _per_client(self.probability, ids, "probability", "CyclicAvailability.windows")
        on = np.maximum(1, np.round(self.period * p)).astype(np.int64)
        off = np.maximum(1, self.period - on)
        return on, off

    def offsets(self, clients: npt.ArrayLike) -> IntArray:
        """``u_i``: the rounds each client is off before its first window."""
        ids = np.asarray(clients, dtype=np.int64)
        _, off = self.windows(ids)
        u = hashed_uniforms(self.seed, _SALT_CYCLIC_PHASE, 0, ids)
        out: IntArray = np.minimum((u * off).astype(np.int64), off - 1)
        return out

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        ids = np.asarray(clients, dtype=np.int64)
        on, off = self.windows(ids)
        out: BoolArray = (int(round) - self.offsets(ids)) % (on + off) < on
        return out

    def probabilities(self, num_clients: int) -> FloatArray:
        """The long-run fraction of rounds each client is available, ``A_i / (A_i + I_i)``.

        Not a per-round probability: at round ``t`` the offsets make it ``t``-dependent (every client is
        off at round 0 unless its offset is 0), so inverse-probability weights with these rates are
        unbiased over whole cycles only.
        """
        on, off = self.windows(np.arange(num_clients))
        out: FloatArray = on / (on + off)
        return out


def label_correlated_rates(
    label_counts: npt.ArrayLike, *, mean: float = 0.1, minimum: float = 0.02, alpha: float = 0.1, seed: int = 0
) -> FloatArray:
    """Per-client availability rates tied to the clients' labels, as in FedAU's experiments.

    One vector ``v ~ Dirichlet(alpha, ..., alpha)`` over the ``C`` labels (drawn from the stream keyed by
    ``seed``) scores each label; client ``i`` with label shares ``s_i`` gets
    ``p_i = clip(C * mean * <s_i, v>, minimum, 1)``. Small ``alpha`` concentrates ``v`` on few labels, so
    the clients holding the others are rarely available; the rates average about ``mean`` when the
    labels are balanced overall. FedAU's code does not clip at 1 (its rates could exceed 1 for more than
    ``1 / mean`` labels); a client without samples gets ``minimum``.

    ``label_counts`` is ``(num_clients, C)``: client ``i``'s samples of each label.
    """
    owner = "label_correlated_rates"
    counts = np.asarray(label_counts, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[0] == 0 or counts.shape[1] == 0 or not np.all(np.isfinite(counts)):
        raise invalid("label_counts", owner, "a (num_clients, num_labels) array of finite counts", counts.shape)
    if np.any(counts < 0):
        raise invalid("label_counts", owner, "non-negative counts", float(counts.min()))
    check_param("mean", owner, mean, Interval(float, 0, 1, closed="right"))
    check_param("minimum", owner, minimum, Interval(float, 0, 1, closed="right"))
    check_param("alpha", owner, alpha, Interval(float, 0, None, closed="neither"))
    check_param("seed", owner, seed, Interval(int, 0, None, closed="left"))
    num_labels = counts.shape[1]
    scores = stream_rng(seed, Stream.AVAILABILITY, _SALT_LABEL_RATES).dirichlet(np.full(num_labels, float(alpha)))
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    return readonly(np.clip(shares @ scores * (mean * num_labels), minimum, 1.0))
