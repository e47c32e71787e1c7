"""Data-level sampling (paper 004): each client keeps each of its samples independently."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray
from fedsample._invariants import FieldError, check_real, check_values
from fedsample.rng import check_generator
from fedsample.serialization import plain_data

__all__ = ["DataLevelDesign"]


@plain_data
@dataclass(frozen=True, eq=False)
class DataLevelDesign(ArrayFields):
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

    _array_dtypes: ClassVar[DTypeTable] = {"sizes": np.int64}

    def __post_init__(self) -> None:
        super().__post_init__()
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
        check_generator(rng, "DataLevelDesign.draw_counts")
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
        check_generator(rng, "DataLevelDesign.draw")
        clients, kept = self.draw_counts(rng)
        return clients, self.weights_of(kept)
