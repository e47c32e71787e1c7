"""A design whose drawn weights are renormalised to sum to one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._invariants import FieldError
from fedsample.designs.inclusion import BernoulliDesign
from fedsample.designs.rows import RowDesign
from fedsample.designs.successive import SuccessiveDesign
from fedsample.designs.uniform import FixedSizeDesign, FullDesign
from fedsample.rng import check_generator
from fedsample.serialization import plain_data

__all__ = ["NormalizedDesign"]


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
        check_generator(rng, "NormalizedDesign.draw")
        clients, weights = self.base.draw(rng)
        total = float(weights.sum())
        return clients, weights / total if total > 0 else weights
