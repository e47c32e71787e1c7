"""Populations of up to ``10^8`` clients and more, given as sizes in a memory-mapped file.

A :class:`Population` holds the sizes ``n_i`` as a read-only memory map (a ``.npy`` file, or a raw
little-endian int32/int64 file) and their total ``M``; nothing per client is copied into memory.
:func:`open_population` and :func:`write_sizes_file` read and write such files;
:func:`order_by_size` and :func:`cumulative_sizes` are the one-time set-ups of the population
samplers (:mod:`fedsample.samplers.population.samplers`), and :class:`ClusteredPopulationState` the layout
of Algorithm 1 of paper 000 over a population, in integer units.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray, frozen, readonly
from fedsample._validation import Interval, Options, check_param, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers.row_draws import Availability
from fedsample.serialization import plain_data

__all__ = [
    "INT64_LIMIT",
    "MAX_SCAN",
    "SIZE_DTYPES",
    "ClusteredPopulationState",
    "Population",
    "PopulationState",
    "as_population",
    "cumulative_sizes",
    "open_population",
    "order_by_size",
    "write_sizes_file",
]

SIZE_DTYPES: tuple[str, ...] = ("int32", "int64")
# Sums of sizes (and the clustered sampler's m * M) stay below this bound.
INT64_LIMIT = 2**62
# Sizes are checked and summed in blocks of this many clients, so that validating a file of
# 10^8 sizes never holds more than one block of temporaries (32 MiB of int64).
_BLOCK = 1 << 22
# The order by size is a counting sort when the largest size is below this bound and below 4n
# (the histogram has one 8-byte entry per size value, so its memory stays linear in n).
_MAX_SIZE_TABLE = 1 << 26
# A clustered row whose candidates keep being unavailable is scanned exactly when it holds at most
# this many clients (8 MiB of ids); a larger one raises.
MAX_SCAN = 1 << 20


@plain_data
@dataclass(frozen=True, eq=False)
class Population:
    """Client sizes ``n_i`` (read-only, usually a memory map) and their total ``M``.

    Build one with :func:`open_population` (a file) or :meth:`from_sizes` (an array in memory).
    In JSON (:mod:`fedsample.serialization`) a population is written as its sizes, ``O(n)``: a
    file-backed one comes back in memory.
    """

    sizes: npt.NDArray[np.signedinteger[Any]]
    total: int

    def check_invariants(self) -> None:
        """Positive int32/int64 sizes summing to ``total`` (one ``O(n)`` scan), for a decoded population."""
        owner = "Population"
        if _check_sizes(np.asarray(self.sizes), "sizes", owner, where="") != self.total:
            raise invalid("total", owner, "the sum of 'sizes'", self.total)

    @classmethod
    def from_sizes(cls, sizes: npt.ArrayLike, *, owner: str = "Population.from_sizes") -> Population:
        """A population from an in-memory 1-D array of positive int32 or int64 sizes."""
        array = np.asarray(sizes)
        small_int = array.dtype.kind == "i" and array.dtype.itemsize < 4
        if small_int or (array.dtype.kind == "u" and array.dtype.itemsize < 8):
            array = array.astype(np.int64)
        return cls(sizes=readonly(array), total=_check_sizes(array, "sizes", owner, where=""))

    @property
    def num_clients(self) -> int:
        return int(self.sizes.size)

    def __reduce__(self) -> tuple[Any, ...]:
        # A file-backed population pickles (Ray sends it between its own processes) as a reference to its file, which
        # must stay in place, not as n sizes; one in memory pickles its array.
        sizes = self.sizes
        if isinstance(sizes, np.memmap) and sizes.filename is not None:
            return (_reopen, (sizes.filename, sizes.dtype.str, sizes.offset, sizes.size, self.total))
        return (_in_memory, (np.asarray(sizes), self.total))

    def importances(self) -> FloatArray:
        """``p_i = n_i / M`` for every client: ``O(n)`` memory, for small populations."""
        return np.asarray(self.sizes, dtype=np.float64) / self.total

    def to_federation(self) -> Federation:
        """The :class:`~fedsample.Federation` of these sizes (``O(n)`` memory), for the library's samplers."""
        return Federation.from_sizes(np.asarray(self.sizes, dtype=np.int64))


def _in_memory(sizes: npt.NDArray[Any], total: int) -> Population:
    return Population(sizes=frozen(sizes), total=total)  # the unpickled array is fresh: no copy


def _reopen(filename: str, dtype: str, offset: int, size: int, total: int) -> Population:
    sizes = np.memmap(filename, dtype=np.dtype(dtype), mode="r", offset=offset, shape=(size,))
    return Population(sizes=sizes, total=total)


