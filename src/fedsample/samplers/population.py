"""Populations of up to ``10^8`` clients and more, given as sizes in a memory-mapped file.

A :class:`Population` holds the sizes ``n_i`` as a read-only memory map (a ``.npy`` file, or a raw
little-endian int32/int64 file) and their total ``M``; nothing per client is copied into memory.
Three samplers draw from it with importances ``p_i = n_i / M``, each keeping at most a few bytes
per client after a one-time set-up and doing ``O(m log n)`` work per draw:

* :class:`PopulationMDSampler`: MD sampling, ``m`` i.i.d. draws with ``P(i) = p_i``, ``w_i =
  count_i / m`` (000, eq. 4). Set-up: the cumulative sizes (8 bytes per client).
* :class:`PopulationUniformSampler`: ``m`` distinct clients uniformly, ``w_i = (n/m) p_i``
  (003, eq. 6). No set-up.
* :class:`PopulationClusteredSampler`: clustered sampling by sample size (000, Alg. 1). Set-up:
  the clients' order by decreasing size, from a counting sort on integer sizes (4 bytes per client
  below ``2**31`` clients), and one entry per distinct size.

Each ``sample`` takes an optional :class:`Availability` model (for example
:class:`~fedsample.participation.availability.BernoulliAvailability`) and a round index and draws
among the clients available in that round only, exactly from the sampler's distribution conditioned
on availability: an unavailable candidate is rejected and its draw repeated (each try gives every
rejected draw twice as many candidates as the last, up to ``64 m`` in all). For independent draws
(MD, and each row of the clustered design) the first available candidate of a row has exactly the
conditional law; for uniform sampling the accepted candidates, in order, are a uniform sequence
without replacement from the available clients. This needs a model that answers the same for the
same ``(round, client)``, as fedsample's models do (they hash it). Availability is asked only about
candidates, ``O(m)`` per try. After ``max_tries`` tries a draw that still lacks an available client
raises :class:`~fedsample.FedsampleError` (with 70% availability a draw fails 64 tries with
probability below ``0.3**64``, with 1% below ``1e-15``; a round where too few clients are available
fails), except that a clustered row is then scanned exactly (see
:class:`PopulationClusteredSampler`). The weights are the sampler's own (``1/m`` per draw, or
``(n/m) p_i``): availability changes who is drawn, not the formula.

The samplers follow the :class:`~fedsample.samplers.Sampler` contract: ``init`` also accepts a
:class:`~fedsample.Federation` with size importances, so they run in the engine unchanged.

>>> import numpy as np
>>> population = Population.from_sizes([100, 250, 500, 150])
>>> sampler = PopulationMDSampler()
>>> state = sampler.init(population, num_sampled=2)
>>> selection = sampler.sample(state, np.random.default_rng(0))
>>> selection.clients.size, float(selection.weights.sum())
(2, 1.0)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample._validation import Constraint, Interval, Options, check_param, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler, Selection

__all__ = [
    "SIZE_DTYPES",
    "ClusteredPopulationState",
    "MDPopulationState",
    "Population",
    "PopulationClusteredSampler",
    "PopulationMDSampler",
    "PopulationUniformSampler",
    "UniformPopulationState",
    "open_population",
    "order_by_size",
    "write_sizes_file",
]

SIZE_DTYPES: tuple[str, ...] = ("int32", "int64")
_INT64_LIMIT = 2**62
# Sizes are checked and summed in blocks of this many clients, so that validating a file of
# 10^8 sizes never holds more than one block of temporaries (32 MiB of int64).
_BLOCK = 1 << 22
# The order by size is a counting sort when the largest size is below this bound and below 4n
# (the histogram has one 8-byte entry per size value, so its memory stays linear in n).
_MAX_SIZE_TABLE = 1 << 26
# A clustered row whose candidates keep being unavailable is scanned exactly when it holds at most
# this many clients (8 MiB of ids); a larger one raises.
_MAX_SCAN = 1 << 20
# Candidates asked about in one try are at most this many per client drawn: O(m) memory.
_MAX_BATCH = 64


# --- populations and size files --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Population:
    """Client sizes ``n_i`` (read-only, usually a memory map) and their total ``M``.

    Build one with :func:`open_population` (a file) or :meth:`from_sizes` (an array in memory).
    """

    sizes: npt.NDArray[np.signedinteger[Any]]
    total: int

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
        return (Population, (sizes, self.total))

    def importances(self) -> FloatArray:
        """``p_i = n_i / M`` for every client: ``O(n)`` memory, for small populations."""
        return np.asarray(self.sizes, dtype=np.float64) / self.total

    def to_federation(self) -> Federation:
        """The :class:`~fedsample.Federation` of these sizes (``O(n)`` memory), for the library's samplers."""
        return Federation.from_sizes(np.asarray(self.sizes, dtype=np.int64))


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
    if total >= _INT64_LIMIT:
        raise invalid(name, owner, f"sizes summing below 2**62{where}", total)
    return total


