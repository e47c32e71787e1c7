"""Designs given by inclusion probabilities: independent Bernoulli inclusions (003, App. A.5-A.8) and
fixed-size systematic sampling with prescribed inclusion probabilities."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsample._arrays import FloatArray, IntArray, frozen, readonly
from fedsample._invariants import check_count, check_values
from fedsample.designs.base import MAX_DRAWS
from fedsample.errors import FedsampleError
from fedsample.serialization import plain_data

__all__ = ["BernoulliDesign", "SystematicDesign"]


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
class SystematicDesign:
    """``num_sampled`` distinct clients with prescribed inclusion probabilities: systematic sampling.

    The clients are laid out on ``[0, m)`` in the fixed ``order``, client ``order[j]`` owning the
    segment ``[C_{j-1}, C_j)`` of length ``pi_i = inclusion[i]`` (``sum pi = m``, each in [0, 1]).
    A round draws one ``u`` uniform on ``[0, 1)`` and selects the owners of ``u, u + 1, ..., u + m - 1``:
    ``m`` distinct clients (no segment is longer than 1), client ``i`` with probability ``pi_i``,
    weight ``weights[i]`` (``p_i / pi_i``: Horvitz-Thompson, unbiased). Clients ``i`` and ``j``
    are selected together exactly when ``u`` lies in both of their segments taken modulo 1, so the
    second-order inclusion probabilities are lengths of interval intersections: exact, in closed
    form (:mod:`fedsample.stats.inclusion_moments`). A draw costs ``O(m log n)`` after the
    ``O(n)`` set-up (the cumulative sums).
    """

    inclusion: FloatArray
    weights: FloatArray
    order: IntArray
    boundaries: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        pi = readonly(np.asarray(self.inclusion, dtype=np.float64))
        object.__setattr__(self, "inclusion", pi)
        object.__setattr__(self, "weights", readonly(np.asarray(self.weights, dtype=np.float64)))
        order = readonly(np.asarray(self.order, dtype=np.int64))
        object.__setattr__(self, "order", order)
        total = float(pi.sum())
        m = round(total)
        if pi.ndim != 1 or m < 1 or abs(total - m) > 1e-9 * max(1.0, total):
            raise FedsampleError(
                "The 'inclusion' parameter of SystematicDesign must be a 1-D array summing to a positive "
                f"integer (the number of clients per round). Got a sum of {total!r} instead.",
                parameter="inclusion",
            )
        if order.shape != pi.shape or not np.array_equal(np.sort(order), np.arange(pi.size)):
            raise FedsampleError(
                f"The 'order' parameter of SystematicDesign must be a permutation of the {pi.size} clients. "
                f"Got {order.tolist()!r:.60} instead.",
                parameter="order",
            )
        laid_out = pi[order]
        cumulative = np.cumsum(laid_out)
        # The line ends exactly at m, so the last point u + m - 1 < m always lands; the rounding
        # error of the sum goes to the last client with pi_i > 0, never to a trailing pi_i = 0.
        cumulative[int(np.flatnonzero(laid_out > 0)[-1]) :] = m
        object.__setattr__(self, "boundaries", frozen(cumulative))

    def check_invariants(self) -> None:
        owner = "SystematicDesign"
        check_values(owner, "inclusion", self.inclusion, shape=(None,), low=0.0, high=1.0)
        check_values(owner, "weights", self.weights, shape=self.inclusion.shape, low=0.0)
        check_count(owner, "num_sampled", self.num_sampled, 1, min(self.num_clients, MAX_DRAWS))

    @property
    def num_clients(self) -> int:
        return int(self.inclusion.size)

    @property
    def num_sampled(self) -> int:
        return int(self.boundaries[-1])

    def starts(self) -> FloatArray:
        """Where each client's segment starts on ``[0, m)`` (client order, not layout order)."""
        start = np.empty(self.num_clients)
        start[self.order] = self.boundaries - self.inclusion[self.order]
        return start

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        points = rng.random() + np.arange(self.num_sampled, dtype=np.float64)
        # side="right": a point on a boundary belongs to the segment that starts there, and empty
        # segments (pi_i = 0) are skipped.
        position = np.minimum(np.searchsorted(self.boundaries, points, side="right"), self.num_clients - 1)
        clients: IntArray = self.order[position]
        return clients, self.weights[clients]