def _check_sizes(sizes: npt.NDArray[Any], name: str, owner: str, *, where: str) -> int:
    """Check a 1-D array of positive int32/int64 sizes block by block; return their total."""
    if sizes.dtype.kind != "i" or sizes.dtype.itemsize not in (4, 8):
        raise invalid(name, owner, f"int32 or int64 sizes{where}", f"dtype {sizes.dtype}")
    if sizes.ndim != 1 or sizes.size == 0:
        raise invalid(name, owner, f"a non-empty 1-D array of sizes{where}", f"shape {sizes.shape}")
    total = 0
    for start in range(0, sizes.size, _BLOCK):
        block = np.asarray(sizes[start : start + _BLOCK])
        if int(block.min()) <= 0:
            i = start + int(np.argmax(block <= 0))
            raise FedsampleError(
                f"The {name!r} parameter of {owner} must be positive integers{where}. "
                f"Got {int(sizes[i])} at index {i} instead.",
                parameter=name,
            )
        total += int(block.sum(dtype=np.int64))
    if total >= INT64_LIMIT:
        raise invalid(name, owner, f"sizes summing below 2**62{where}", total)
    return total


def _size_dtype(dtype: object, owner: str) -> np.dtype[Any]:
    """The little-endian numpy dtype for one of :data:`SIZE_DTYPES`."""
    try:
        resolved = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        resolved = None
    if resolved is None or resolved.kind != "i" or resolved.itemsize not in (4, 8):
        raise invalid("dtype", owner, Options(("int32", "int64")), dtype)
    little: np.dtype[Any] = resolved.newbyteorder("<")
    return little


