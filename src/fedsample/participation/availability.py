"""Clients that are unavailable or fail: availability models and dropout.

Availability and failure are decided *per client and round* by a counter-based hash of
``(seed, round, client)``, not by drawing from a generator: a client's fate is the same however
many other clients are asked about and in whatever order, it costs O(clients asked) rather than
O(n) per round (so a population of 10^8 clients given as sizes stays cheap), and a resumed run
sees the same fates as an uninterrupted one.

The weight-correction policies for the clients that do not return live in
:mod:`fedsample.participation.policies`.
"""

from __future__ import annotations

import csv
import io
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample._reading import open_input
from fedsample._validation import Interval, check_param, invalid
from fedsample.errors import FedsampleError

__all__ = [
    "AlwaysAvailable",
    "Availability",
    "BernoulliAvailability",
    "Dropout",
    "TraceAvailability",
    "hashed_uniforms",
    "load_availability_trace",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SALT_AVAILABILITY = 0x5A17
_SALT_DROPOUT = 0xD12F


def _splitmix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def hashed_uniforms(seed: int, salt: int, round: int | IntArray, clients: npt.ArrayLike) -> FloatArray:
    """Uniforms in ``[0, 1)``, one per client, that depend only on ``(seed, salt, round, client)``.

    SplitMix64 of the key chained through the three counters; 53 bits of the result give the
    uniform. Distinct keys give (to any test's precision) independent uniforms. With a 1-D array of
    rounds, row ``k`` of the result (``(rounds, clients)``) is the uniforms of round ``round[k]``.
    """
    ids = np.asarray(clients, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _splitmix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
        key = _splitmix(key ^ np.uint64(salt & 0xFFFFFFFFFFFFFFFF))
        if np.ndim(round):
            rounds = np.asarray(round, dtype=np.int64).astype(np.uint64)
            bits = _splitmix(_splitmix(key ^ rounds)[:, None] ^ ids.ravel()[None, :])
        else:
            key = _splitmix(key ^ np.uint64(int(round) & 0xFFFFFFFFFFFFFFFF))
            bits = _splitmix(key ^ ids)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 2.0**53)


def checked_probabilities(name: str, owner: str, value: Any, *, upper_open: bool) -> float | FloatArray:
    """``value`` as one probability (a float) or a read-only 1-D array of them, in ``[0, 1]`` (``[0, 1)``
    with ``upper_open``); the library's error naming ``name`` of ``owner`` otherwise."""
    closed = "left" if upper_open else "both"
    if np.ndim(value) == 0:
        check_param(name, owner, value, Interval(float, 0, 1, closed=closed))
        return float(value)
    array = np.asarray(value, dtype=np.float64)
    bad = ~np.isfinite(array) | (array < 0) | ((array >= 1) if upper_open else (array > 1))
    if array.ndim != 1 or array.size == 0 or bad.any():
        shown = array if array.ndim != 1 or array.size == 0 else array[np.argmax(bad)]
        what = "[0, 1)" if upper_open else "[0, 1]"
        raise invalid(name, owner, f"a probability or a 1-D array of probabilities in {what}", shown)
    return readonly(array)


def _take(probabilities: float | FloatArray, clients: IntArray, name: str, owner: str) -> FloatArray | float:
    if isinstance(probabilities, float):
        return probabilities
    if clients.size and (clients.min() < 0 or clients.max() >= probabilities.size):
        raise invalid(
            "clients", owner, f"client ids in [0, {probabilities.size}) (the length of {name!r})", clients.max()
        )
    return probabilities[clients]


# --- availability --------------------------------------------------------------------------------


class Availability(ABC):
    """Which clients can be selected in a round. Subclasses answer for the clients asked about only."""

    @abstractmethod
    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        """Whether each of ``clients`` is available in ``round`` (0-based)."""

    def probabilities(self, num_clients: int) -> FloatArray | None:
        """``a_i``, the probability that client ``i`` is available in a round, when the model has one."""
        return None


@dataclass(frozen=True)
class AlwaysAvailable(Availability):
    """Every client is available in every round (the papers' setting)."""

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        return np.ones(np.shape(clients), dtype=bool)

    def probabilities(self, num_clients: int) -> FloatArray:
        return np.ones(num_clients)


@dataclass(frozen=True)
class BernoulliAvailability(Availability):
    """Client ``i`` is available in each round with probability ``a_i``, independently across
    clients and rounds. ``probability`` is one ``a`` in ``(0, 1]`` for all clients (``a = 0``
    would make nobody ever available, which the config reader and the CLI refuse too) or an array
    of ``a_i`` in ``[0, 1]``."""

    probability: float | FloatArray
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "BernoulliAvailability"
        if np.ndim(self.probability) == 0 and Interval(float, 0, 0).is_satisfied_by(self.probability):
            raise invalid("probability", owner, "a float in the range (0, 1] or a 1-D array", self.probability)
        object.__setattr__(
            self, "probability", checked_probabilities("probability", owner, self.probability, upper_open=False)
        )
        check_param("seed", owner, self.seed, Interval(int, 0, None, closed="left"))

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        ids = np.asarray(clients, dtype=np.int64)
        a = _take(self.probability, ids, "probability", "BernoulliAvailability.available")
        return hashed_uniforms(self.seed, _SALT_AVAILABILITY, round, ids) < a

    def probabilities(self, num_clients: int) -> FloatArray:
        if isinstance(self.probability, float):
            return np.full(num_clients, self.probability)
        return np.asarray(self.probability)


@dataclass(frozen=True, eq=False)
class TraceAvailability(Availability):
    """Availability windows: client ``clients[k]`` is available in rounds ``starts[k] <= t < ends[k]``.

    A client may have several windows; a client with none is never available. Windows are kept
    sorted by ``(client, start)`` so that a query costs ``O(log windows)`` per client asked.
    """

    clients: IntArray
    starts: IntArray
    ends: IntArray
    _key: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        owner = "TraceAvailability"
        arrays = [np.asarray(getattr(self, name)) for name in ("clients", "starts", "ends")]
        if any(a.ndim != 1 for a in arrays) or len({a.size for a in arrays}) != 1:
            raise invalid("clients", owner, "three 1-D arrays of one length (clients, starts, ends)", arrays[0].shape)
        for name, array in zip(("clients", "starts", "ends"), arrays, strict=True):
            if array.size and (not np.issubdtype(array.dtype, np.integer) or array.min() < 0):
                raise invalid(name, owner, "non-negative integers", array.min() if array.size else array)
        clients, starts, ends = (a.astype(np.int64) for a in arrays)
        if np.any(ends <= starts):
            k = int(np.argmax(ends <= starts))
            raise invalid("ends", owner, "after the window's start", f"[{starts[k]}, {ends[k]})")
        order = np.lexsort((starts, clients))
        object.__setattr__(self, "clients", readonly(clients[order]))
        object.__setattr__(self, "starts", readonly(starts[order]))
        object.__setattr__(self, "ends", readonly(ends[order]))

    def check_clients(self, num_clients: int, owner: str) -> None:
        """Refuse a trace that names a client outside a federation of ``num_clients`` (client 57 of 10),
        as the system trace does (:func:`~fedsample.participation.system.load_system_trace`)."""
        if self.clients.size and int(self.clients[-1]) >= num_clients:  # sorted by client
            raise invalid("clients", owner, f"client ids in [0, {num_clients})", int(self.clients[-1]))

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        ids = np.asarray(clients, dtype=np.int64)
        # The last window of each asked client that starts at or before `round`, then its end.
        flat = ids.ravel()
        lo = np.searchsorted(self.clients, flat, side="left")
        hi = np.searchsorted(self.clients, flat, side="right")
        out = np.zeros(flat.shape, dtype=bool)
        for k in np.flatnonzero(hi > lo):
            window_starts = self.starts[lo[k] : hi[k]]
            j = int(np.searchsorted(window_starts, round, side="right")) - 1
            # Windows of a client may overlap: any window covering the round will do.
            out[k] = j >= 0 and bool(np.any(self.ends[lo[k] : lo[k] + j + 1] > round))
        return out.reshape(ids.shape)


# Trace values (client ids and rounds) stay below this, so that they fit int64 with room for `end + 1`.
_TRACE_LIMIT = 2**62


# A trace line is three integers; reading stops past this many characters (room for three fields of
# csv's own limit, 131072), so a file with no line break (a link to /dev/zero) is refused at once
# instead of filling memory.
_MAX_LINE = 2**19


def _bounded_lines(handle: io.TextIOWrapper) -> Iterator[str]:
    while line := handle.readline(_MAX_LINE + 1):
        if len(line) > _MAX_LINE:
            raise csv.Error(f"a line longer than {_MAX_LINE} characters")
        yield line


def load_availability_trace(path: str | Path, num_clients: int | None = None) -> TraceAvailability:
    """Read a CSV trace with the header ``client,start,end`` (rounds, ``end`` excluded); with
    ``num_clients``, every client it names must be one of the federation's ``[0, num_clients)``."""
    source = Path(path)
    name = "availability trace"
    try:
        # utf-8-sig: a byte-order mark (a spreadsheet's export) is not part of the header.
        with io.TextIOWrapper(open_input(source), encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(_bounded_lines(handle))
            header = next(reader, None)
            if header is None or [h.strip() for h in header] != ["client", "start", "end"]:
                raise FedsampleError(
                    f"The '{name}' file must start with the header 'client,start,end'. Got {header!r} in "
                    f"{str(source)!r} instead.",
                    parameter=name,
                )
            rows: list[tuple[int, int, int]] = []
            for line, row in enumerate(reader, start=2):
                try:
                    client, start, end = (int(v) for v in row)
                except ValueError:
                    client = start = end = -_TRACE_LIMIT  # reported below
                if not all(-_TRACE_LIMIT < v < _TRACE_LIMIT for v in (client, start, end)):
                    raise FedsampleError(
                        f"The '{name}' file must hold three integers per row. Got {','.join(row)[:80]!r} on line "
                        f"{line} of {str(source)!r} (each must lie below 2**62 in absolute value) instead.",
                        parameter=name,
                    ) from None
                rows.append((client, start, end))
    except OSError as error:
        raise FedsampleError(
            f"The '{name}' parameter must name a readable file. Got {str(source)!r} ({error.strerror}) instead.",
            parameter=name,
        ) from None
    except (UnicodeDecodeError, csv.Error) as error:  # a binary file, a NUL byte, a field over csv's limit
        raise FedsampleError(
            f"The '{name}' parameter must name a UTF-8 CSV text file. Got {str(source)!r} "
            f"({type(error).__name__}: {str(error)[:80]}) instead.",
            parameter=name,
        ) from None
    table = np.array(rows, dtype=np.int64).reshape(-1, 3)
    try:
        trace = TraceAvailability(table[:, 0], table[:, 1], table[:, 2])
        if num_clients is not None:
            trace.check_clients(num_clients, "load_availability_trace")
        return trace
    except FedsampleError as error:
        raise FedsampleError(f"{error} (in {str(source)!r})", parameter=name) from None


# --- failures after selection ----------------------------------------------------------------------


@dataclass(frozen=True)
class Dropout:
    """A selected client fails to return with probability ``d_i`` (one ``d`` or an array), each
    round independently; ``r_i = 1 - d_i`` is its return probability."""

    probability: float | FloatArray
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "Dropout"
        object.__setattr__(
            self, "probability", checked_probabilities("probability", owner, self.probability, upper_open=True)
        )
        check_param("seed", owner, self.seed, Interval(int, 0, None, closed="left"))

    def returns(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        """Whether each of ``clients`` returns its result in ``round``."""
        ids = np.asarray(clients, dtype=np.int64)
        d = _take(self.probability, ids, "probability", "Dropout.returns")
        return hashed_uniforms(self.seed, _SALT_DROPOUT, round, ids) >= d

    def return_probabilities(self, clients: npt.ArrayLike) -> FloatArray:
        ids = np.asarray(clients, dtype=np.int64)
        d = _take(self.probability, ids, "probability", "Dropout.return_probabilities")
        return np.broadcast_to(1.0 - np.asarray(d, dtype=np.float64), ids.shape).copy()
