"""Sampling designs: the few random mechanisms that every sampler reduces to.

A design says how a round's selection is drawn and which aggregation weight each drawn client
gets. Samplers build designs from their state; :mod:`fedsample.stats` computes exact moments from
designs, so a new sampler that reuses a design gets its statistics for free.

* :class:`FullDesign`: every client, a fixed weight each.
* :class:`RowDesign`: independent draws, one per row of a row-stochastic matrix (MD sampling is
  one row ``p`` drawn ``m`` times; clustered sampling is ``m`` different rows). A client gets
  ``draw_weights[i]`` per time it is drawn.
* :class:`FixedSizeDesign`: ``m`` distinct clients uniformly without replacement.
* :class:`BernoulliDesign`: independent inclusions with probabilities ``q_i`` (Poisson-binomial,
  binomial and optimal sampling of paper 003, App. A.5, A.6 and A.8).

Every ``draw`` costs time in the number of selected clients (and, for :class:`RowDesign`, the
logarithm of the row lengths), never in ``n``: the set-up work is done once, at construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fedsample._arrays import FloatArray, IntArray, frozen, readonly
from fedsample._invariants import (
    DISTRIBUTION_TOLERANCE,
    FieldError,
    check_count,
    check_distribution,
    check_real,
    check_values,
)
from fedsample.errors import FedsampleError
from fedsample.serialization import plain_data

__all__ = [
    "MAX_DRAWS",
    "BernoulliDesign",
    "Design",
    "FixedSizeDesign",
    "FullDesign",
    "RowDesign",
]

_INT64_LIMIT = 2**62
# A round never draws more than this many clients: beyond it the per-draw arrays alone would not
# fit in memory, and no federated deployment draws that many (samplers' MAX_NUM_SAMPLED).
MAX_DRAWS = 10_000_000


class Design(Protocol):
    """What every design offers: its population size and a draw."""

    @property
    def num_clients(self) -> int: ...

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        """Draw one round: client ids (with multiplicity, in draw order) and aligned weights."""
        ...


@plain_data
@dataclass(frozen=True, eq=False)
class FullDesign:
    """Every client participates with weight ``weights[i]`` (full participation: ``w_i = p_i``)."""

    weights: FloatArray

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", readonly(np.asarray(self.weights, dtype=np.float64)))

    def check_invariants(self) -> None:
        check_values("FullDesign", "weights", self.weights, shape=(None,), low=0.0)

    @property
    def num_clients(self) -> int:
        return int(self.weights.size)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        return np.arange(self.num_clients, dtype=np.int64), self.weights.copy()


@plain_data
@dataclass(frozen=True, eq=False)
class RowDesign:
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

    def __post_init__(self) -> None:
        for name, dtype in (
            ("indptr", np.int64),
            ("indices", np.int64),
            ("probabilities", np.float64),
            ("row_counts", np.int64),
            ("draw_weights", np.float64),
        ):
            object.__setattr__(self, name, readonly(np.asarray(getattr(self, name), dtype=dtype)))
        self._check_structure()
        num_rows = self.row_counts.size
        row_of_entry = np.repeat(np.arange(num_rows, dtype=np.int64), np.diff(self.indptr))
        object.__setattr__(self, "draw_rows", frozen(np.repeat(np.arange(num_rows, dtype=np.int64), self.row_counts)))
        if self.units is not None:
            units = readonly(np.asarray(self.units, dtype=np.int64))
            object.__setattr__(self, "units", units)
            total = int(self.unit_total)  # type: ignore[arg-type]
            if (num_rows + 1) * total >= _INT64_LIMIT:
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
    def from_probabilities(
        cls,
        *,
        num_clients: int,
        indptr: IntArray,
        indices: IntArray,
        probabilities: FloatArray,
        row_counts: IntArray,
        draw_weights: FloatArray,
    ) -> RowDesign:
        return cls(
            num_clients=num_clients,
            indptr=indptr,
            indices=indices,
            probabilities=probabilities,
            row_counts=row_counts,
            draw_weights=draw_weights,
        )

    @classmethod
    def from_units(
        cls,
        *,
        num_clients: int,
        indptr: IntArray,
        indices: IntArray,
        units: IntArray,
        unit_total: int,
        row_counts: IntArray,
        draw_weights: FloatArray,
    ) -> RowDesign:
        return cls(
            num_clients=num_clients,
            indptr=indptr,
            indices=indices,
            probabilities=frozen(np.asarray(units, dtype=np.float64) / unit_total),
            row_counts=row_counts,
            draw_weights=draw_weights,
            units=units,
            unit_total=int(unit_total),
        )

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
        clients = self.draw_from_rows(self.draw_rows, rng)
        return clients, self.draw_weights[clients]

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


@plain_data
@dataclass(frozen=True, eq=False)
class FixedSizeDesign:
    """``num_sampled`` distinct clients, uniformly without replacement; client ``i`` gets ``weights[i]``."""

    num_sampled: int
    weights: FloatArray

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", readonly(np.asarray(self.weights, dtype=np.float64)))
        object.__setattr__(self, "num_sampled", int(self.num_sampled))

    def check_invariants(self) -> None:
        check_values("FixedSizeDesign", "weights", self.weights, shape=(None,), low=0.0)
        check_count("FixedSizeDesign", "num_sampled", self.num_sampled, 1, min(self.num_clients, MAX_DRAWS))

    @property
    def num_clients(self) -> int:
        return int(self.weights.size)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        # Generator.choice without replacement uses Floyd's algorithm when m is small against n:
        # O(m) time and memory, whatever n is.
        clients = rng.choice(self.num_clients, size=self.num_sampled, replace=False).astype(np.int64)
        return clients, self.weights[clients]


@plain_data
@dataclass(frozen=True, eq=False)
class BernoulliDesign:
    """Independent inclusions: client ``i`` is selected with probability ``inclusion[i]``.

    Draws visit only the clients they select (in expectation twice that many): clients are grouped
    once into buckets whose probabilities lie within a factor 2 of the bucket maximum; each round
    draws the bucket's candidates at the maximum rate (a binomial count, then a uniform subset)
    and keeps each with probability ``q_i / q_max``. The result is exactly independent
    Bernoulli(``q_i``) inclusions.
    """

    inclusion: FloatArray
    weights: FloatArray
    bucket_clients: IntArray = field(init=False, repr=False)
    bucket_indptr: IntArray = field(init=False, repr=False)
    bucket_max: FloatArray = field(init=False, repr=False)
    bucket_accept: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        q = readonly(np.asarray(self.inclusion, dtype=np.float64))
        object.__setattr__(self, "inclusion", q)
        object.__setattr__(self, "weights", readonly(np.asarray(self.weights, dtype=np.float64)))
        positive = np.flatnonzero(q > 0)
        # Bucket j holds q in (2^-(j+1), 2^-j]; the last bucket takes everything smaller.
        level = np.minimum(np.floor(-np.log2(q[positive])).astype(np.int64), 62)
        level = np.maximum(level, 0)
        # The levels fit in a byte, where numpy's stable sort is a radix sort: O(n), same order.
        order = positive[np.argsort(level.astype(np.uint8), kind="stable")]
        counts = np.bincount(level, minlength=63) if positive.size else np.zeros(63, dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(counts[counts > 0])]).astype(np.int64)
        qmax = np.maximum.reduceat(q[order], indptr[:-1]) if order.size else np.zeros(0, dtype=np.float64)
        accept = q[order] / np.repeat(qmax, np.diff(indptr)) if order.size else np.zeros(0)
        # The bucket arrays are built here (astype copies): frozen in place.
        object.__setattr__(self, "bucket_clients", frozen(order.astype(np.int64)))
        object.__setattr__(self, "bucket_indptr", frozen(indptr))
        object.__setattr__(self, "bucket_max", frozen(qmax.astype(np.float64)))
        object.__setattr__(self, "bucket_accept", frozen(np.minimum(accept, 1.0)))

    def check_invariants(self) -> None:
        check_values("BernoulliDesign", "inclusion", self.inclusion, shape=(None,), low=0.0, high=1.0)
        check_values("BernoulliDesign", "weights", self.weights, shape=self.inclusion.shape, low=0.0)

    @property
    def num_clients(self) -> int:
        return int(self.inclusion.size)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        chosen: list[IntArray] = []
        for b in range(self.bucket_max.size):
            start, stop = int(self.bucket_indptr[b]), int(self.bucket_indptr[b + 1])
            size = stop - start
            k = int(rng.binomial(size, self.bucket_max[b]))
            if k == 0:
                continue
            pos = start + rng.choice(size, size=k, replace=False)
            keep = rng.random(k) < self.bucket_accept[pos]
            chosen.append(self.bucket_clients[pos[keep]])
        clients = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        return clients, self.weights[clients]


@plain_data
@dataclass(frozen=True, eq=False)
class SuccessiveDesign:
    """``num_sampled`` distinct clients drawn one after another, each from ``probabilities``
    renormalised over the clients not drawn yet (successive sampling without replacement).

    Weights follow Des Raj's ordered estimator, unbiased for ``sum_i importances[i] y_i`` for any
    client values ``y``. The client drawn ``k``-th (``k = 1..K``), after clients of total
    probability ``S_{k-1}``, gets ``importances[i] * ((1 - S_{k-1}) / p_i + (K - k)) / K``. With
    ``K = 1`` this is ``importances[i] / p_i``, the with-replacement importance weight.

    A draw tries each position with a draw from the full distribution and redraws a client
    already taken (which samples exactly from the renormalised remainder); after too many redraws
    it switches to exponential keys (``E_i / p_i``, the ``K`` smallest in order), which have the
    same law. Exact moments have no closed form here: use the Monte-Carlo estimator.
    """

    probabilities: FloatArray
    num_sampled: int
    importances: FloatArray
    cumulative: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        p = readonly(np.asarray(self.probabilities, dtype=np.float64))
        object.__setattr__(self, "probabilities", p)
        object.__setattr__(self, "importances", readonly(np.asarray(self.importances, dtype=np.float64)))
        object.__setattr__(self, "num_sampled", int(self.num_sampled))
        if self.num_sampled > int(np.count_nonzero(p > 0)):
            raise FedsampleError(
                f"The 'num_sampled' parameter of SuccessiveDesign must be at most the number of clients with "
                f"positive probability ({int(np.count_nonzero(p > 0))}). Got {self.num_sampled} instead.",
                parameter="num_sampled",
            )
        cumulative = np.cumsum(p)
        object.__setattr__(self, "cumulative", readonly(cumulative / cumulative[-1]))

    def check_invariants(self) -> None:
        owner = "SuccessiveDesign"
        check_distribution(owner, "probabilities", self.probabilities)
        check_count(owner, "num_sampled", self.num_sampled, 1, min(self.num_clients, MAX_DRAWS))
        check_distribution(owner, "importances", self.importances, size=self.num_clients)

    @property
    def num_clients(self) -> int:
        return int(self.probabilities.size)

    def draw_order(self, rng: np.random.Generator) -> IntArray:
        """The ``K`` distinct clients in the order they were drawn."""
        k_total = self.num_sampled
        picks: list[int] = []
        taken: set[int] = set()
        budget = 32 * k_total + 64
        while len(picks) < k_total and budget > 0:
            batch = np.searchsorted(self.cumulative, rng.random(k_total - len(picks)), side="right")
            for client in np.minimum(batch, self.num_clients - 1).tolist():
                budget -= 1
                if client not in taken and self.probabilities[client] > 0:
                    taken.add(client)
                    picks.append(client)
                    # Later draws in this batch were made before this pick was excluded, so
                    # only the first untaken one counts; the rest are redrawn.
                    break
        if len(picks) < k_total:
            with np.errstate(divide="ignore"):
                keys = rng.exponential(size=self.num_clients) / self.probabilities
            keys[list(taken)] = -1.0  # keep the picks made so far, in their order
            order = np.argsort(keys, kind="stable")[:k_total]
            picks = picks + [int(c) for c in order if int(c) not in taken][: k_total - len(picks)]
        return np.asarray(picks, dtype=np.int64)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = self.draw_order(rng)
        return clients, self.ordered_weights(clients)

    def ordered_weights(self, clients: IntArray) -> FloatArray:
        """Des Raj's weights of clients drawn in the order given."""
        k_total = clients.size
        p = self.probabilities[clients]
        before = np.concatenate([[0.0], np.cumsum(p)[:-1]])  # S_{k-1}
        position = np.arange(1, k_total + 1)
        return self.importances[clients] * ((1.0 - before) / p + (k_total - position)) / k_total