def _size_dtype(dtype: object, owner: str) -> np.dtype[Any]:
    """The little-endian numpy dtype for one of :data:`SIZE_DTYPES`."""
    try:
        resolved = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        resolved = None
    if resolved is None or resolved.kind != "i" or resolved.itemsize not in (4, 8):
        raise invalid("dtype", owner, "one of {'int32', 'int64'}", dtype)
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


def _frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` itself, made read-only: for arrays built here and referenced nowhere else, where
    :func:`readonly`'s defensive copy would double the peak memory (800 MB at 10^8 clients)."""
    array.flags.writeable = False
    return array


def _as_population(population: Population | Federation, owner: str) -> Population:
    if isinstance(population, Population):
        return population
    if isinstance(population, Federation):
        masses = population.importance_masses
        if masses is None or not np.array_equal(masses, population.sizes):
            constraint = "a Federation with size importances (p_i = n_i / M)"
            raise invalid("federation", owner, constraint, "other importances")
        return Population.from_sizes(population.sizes, owner=owner)
    raise invalid("population", owner, "a Population or a Federation", type(population).__name__)


# --- rejection of unavailable candidates --------------------------------------------------------------


@runtime_checkable
class Availability(Protocol):
    """What the population samplers ask of an availability model: which of ``clients`` can join ``round``.

    :class:`fedsample.participation.availability.Availability` and its subclasses satisfy it; the
    samplers layer states the protocol itself so that it imports nothing from the participation
    layer above it.
    """

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray: ...


def _check_availability(availability: object, round: object, owner: str) -> None:
    if availability is not None and not isinstance(availability, Availability):
        raise invalid(
            "availability",
            owner,
            "None or an availability model (with available(round, clients))",
            type(availability).__name__,
        )
    check_param("round", owner, round, Interval(int, 0, None, closed="left"))


def _rows_among_available(
    draw: Callable[[IntArray], IntArray],
    rows: IntArray,
    availability: Availability | None,
    round: int,
    max_tries: int,
    owner: str,
    *,
    scan: Callable[[int], int] | None = None,
) -> IntArray:
    """One independent draw per entry of ``rows``, each conditioned on an available client.

    ``draw(rows)`` draws a client for each row given. A row's first available candidate has the
    row's law conditioned on availability (the availability of a round is fixed), so redrawing
    only the rejected rows is exact. Rows still rejected after ``max_tries`` go to ``scan(row)``
    when given: an exact draw among the row's available clients, or -1 when it has none (an
    entry of -1 is returned). Switching method after failed tries keeps the law exact, since the
    scan's draw does not depend on them.
    """
    clients = draw(rows)
    if availability is None:
        return clients
    pending = np.flatnonzero(~availability.available(round, clients))
    tries, per_row = 1, 1
    while pending.size and tries < max_tries:
        # Each pending row gets a run of candidates (doubling each try, at most _MAX_BATCH * m in
        # all) and keeps its first available one: still the row's first available i.i.d. draw.
        per_row = max(1, min(2 * per_row, (_MAX_BATCH * rows.size) // pending.size))
        candidates = draw(np.repeat(rows[pending], per_row)).reshape(pending.size, per_row)
        ok = availability.available(round, candidates.ravel()).reshape(candidates.shape)
        found = ok.any(axis=1)
        clients[pending[found]] = candidates[found, ok[found].argmax(axis=1)]
        pending = pending[~found]
        tries += 1
    if pending.size and scan is not None:
        clients[pending] = [scan(int(row)) for row in rows[pending]]
        pending = np.zeros(0, dtype=np.int64)
    if pending.size:
        raise FedsampleError(
            f"The 'availability' parameter of {owner} must leave an available client for every draw of "
            f"round {round}. Got {pending.size} of {rows.size} draws with no available candidate after "
            f"{max_tries} tries (max_tries) instead.",
            parameter="availability",
        )
    return clients


_PARAMETERS: dict[str, Constraint] = {"max_tries": Interval(int, 1, None, closed="left")}


@dataclass(frozen=True, kw_only=True)
class _PopulationSampler(Sampler[Any]):
    """Shared hyperparameter: ``max_tries``, the batches of candidates a draw may use."""

    name: ClassVar[str] = "population"
    max_tries: int = 64
    _parameter_constraints: ClassVar[dict[str, Constraint]] = _PARAMETERS

    def design(self, state: Any) -> Any:
        """The state itself: it offers ``num_clients`` and ``draw(rng)`` (the Design protocol)."""
        return state

    def importances(self, state: Any) -> FloatArray:
        """``p_i = n_i / M``, materialised: ``O(n)`` memory, for small populations only."""
        return state.population.importances()  # type: ignore[no-any-return]


# --- MD sampling -------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MDPopulationState:
    """MD sampling over a population: ``cumulative[i] = n_0 + ... + n_i`` (int64, 8 bytes per client)."""

    population: Population
    num_sampled: int
    cumulative: IntArray

    @property
    def num_clients(self) -> int:
        return self.population.num_clients

    def draw_rows(self, rows: IntArray, rng: np.random.Generator) -> IntArray:
        # Client i owns the integers [C_{i-1}, C_i) of [0, M): exact probability n_i / M.
        units = rng.integers(0, self.population.total, size=rows.size, dtype=np.int64)
        return np.searchsorted(self.cumulative, units, side="right").astype(np.int64)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = self.draw_rows(np.zeros(self.num_sampled, dtype=np.int64), rng)
        return clients, np.full(clients.size, 1.0 / self.num_sampled)


@dataclass(frozen=True, kw_only=True)
class PopulationMDSampler(_PopulationSampler):
    """MD sampling over a :class:`Population`: ``m`` i.i.d. draws, ``P(i) = n_i / M``,
    ``w_i = count_i / m`` (000, eq. 4). Set-up ``O(n)`` (a cumulative sum), draw ``O(m log n)``."""

    name = "population-md"

    def init(self, federation: Population | Federation, num_sampled: int) -> MDPopulationState:
        population = _as_population(federation, f"{type(self).__name__}.init")
        m = self._check_num_sampled(num_sampled, upper=None)
        cumulative = np.empty(population.num_clients, dtype=np.int64)
        carry = 0
        for start in range(0, population.num_clients, _BLOCK):
            block = cumulative[start : start + _BLOCK]
            np.cumsum(population.sizes[start : start + _BLOCK], dtype=np.int64, out=block)
            block += carry
            carry = int(block[-1])
        return MDPopulationState(population=population, num_sampled=m, cumulative=_frozen(cumulative))

    def sample(
        self,
        state: MDPopulationState,
        rng: np.random.Generator,
        *,
        availability: Availability | None = None,
        round: int = 0,
    ) -> Selection:
        """``m`` draws among the clients available in ``round``, ``1/m`` each."""
        owner = f"{type(self).__name__}.sample"
        _check_availability(availability, round, owner)
        rows = np.zeros(state.num_sampled, dtype=np.int64)
        clients = _rows_among_available(
            lambda r: state.draw_rows(r, rng), rows, availability, round, self.max_tries, owner
        )
        return Selection(clients=clients, weights=np.full(clients.size, 1.0 / state.num_sampled))


# --- uniform sampling without replacement -----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class UniformPopulationState:
    """Uniform sampling over a population: nothing beyond the sizes (read for the ``m`` drawn)."""

    population: Population
    num_sampled: int

    @property
    def num_clients(self) -> int:
        return self.population.num_clients

    def weights(self, clients: IntArray) -> FloatArray:
        """``w_i = (n/m) p_i = n n_i / (m M)`` (003, eq. 6)."""
        sizes = np.asarray(self.population.sizes[clients], dtype=np.float64)
        scale = self.population.num_clients / (self.num_sampled * self.population.total)
        return sizes * scale

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = rng.choice(self.num_clients, size=self.num_sampled, replace=False).astype(np.int64)
        return clients, self.weights(clients)


@dataclass(frozen=True, kw_only=True)
class PopulationUniformSampler(_PopulationSampler):
    """``m`` distinct clients uniformly without replacement over a :class:`Population`,
    ``w_i = (n/m) p_i`` (003, eq. 6; unbiased). No set-up; a draw is ``O(m log m)``."""

    name = "population-uniform"

    def init(self, federation: Population | Federation, num_sampled: int) -> UniformPopulationState:
        population = _as_population(federation, f"{type(self).__name__}.init")
        m = self._check_num_sampled(num_sampled, upper=population.num_clients)
        return UniformPopulationState(population=population, num_sampled=m)

    def sample(
        self,
        state: UniformPopulationState,
        rng: np.random.Generator,
        *,
        availability: Availability | None = None,
        round: int = 0,
    ) -> Selection:
        """``m`` distinct clients, uniformly among those available in ``round``."""
        owner = f"{type(self).__name__}.sample"
        _check_availability(availability, round, owner)
        if availability is None:
            clients, weights = state.draw(rng)
            return Selection(clients=clients, weights=weights)
        m, n = state.num_sampled, state.num_clients
        chosen = np.zeros(0, dtype=np.int64)
        drawn = 0
        for _ in range(self.max_tries):
            needed = m - chosen.size
            # A stream of uniform candidates; a candidate is accepted when it is available and not
            # accepted before. The accepted ones, in stream order, are a uniform ordered sample
            # without replacement from the available clients (the batch only groups the stream,
            # and its length follows the acceptance rate so far, up to _MAX_BATCH * m).
            rate = max(chosen.size, 1) / max(drawn, 1)
            size = min(_MAX_BATCH * m, int(2 * needed / rate) + 16)
            drawn += size
            candidates = rng.integers(0, n, size=size, dtype=np.int64)
            _, first = np.unique(candidates, return_index=True)
            candidates = candidates[np.sort(first)]
            candidates = candidates[~np.isin(candidates, chosen)]
            candidates = candidates[availability.available(round, candidates)]
            chosen = np.concatenate([chosen, candidates[:needed]])
            if chosen.size == m:
                return Selection(clients=chosen, weights=state.weights(chosen))
        raise FedsampleError(
            f"The 'availability' parameter of {owner} must leave at least m = {m} clients available in round "
            f"{round}. Got {chosen.size} distinct available clients after {self.max_tries} tries (max_tries) instead.",
            parameter="availability",
        )


# --- clustered sampling by size (Alg. 1 of 000) ------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ClusteredPopulationState:
    """Algorithm 1 of paper 000 over a population, in integer units.

    ``order`` lists the clients by decreasing size (ties by id); client ``order[j]`` owns the
    masses ``[C_{j-1}, C_j)`` of ``[0, M)`` where ``C`` cumulates the sorted sizes. The clients of
    one size form a run: run ``r`` has size ``run_sizes[r]``, starts at position
    ``run_positions[r]`` of ``order`` and at mass ``run_masses[r]``, so ``C`` itself is never stored.
    """

    population: Population
    num_sampled: int
    order: npt.NDArray[np.signedinteger[Any]]
    run_sizes: IntArray
    run_positions: IntArray
    run_masses: IntArray

    @property
    def num_clients(self) -> int:
        return self.population.num_clients

    def draw_rows(self, rows: IntArray, rng: np.random.Generator) -> IntArray:
        """One client from each row in ``rows``: row ``k`` is ``[k M, (k+1) M)`` of a line where
        the client at position ``j`` owns the ``m n_j`` units ``[m C_{j-1}, m C_j)``."""
        total, m = self.population.total, self.num_sampled
        units = rows * total + rng.integers(0, total, size=rows.size, dtype=np.int64)
        # m C_{j-1} <= u < m C_j  <=>  C_{j-1} <= u // m < C_j, for integers C.
        mass = units // m
        run = np.searchsorted(self.run_masses, mass, side="right") - 1
        position = self.run_positions[run] + (mass - self.run_masses[run]) // self.run_sizes[run]
        return np.asarray(self.order[position], dtype=np.int64)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = self.draw_rows(np.arange(self.num_sampled, dtype=np.int64), rng)
        return clients, np.full(clients.size, 1.0 / self.num_sampled)

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
        if last - first + 1 > _MAX_SCAN:
            return -2
        clients, units = self.row(row)
        cumulative = np.cumsum(np.where(availability.available(round, clients), units, 0))
        if cumulative[-1] == 0:
            return -1
        pick = np.searchsorted(cumulative, rng.integers(0, cumulative[-1]), side="right")
        return int(clients[pick])


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


@dataclass(frozen=True, kw_only=True)
class PopulationClusteredSampler(_PopulationSampler):
    """Clustered sampling by sample size (000, Alg. 1) over a :class:`Population`.

    The same rows as :class:`~fedsample.SizeClusteredSampler` with size importances: clients laid
    out by decreasing size (ties by id), client ``i`` owning ``m n_i`` units of a line of ``m M``
    units cut into ``m`` rows of ``M``; each round draws one client per row, ``w_i = count_i / m``
    (unbiased, eqs. 7-8). Set-up: an ``O(n)`` counting sort; memory: the order (int32 below
    ``2**31`` clients) and one entry per distinct size. Draw: ``O(m log(distinct sizes))``.

    With availability, each row draws among its available clients. A row whose candidates are
    all rejected ``max_tries`` times is scanned (its clients asked once, exact, at most ``2**20``
    of them); a row with no available client at all (a large client alone in its row, say) raises
    with ``empty_rows="raise"`` (default) or contributes no draw with ``"skip"``: the round then
    has fewer than ``m`` entries, still ``1/m`` each, and that row's share of the weight is lost
    (as with the ``"ignore"`` failure policy).
    """

    name = "population-clustered-size"
    empty_rows: Literal["raise", "skip"] = "raise"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_PARAMETERS,
        "empty_rows": Options(("raise", "skip")),
    }

    def init(self, federation: Population | Federation, num_sampled: int) -> ClusteredPopulationState:
        owner = f"{type(self).__name__}.init"
        population = _as_population(federation, owner)
        m = self._check_num_sampled(num_sampled, upper=None)
        if m * population.total >= _INT64_LIMIT:
            raise invalid(
                "num_sampled", owner, f"such that m * M stays below 2**62 (M = {population.total})", num_sampled
            )
        order, run_sizes, run_counts = order_by_size(population.sizes)
        run_positions = np.concatenate([[0], np.cumsum(run_counts)[:-1]]).astype(np.int64)
        run_masses = np.concatenate([[0], np.cumsum(run_counts * run_sizes)[:-1]]).astype(np.int64)
        return ClusteredPopulationState(
            population=population,
            num_sampled=m,
            order=_frozen(order),
            run_sizes=readonly(run_sizes),
            run_positions=readonly(run_positions),
            run_masses=readonly(run_masses),
        )

    def sample(
        self,
        state: ClusteredPopulationState,
        rng: np.random.Generator,
        *,
        availability: Availability | None = None,
        round: int = 0,
    ) -> Selection:
        """One client from each of the ``m`` rows, each among the row's clients available in ``round``."""
        owner = f"{type(self).__name__}.sample"
        _check_availability(availability, round, owner)
        rows = np.arange(state.num_sampled, dtype=np.int64)
        scan = None if availability is None else (lambda row: state.scan_row(row, availability, round, rng))
        clients = _rows_among_available(
            lambda r: state.draw_rows(r, rng), rows, availability, round, self.max_tries, owner, scan=scan
        )
        if np.any(clients == -2):
            k = int(rows[np.argmax(clients == -2)])
            raise FedsampleError(
                f"The 'availability' parameter of {owner} must leave an available client for every draw of "
                f"round {round}. Got row {k} with no available candidate after {self.max_tries} tries (max_tries) "
                f"and too many clients to scan (more than {_MAX_SCAN}) instead.",
                parameter="availability",
            )
        empty = clients == -1
        if empty.any() and self.empty_rows == "raise":
            k = int(rows[np.argmax(empty)])
            raise FedsampleError(
                f"The 'availability' parameter of {owner} must leave an available client in every row of "
                f"round {round} (or use empty_rows='skip'). Got row {k} with no available client instead.",
                parameter="availability",
            )
        clients = clients[~empty]
        return Selection(clients=clients, weights=np.full(clients.size, 1.0 / state.num_sampled))
