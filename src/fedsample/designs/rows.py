"""Independent draws from the rows of a row-stochastic matrix: MD, clustered sampling, OSMD with replacement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray, frozen, readonly
from fedsample._invariants import DISTRIBUTION_TOLERANCE, FieldError, check_count, check_values
from fedsample.designs.base import INT64_LIMIT, MAX_DRAWS
from fedsample.errors import FedsampleError
from fedsample.rng import check_generator
from fedsample.serialization import plain_data

__all__ = ["RowDesign"]


@plain_data
@dataclass(frozen=True, eq=False)
class RowDesign(ArrayFields):
    """Independent draws from the rows of a sparse row-stochastic matrix.

    Row ``u`` (stored in CSR form: clients ``indices[indptr[u]:indptr[u+1]]`` with probabilities
    ``probabilities[...]``) is drawn ``row_counts[u]`` times, independently. A client receives
    ``draw_weights[i]`` for each time it is drawn, so ``w_i = draw_weights[i] * count_i``.

    When ``units`` is given, row ``u`` gives client ``indices[j]`` probability
    ``units[j] / unit_total`` *exactly*: draws use integers, never floats. Build with
    :meth:`from_probabilities` or :meth:`from_units`.
    """

    num_clients: int
    indptr: IntArray
    indices: IntArray
    probabilities: FloatArray
    row_counts: IntArray
    draw_weights: FloatArray
    units: IntArray | None = None
    unit_total: int | None = None
    # Derived once, for O(log) draws: per-draw row ids and offset cumulative sums.
    draw_rows: IntArray = field(init=False, repr=False)
    cumulative: FloatArray | IntArray = field(init=False, repr=False)

    _array_dtypes: ClassVar[DTypeTable] = {
        "indptr": np.int64,
        "indices": np.int64,
        "probabilities": np.float64,
        "row_counts": np.int64,
        "draw_weights": np.float64,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_structure()
        num_rows = self.row_counts.size
        row_of_entry = np.repeat(np.arange(num_rows, dtype=np.int64), np.diff(self.indptr))
        object.__setattr__(self, "draw_rows", frozen(np.repeat(np.arange(num_rows, dtype=np.int64), self.row_counts)))
        if self.units is not None:
            units = readonly(np.asarray(self.units, dtype=np.int64))
            object.__setattr__(self, "units", units)
            total = int(self.unit_total)  # type: ignore[arg-type]
            if (num_rows + 1) * total >= INT64_LIMIT:
                raise FedsampleError(
                    f"The 'unit_total' parameter of RowDesign must keep (rows + 1) * unit_total below 2**62 "
                    f"for exact integer draws ({num_rows} rows). Got {total} instead.",
                    parameter="unit_total",
                )
            # Row u occupies the integer range [u T, (u+1) T): a draw is u T + randint(T).
            within = _segment_cumsum(units, self.indptr)
            cumulative: FloatArray | IntArray = within + row_of_entry * total
        else:
            within_f = _segment_cumsum(self.probabilities, self.indptr)
            # Normalise each row so its last cumulative value is exactly 1: floating error in a row
            # sum would otherwise leak draws into the next row.
            row_sums = np.add.reduceat(self.probabilities, self.indptr[:-1]) if self.indices.size else np.zeros(0)
            safe = np.where(row_sums > 0, row_sums, 1.0)
            within_f = within_f / safe[row_of_entry]
            last = self.indptr[1:] - 1
            within_f[last[self.indptr[1:] > self.indptr[:-1]]] = 1.0
            cumulative = within_f + row_of_entry
        object.__setattr__(self, "cumulative", frozen(cumulative))

    def _check_structure(self) -> None:
        """The CSR layout and the draw counts, checked before any array is built from them."""
        owner = "RowDesign"
        n = check_count(owner, "num_clients", self.num_clients, 0)
        counts = check_values(owner, "row_counts", self.row_counts, shape=(None,), low=0, high=MAX_DRAWS)
        if int(counts.sum()) > MAX_DRAWS:
            raise FieldError(owner, "row_counts", f"draw counts summing to at most {MAX_DRAWS}", str(int(counts.sum())))
        nnz = self.indices.size
        indptr = check_values(owner, "indptr", self.indptr, shape=(counts.size + 1,), low=0, high=nnz)
        if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
            raise FieldError(owner, "indptr", f"row offsets rising from 0 to {nnz}", f"{indptr.tolist()!r:.60}")
        check_values(owner, "indices", self.indices, shape=(None,), low=0, high=n - 1)
        for name, size in (("probabilities", nnz), ("draw_weights", n)):
            if getattr(self, name).shape != (size,):
                raise FieldError(owner, name, f"a 1-D array of length {size}", f"shape {getattr(self, name).shape}")
        if np.any(counts[np.diff(indptr) == 0] > 0):
            raise FieldError(owner, "row_counts", "zero for an empty row", f"{counts.tolist()!r:.60}")
        if self.units is not None:
            check_values(owner, "units", self.units, shape=(nnz,), low=0)
            check_count(owner, "unit_total", self.unit_total, 1)

    def check_invariants(self) -> None:
        owner = "RowDesign"
        check_values(owner, "draw_weights", self.draw_weights, shape=(self.num_clients,), low=0.0)
        check_values(owner, "probabilities", self.probabilities, shape=(self.indices.size,), low=0.0, high=1.0)
        if self.indices.size:
            row_sums = np.add.reduceat(self.probabilities, self.indptr[:-1])[np.diff(self.indptr) > 0]
            off = np.abs(row_sums - 1.0) > DISTRIBUTION_TOLERANCE
            if off.any():
                got = f"a row summing to {float(row_sums[off][0])!r}"
                raise FieldError(owner, "probabilities", f"rows summing to 1 (within {DISTRIBUTION_TOLERANCE:g})", got)
        if self.units is not None:
            nonempty = np.diff(self.indptr) > 0
            unit_sums = np.add.reduceat(self.units, self.indptr[:-1])[nonempty] if self.units.size else self.units
            if np.any(unit_sums != self.unit_total):
                got = f"{unit_sums.tolist()!r:.60}"
                raise FieldError(owner, "units", f"rows summing to unit_total ({self.unit_total})", got)

    @classmethod
    def from_probabilities(cls, *, probabilities: FloatArray, **rows: Any) -> RowDesign:
        """Rows of float probabilities: draws binary-search their cumulative sums.

        ``rows`` are the other fields: ``num_clients``, ``indptr``, ``indices``, ``row_counts`` and
        ``draw_weights``.
        """
        return cls(probabilities=probabilities, **rows)

    @classmethod
    def from_units(cls, *, units: IntArray, unit_total: int, **rows: Any) -> RowDesign:
        """Rows of exact integer units (row ``u`` gives ``units[j] / unit_total``): draws use integers.

        ``rows`` are the other fields, as for :meth:`from_probabilities`.
        """
        probabilities = frozen(np.asarray(units, dtype=np.float64) / unit_total)
        return cls(probabilities=probabilities, units=units, unit_total=int(unit_total), **rows)

    @property
    def num_rows(self) -> int:
        """Number of distinct rows (``m`` for clustered sampling, 1 for MD)."""
        return int(self.row_counts.size)

    @property
    def num_draws(self) -> int:
        return int(self.draw_rows.size)

    def dense_rows(self) -> FloatArray:
        """The distinct rows as a dense ``(num_rows, num_clients)`` matrix (for small populations)."""
        out = np.zeros((self.num_rows, self.num_clients))
        rows = np.repeat(np.arange(self.num_rows), np.diff(self.indptr))
        np.add.at(out, (rows, self.indices), self.probabilities)
        return out

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        check_generator(rng, "RowDesign.draw")
        clients = self.draw_from_rows(self.draw_rows, rng)
        return clients, self.entry_weights(clients)

    def entry_weights(self, clients: IntArray) -> FloatArray:
        """The weight of each entry of a round given the client it drew (the row-draw protocol,
        :class:`fedsample.samplers.row_draws.RowDraws`, with ``draw_rows`` and :meth:`draw_from_rows`)."""
        weights: FloatArray = self.draw_weights[clients]
        return weights

    def draw_from_rows(self, rows: IntArray, rng: np.random.Generator) -> IntArray:
        """One independent draw from each of ``rows`` (row ids, repeats allowed): the clients drawn."""
        if self.units is not None:
            total = int(self.unit_total)  # type: ignore[arg-type]
            x_int = rng.integers(0, total, size=rows.size, dtype=np.int64) + rows * total
            pos = np.searchsorted(self.cumulative, x_int, side="right")
        else:
            x = rng.random(rows.size) + rows
            pos = np.searchsorted(self.cumulative, x, side="right")
            # u + x can round up to u + 1 when x is within 2**-53 of 1: stay inside the row.
            pos = np.minimum(pos, self.indptr[rows + 1] - 1)
        clients: IntArray = self.indices[pos]
        return clients


def _segment_cumsum(values: np.ndarray, indptr: IntArray) -> np.ndarray:
    """Cumulative sums restarting at each CSR row boundary."""
    total = np.cumsum(values)
    if values.size == 0:
        return total
    starts = indptr[:-1]
    nonempty = indptr[1:] > starts
    before = np.zeros(indptr.size - 1, dtype=total.dtype)
    idx = starts[nonempty]
    before[nonempty] = np.where(idx > 0, total[np.maximum(idx - 1, 0)], 0)
    lengths = np.diff(indptr)
    out: np.ndarray = total - np.repeat(before, lengths)
    return out
