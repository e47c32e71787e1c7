"""One round's selection: the clients drawn and their aggregation weights (:class:`Selection`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray, readonly
from fedsample.serialization import plain_data

__all__ = ["Selection"]


@plain_data
@dataclass(frozen=True, eq=False)
class Selection(ArrayFields):
    """One round's selection.

    Attributes
    ----------
    clients:
        Client ids, one entry per draw: a client drawn twice appears twice.
    weights:
        Aggregation weight of each entry; a client's weight ``w_i(S_t)`` is the sum over its entries.
    instructions:
        Per-entry client-side instructions, keyed by name (for example ``"data_rate"``, the
        probability with which a client keeps each local sample in data-level sampling). Each
        value is an array aligned with ``clients``.
    """

    clients: IntArray
    weights: FloatArray
    instructions: Mapping[str, FloatArray] = field(default_factory=dict)

    _array_dtypes: ClassVar[DTypeTable] = {"clients": np.int64, "weights": np.float64}

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "instructions",
            {k: readonly(np.asarray(v, dtype=np.float64)) for k, v in self.instructions.items()},
        )
        if self.clients.shape != self.weights.shape or self.clients.ndim != 1:
            raise ValueError("Selection needs 1-D clients and weights of the same length")

    @property
    def num_draws(self) -> int:
        return int(self.clients.size)

    def distinct(self) -> tuple[IntArray, FloatArray]:
        """Distinct client ids in increasing order and their summed weights."""
        ids, inverse = np.unique(self.clients, return_inverse=True)
        summed = np.bincount(inverse, weights=self.weights, minlength=ids.size).astype(np.float64)
        return ids.astype(np.int64), summed

    def dense_weights(self, num_clients: int) -> FloatArray:
        """``w_i(S_t)`` for every client, zero for those not selected."""
        return np.bincount(self.clients, weights=self.weights, minlength=num_clients).astype(np.float64)