def open_population(path: str | os.PathLike[str], *, dtype: object = None) -> Population:
    """Open a sizes file as a :class:`Population`, memory-mapped read-only.

    A path ending in ``.npy`` is read with :func:`numpy.load` (``mmap_mode="r"``) and must hold
    a 1-D int32 or int64 array; ``dtype``, if given, must match it. Any other path is a raw
    little-endian file of ``dtype`` (``"int32"`` or ``"int64"``, required). Every size must be a
    positive integer: the file is scanned once, block by block, which also gives ``M``.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "sizes.bin")
    >>> _ = write_sizes_file(path, [3, 1, 2], dtype="int32")
    >>> population = open_population(path, dtype="int32")
    >>> population.num_clients, population.total
    (3, 6)
    """
    owner = "open_population"
    source = Path(path)
    where = f" in {str(source)!r}"
    if not source.is_file():
        raise invalid("path", owner, "an existing sizes file", str(source))
    if source.suffix == ".npy":
        try:
            sizes = np.load(source, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as error:
            raise invalid("path", owner, f"a readable .npy file{where}", str(error)) from None
        if dtype is not None and _size_dtype(dtype, owner) != sizes.dtype.newbyteorder("<"):
            raise invalid("dtype", owner, f"the dtype stored{where} ({sizes.dtype})", dtype)
    else:
        if dtype is None:
            raise invalid("dtype", owner, f"one of {{'int32', 'int64'}} for the raw file {str(source)!r}", None)
        resolved = _size_dtype(dtype, owner)
        num_bytes = source.stat().st_size
        if num_bytes == 0 or num_bytes % resolved.itemsize:
            raise invalid(
                "path", owner, f"a raw file of whole {resolved} values, at least one{where}", f"{num_bytes} bytes"
            )
        sizes = np.memmap(source, dtype=resolved, mode="r")
    return Population(sizes=sizes, total=_check_sizes(sizes, "sizes", owner, where=where))


def write_sizes_file(path: str | os.PathLike[str], sizes: npt.ArrayLike, *, dtype: object = "int64") -> Path:
    """Write client sizes for :func:`open_population`: ``.npy`` when ``path`` ends so, else raw
    little-endian ``dtype`` (``"int32"`` or ``"int64"``). Returns the path written."""
    owner = "write_sizes_file"
    resolved = _size_dtype(dtype, owner)
    array = np.asarray(sizes)
    if array.dtype.kind not in "iu":
        raise invalid("sizes", owner, "an array of integers", f"dtype {array.dtype}")
    if array.size and int(array.min()) <= 0:  # before the conversion, which could wrap them around
        i = int(np.argmax(array <= 0))
        raise FedsampleError(
            f"The 'sizes' parameter of {owner} must be positive integers. "
            f"Got {int(array.flat[i])} at index {i} instead.",
            parameter="sizes",
        )
    if array.size and int(array.max()) > np.iinfo(resolved).max:
        raise invalid("sizes", owner, f"integers that fit in {resolved}", int(array.max()))
    converted = array.astype(resolved)
    _check_sizes(converted, "sizes", owner, where="")
    target = Path(path)
    if target.suffix == ".npy":
        np.save(target, converted, allow_pickle=False)
    else:
        converted.tofile(target)
    return target


def as_population(population: Population | Federation, owner: str) -> Population:
    """``population`` itself, or the :class:`Population` of a federation with size importances."""
    if isinstance(population, Population):
        return population
    if isinstance(population, Federation):
        masses = population.importance_masses
        if masses is None or not np.array_equal(masses, population.sizes):
            constraint = "a Federation with size importances (p_i = n_i / M)"
            raise invalid("federation", owner, constraint, "other importances")
        return Population.from_sizes(population.sizes, owner=owner)
    raise invalid("population", owner, "a Population or a Federation", type(population).__name__)


def cumulative_sizes(population: Population) -> IntArray:
    """``C_i = n_0 + ... + n_i`` (int64, 8 bytes per client), computed block by block."""
    cumulative = np.empty(population.num_clients, dtype=np.int64)
    carry = 0
    for start in range(0, population.num_clients, _BLOCK):
        block = cumulative[start : start + _BLOCK]
        np.cumsum(population.sizes[start : start + _BLOCK], dtype=np.int64, out=block)
        block += carry
        carry = int(block[-1])
    return frozen(cumulative)


def order_by_size(sizes: npt.NDArray[np.signedinteger[Any]]) -> tuple[npt.NDArray[Any], IntArray, IntArray]:
    """Clients by decreasing size, ties by id, and the distinct sizes (decreasing) with their counts.

    A counting sort, block by block: a histogram gives the distinct sizes and where each one's
    clients start in the order; each block of clients is then sorted by the rank of its size
    (numpy's stable sort of ``uint16`` keys is a radix sort) and written to the next free places
    of its sizes. ``O(n)`` time; memory is the order itself (int32 below ``2**31`` clients) and
    one block of temporaries. Sizes of ``2**26`` or more (or of ``4 n + 2**16``, for a small
    population) fall back to a stable comparison sort (``O(n log n)``, ``O(n)`` int64 temporaries).
    """
    n = sizes.size
    largest = int(sizes.max())
    if largest >= min(_MAX_SIZE_TABLE, 4 * n + (1 << 16)):
        order = np.argsort(-np.asarray(sizes, dtype=np.int64), kind="stable")
        sorted_sizes = np.asarray(sizes[order], dtype=np.int64)
        starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_sizes)) + 1])
        compact = order.astype(np.int32) if n < 2**31 else order
        return compact, sorted_sizes[starts], np.diff(np.concatenate([starts, [n]]))
    counts = np.zeros(largest + 1, dtype=np.int64)
    for start in range(0, n, _BLOCK):
        counts += np.bincount(sizes[start : start + _BLOCK], minlength=largest + 1)
    distinct = np.flatnonzero(counts)[::-1]  # rank r is the r-th largest size
    rank_of = np.zeros(largest + 1, dtype=np.uint16 if distinct.size <= 1 << 16 else np.uint32)
    rank_of[distinct] = np.arange(distinct.size)
    next_free = np.concatenate([[0], np.cumsum(counts[distinct])[:-1]]).astype(np.int64)
    order = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    for start in range(0, n, _BLOCK):
        keys = rank_of[sizes[start : start + _BLOCK]]
        block_order = _stable_argsort(keys)
        sorted_keys = keys[block_order]
        # Each key's clients in this block, in id order, go to the key's next free places.
        group_starts = np.concatenate([[0], np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1])
        group_lengths = np.diff(np.append(group_starts, sorted_keys.size))
        group_keys = sorted_keys[group_starts]
        # The j-th entry of the sorted block goes to next_free[key] + (j - its group's start).
        shift = np.repeat(next_free[group_keys] - group_starts, group_lengths)
        order[shift + np.arange(sorted_keys.size)] = start + block_order
        next_free[group_keys] += group_lengths
    return order, distinct.astype(np.int64), counts[distinct]


def _stable_argsort(keys: npt.NDArray[Any]) -> IntArray:
    """Stable argsort of ``uint16`` or ``uint32`` keys by 16-bit radix passes (least significant first)."""
    if keys.dtype == np.uint16:
        return np.argsort(keys, kind="stable")
    low = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return low[np.argsort((keys[low] >> 16).astype(np.uint16), kind="stable")]


@dataclass(frozen=True, eq=False)
class PopulationState:
    """What a population sampler's state holds: the population and ``num_sampled``, the ``m`` drawn a round."""

    population: Population
    num_sampled: int

    @property
    def num_clients(self) -> int:
        return self.population.num_clients


