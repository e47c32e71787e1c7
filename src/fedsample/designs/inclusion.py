"""Designs given by inclusion probabilities: independent Bernoulli inclusions (003, App. A.5-A.8)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsample._arrays import FloatArray, IntArray, frozen, readonly
from fedsample._invariants import (
    check_values,
)
from fedsample.serialization import plain_data

__all__ = ["BernoulliDesign"]


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
