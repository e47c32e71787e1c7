"""What every design offers (the :class:`Design` protocol) and the per-round draw limit."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedsample._arrays import FloatArray, IntArray

__all__ = ["INT64_LIMIT", "MAX_DRAWS", "Design"]

# Exact integer draws keep their ranges below this bound (no int64 overflow in sums of two).
INT64_LIMIT = 2**62
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
