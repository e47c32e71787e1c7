"""Designs with fixed participation: every client (full), or ``m`` distinct clients uniformly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray
from fedsample._invariants import check_count, check_values
from fedsample.designs.base import MAX_DRAWS
from fedsample.rng import check_generator
from fedsample.serialization import plain_data

__all__ = ["FixedSizeDesign", "FullDesign"]


@plain_data
@dataclass(frozen=True, eq=False)
class FullDesign(ArrayFields):
    """Every client participates with weight ``weights[i]`` (full participation: ``w_i = p_i``)."""

    weights: FloatArray

    _array_dtypes: ClassVar[DTypeTable] = {"weights": np.float64}

    def check_invariants(self) -> None:
        check_values("FullDesign", "weights", self.weights, shape=(None,), low=0.0)

    @property
    def num_clients(self) -> int:
        return int(self.weights.size)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        check_generator(rng, "FullDesign.draw")
        return np.arange(self.num_clients, dtype=np.int64), self.weights.copy()


@plain_data
@dataclass(frozen=True, eq=False)
class FixedSizeDesign(ArrayFields):
    """``num_sampled`` distinct clients, uniformly without replacement; client ``i`` gets ``weights[i]``."""

    num_sampled: int
    weights: FloatArray

    _array_dtypes: ClassVar[DTypeTable] = {"weights": np.float64}

    def __post_init__(self) -> None:
        super().__post_init__()
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
        check_generator(rng, "FixedSizeDesign.draw")
        clients = rng.choice(self.num_clients, size=self.num_sampled, replace=False).astype(np.int64)
        return clients, self.weights[clients]