@plain_data
@dataclass(frozen=True, eq=False)
class ClusteredPopulationState(PopulationState):
    """Algorithm 1 of paper 000 over a population, in integer units.

    ``order`` lists the clients by decreasing size (ties by id); client ``order[j]`` owns the
    masses ``[C_{j-1}, C_j)`` of ``[0, M)`` where ``C`` cumulates the sorted sizes. The clients of
    one size form a run: run ``r`` has size ``run_sizes[r]``, starts at position
    ``run_positions[r]`` of ``order`` and at mass ``run_masses[r]``, so ``C`` itself is never stored.
    The layout is derived from ``population`` and ``num_sampled`` on construction (an ``O(n)``
    counting sort, :func:`order_by_size`), so a state round-trips through JSON as those two alone.
    """

    order: npt.NDArray[np.signedinteger[Any]] = field(init=False, repr=False)
    run_sizes: IntArray = field(init=False, repr=False)
    run_positions: IntArray = field(init=False, repr=False)
    run_masses: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        owner = "ClusteredPopulationState"
        check_param("num_sampled", owner, self.num_sampled, Interval(int, 1, None, closed="left"))
        if self.num_sampled * self.population.total >= INT64_LIMIT:
            constraint = f"such that m * M stays below 2**62 (M = {self.population.total})"
            raise invalid("num_sampled", owner, constraint, self.num_sampled)
        order, run_sizes, run_counts = order_by_size(self.population.sizes)
        run_positions = np.concatenate([[0], np.cumsum(run_counts)[:-1]]).astype(np.int64)
        run_masses = np.concatenate([[0], np.cumsum(run_counts * run_sizes)[:-1]]).astype(np.int64)
        object.__setattr__(self, "order", frozen(order))
        object.__setattr__(self, "run_sizes", readonly(run_sizes))
        object.__setattr__(self, "run_positions", readonly(run_positions))
        object.__setattr__(self, "run_masses", readonly(run_masses))

    @property
    def draw_rows(self) -> IntArray:
        """The ``m`` rows, one draw each."""
        return np.arange(self.num_sampled, dtype=np.int64)

    def draw_from_rows(self, rows: IntArray, rng: np.random.Generator) -> IntArray:
        """One client from each row in ``rows``: row ``k`` is ``[k M, (k+1) M)`` of a line where
        the client at position ``j`` owns the ``m n_j`` units ``[m C_{j-1}, m C_j)``."""
        total, m = self.population.total, self.num_sampled
        units = rows * total + rng.integers(0, total, size=rows.size, dtype=np.int64)
        # m C_{j-1} <= u < m C_j  <=>  C_{j-1} <= u // m < C_j, for integers C.
        mass = units // m
        run = np.searchsorted(self.run_masses, mass, side="right") - 1
        position = self.run_positions[run] + (mass - self.run_masses[run]) // self.run_sizes[run]
        return np.asarray(self.order[position], dtype=np.int64)

    def entry_weights(self, clients: IntArray) -> FloatArray:
        return np.full(clients.size, 1.0 / self.num_sampled)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = self.draw_from_rows(self.draw_rows, rng)
        return clients, self.entry_weights(clients)

    def _positions(self, masses: IntArray) -> IntArray:
        """Position in ``order`` of the client owning each mass coordinate in ``[0, M)``."""
        run = np.searchsorted(self.run_masses, masses, side="right") - 1
        positions: IntArray = self.run_positions[run] + (masses - self.run_masses[run]) // self.run_sizes[run]
        return positions

    def row_span(self, row: int) -> tuple[int, int]:
        """Positions ``first .. last`` (in ``order``) of the clients that row ``row`` holds."""
        total, m = self.population.total, self.num_sampled
        first, last = self._positions(np.array([row * total // m, ((row + 1) * total - 1) // m], dtype=np.int64))
        return int(first), int(last)

    def row(self, row: int) -> tuple[IntArray, IntArray]:
        """The clients of row ``row`` and their units in it (``r[k, i] = units / M``)."""
        total, m = self.population.total, self.num_sampled
        first, last = self.row_span(row)
        positions = np.arange(first, last + 1, dtype=np.int64)
        run = np.searchsorted(self.run_positions, positions, side="right") - 1
        start = self.run_masses[run] + (positions - self.run_positions[run]) * self.run_sizes[run]  # C_{j-1}
        end = start + self.run_sizes[run]
        units = np.minimum(m * end, (row + 1) * total) - np.maximum(m * start, row * total)
        return np.asarray(self.order[positions], dtype=np.int64), units

    def scan_row(self, row: int, availability: Availability, round: int, rng: np.random.Generator) -> int:
        """An exact draw from row ``row`` among its clients available in ``round``: -1 when none
        is, -2 when the row holds more than ``2**20`` clients (not scanned). ``O(row's clients)``."""
        first, last = self.row_span(row)
        if last - first + 1 > MAX_SCAN:
            return -2
        clients, units = self.row(row)
        cumulative = np.cumsum(np.where(availability.available(round, clients), units, 0))
        if cumulative[-1] == 0:
            return -1
        pick = np.searchsorted(cumulative, rng.integers(0, cumulative[-1]), side="right")
        return int(clients[pick])