@plain_data
@dataclass(frozen=True, eq=False)
class DataLevelDesign:
    """Data-level sampling: every client keeps each of its ``n_i`` samples with probability ``rate``.

    The kept count ``k_i ~ Binomial(n_i, rate)`` is drawn for each client (a uniform subset of
    ``k_i`` samples has the same law as independent Bernoulli keeps); the clients with ``k_i > 0``
    are selected, and train on exactly those ``k_i`` samples (mean loss). Their weights:

    * ``aggregation="fixed"`` (FedSampling, paper 004): ``k_i / divisor``, so the aggregate is the
      sum of the kept samples' gradients divided by ``divisor`` (``K``). Exact moments exist;
    * ``"weighted"``: ``k_i / sum_j k_j`` (004's naive variant with weighted averaging);
    * ``"average"``: ``1 / #selected`` (004's naive variant with plain averaging).
    """

    sizes: IntArray
    rate: float
    divisor: float
    aggregation: str = "fixed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", readonly(np.asarray(self.sizes, dtype=np.int64)))
        object.__setattr__(self, "rate", float(self.rate))
        object.__setattr__(self, "divisor", float(self.divisor))

    def check_invariants(self) -> None:
        owner = "DataLevelDesign"
        check_values(owner, "sizes", self.sizes, shape=(None,), low=0, integer=True)
        check_real(owner, "rate", self.rate, 0.0, 1.0)
        check_real(owner, "divisor", self.divisor, np.finfo(np.float64).tiny, np.inf)
        if not np.isfinite(self.divisor):
            raise FieldError(owner, "divisor", "a positive finite float", repr(self.divisor))
        if self.aggregation not in ("fixed", "weighted", "average"):
            raise FieldError(owner, "aggregation", "one of 'fixed', 'weighted', 'average'", f"{self.aggregation!r:.40}")

    @property
    def num_clients(self) -> int:
        return int(self.sizes.size)

    def draw_counts(self, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """The selected clients and their kept counts."""
        kept = rng.binomial(self.sizes, self.rate)
        clients = np.flatnonzero(kept > 0).astype(np.int64)
        return clients, kept[clients].astype(np.int64)

    def weights_of(self, kept: IntArray) -> FloatArray:
        if self.aggregation == "weighted":
            return kept / max(int(kept.sum()), 1)
        if self.aggregation == "average":
            return np.full(kept.size, 1.0 / max(kept.size, 1))
        return kept / self.divisor

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients, kept = self.draw_counts(rng)
        return clients, self.weights_of(kept)


@plain_data
@dataclass(frozen=True, eq=False)
class NormalizedDesign:
    """A design whose drawn weights are rescaled to sum to one (McMahan et al.'s FedAvg in practice).

    The ratio of random sums has no closed-form moments: use the Monte-Carlo estimator.
    """

    base: Any

    def check_invariants(self) -> None:
        if not isinstance(self.base, (FullDesign, RowDesign, FixedSizeDesign, BernoulliDesign, SuccessiveDesign)):
            raise FieldError("NormalizedDesign", "base", "a design", f"a {type(self.base).__name__}")

    @property
    def num_clients(self) -> int:
        return int(self.base.num_clients)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients, weights = self.base.draw(rng)
        total = float(weights.sum())
        return clients, weights / total if total > 0 else weights
