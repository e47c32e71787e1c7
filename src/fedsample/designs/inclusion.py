"""Designs given by inclusion probabilities: independent Bernoulli inclusions (003, App. A.5-A.8) and
fixed-size systematic sampling with prescribed inclusion probabilities."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsample._arrays import FloatArray, IntArray, frozen, readonly
from fedsample._invariants import check_count, check_values
from fedsample.designs.base import MAX_DRAWS
from fedsample.errors import FedsampleError
from fedsample.rng import check_generator
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
        check_generator(rng, "BernoulliDesign.draw")
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

    The clients with ``pi_i = 1`` are in every round. The others are laid out on ``[0, m - k)``
    (``k`` clients always in) in the fixed ``order``, each owning a segment of length
    ``pi_i = inclusion[i]`` (``sum pi = m``, each in [0, 1]). A round draws one ``u`` uniform on
    ``[0, 1)`` and selects the owners of ``u, u + 1, ..., u + m - k - 1``: distinct clients (no
    segment is longer than 1), client ``i`` with probability ``pi_i``, weight ``weights[i]``
    (``p_i / pi_i``: Horvitz-Thompson, unbiased). Clients ``i`` and ``j`` are selected together
    exactly when ``u`` lies in both of their segments taken modulo 1 (``[0, 1)`` for a client
    always in), so the second-order inclusion probabilities are lengths of interval intersections:
    exact, in closed form (:mod:`fedsample.designs.inclusion_moments`). A draw costs ``O(m log n)``
    after the ``O(n)`` set-up (the cumulative sums).
    """

    inclusion: FloatArray
    weights: FloatArray
    order: IntArray
    always: IntArray = field(init=False, repr=False)  # the clients with pi_i = 1
    line: IntArray = field(init=False, repr=False)  # the others, in layout order
    boundaries: FloatArray = field(init=False, repr=False)  # where each of them ends on [0, m - k)

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
        # Clients always in stay off the line: a segment of length 1 could, after rounding, be longer
        # than 1 and hold two points.
        always = np.flatnonzero(pi >= 1.0).astype(np.int64)
        line = order[pi[order] < 1.0]
        laid_out = pi[line]
        cumulative = np.cumsum(laid_out)
        if cumulative.size and m > always.size:
            # The line ends exactly at m - k, so the last point always lands; the rounding error of
            # the sum goes to the last client with pi_i > 0, never to a trailing pi_i = 0.
            cumulative[int(np.flatnonzero(laid_out > 0)[-1]) :] = m - always.size
        object.__setattr__(self, "always", frozen(always))
        object.__setattr__(self, "line", frozen(line.astype(np.int64)))
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
        return int(self.always.size) + self.line_draws

    @property
    def line_draws(self) -> int:
        """``m - k``: the points drawn on the line."""
        return int(self.boundaries[-1]) if self.boundaries.size else 0

    def starts(self) -> FloatArray:
        """Where each client's segment starts on the line (0 for a client always in), by client id."""
        start = np.zeros(self.num_clients)
        start[self.line] = self.boundaries - self.inclusion[self.line]
        return start

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        # u on the grid of 2**(53 - b) points of [0, 1), with m - k - 1 < 2**b: then every u + j is
        # exact (a float u near 1 would round u + j up to j + 1, into the next segment, and could
        # repeat a client). The grid's spacing, at most 2**-29 for m up to MAX_DRAWS, is the only rounding.
        check_generator(rng, "SystematicDesign.draw")
        draws = self.line_draws
        bits = 53 - max(1, (draws - 1).bit_length())
        u = float(rng.integers(0, 2**bits, dtype=np.int64)) / 2.0**bits
        points = u + np.arange(draws, dtype=np.float64)
        # side="right": a point on a boundary belongs to the segment that starts there, and empty
        # segments (pi_i = 0) are skipped.
        position = np.minimum(np.searchsorted(self.boundaries, points, side="right"), max(self.line.size - 1, 0))
        clients: IntArray = np.concatenate([self.always, self.line[position]]) if draws else self.always.copy()
        return clients, self.weights[clients]
