"""The states samplers start from (:class:`SamplerState`, :class:`DesignState`) and the checks of a saved one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray
from fedsample._invariants import FieldError, check_count, check_distribution
from fedsample.designs import MAX_DRAWS, FixedSizeDesign, FullDesign, RowDesign, SystematicDesign
from fedsample.serialization import plain_data

__all__ = ["MAX_NUM_SAMPLED", "DesignState", "SamplerState", "check_sampling_fields"]

# A round never draws more than MAX_NUM_SAMPLED clients (the designs' MAX_DRAWS).
MAX_NUM_SAMPLED = MAX_DRAWS


@dataclass(frozen=True, eq=False)
class SamplerState(ArrayFields):
    """The fields a learning sampler's state starts with: the importances ``p_i`` of the clients and
    ``num_sampled``, the ``m`` (``K``) clients drawn a round. Subclasses add theirs after these."""

    importances: FloatArray
    num_sampled: int

    _array_dtypes: ClassVar[DTypeTable] = {"importances": np.float64}


def check_sampling_fields(
    owner: str, importances: Any, num_sampled: Any, *, at_most_clients: bool = False
) -> tuple[int, int]:
    """Check a saved state's ``importances`` (a distribution) and ``num_sampled`` (``m`` in
    ``[1, MAX_NUM_SAMPLED]``, and at most the ``n`` clients for a sampler that draws distinct ones);
    ``(n, m)``."""
    check_distribution(owner, "importances", importances)
    n = int(np.asarray(importances).size)
    m = check_count(
        owner, "num_sampled", num_sampled, 1, min(n, MAX_NUM_SAMPLED) if at_most_clients else MAX_NUM_SAMPLED
    )
    return n, m


@plain_data
@dataclass(frozen=True, eq=False)
class DesignState(ArrayFields):
    """State of a sampler that does not learn: its federation's importances and a fixed design."""

    num_sampled: int
    importances: FloatArray
    design: Any  # one of the designs of fedsample.designs

    _array_dtypes: ClassVar[DTypeTable] = {"importances": np.float64}

    def check_invariants(self) -> None:
        owner = "DesignState"
        m = check_count(owner, "num_sampled", self.num_sampled, 1, MAX_NUM_SAMPLED)
        check_distribution(owner, "importances", self.importances)
        n = int(self.importances.size)
        if not isinstance(getattr(self.design, "num_clients", None), int) or not hasattr(self.design, "draw"):
            raise FieldError(owner, "design", "a sampling design", f"a {type(self.design).__name__}")
        if self.design.num_clients != n:
            got = f"one over {self.design.num_clients}"
            raise FieldError(owner, "design", f"a design over the {n} clients of 'importances'", got)
        # The draws of a round are the m the state was built for.
        base, path = (self.design.base, "design.base") if hasattr(self.design, "base") else (self.design, "design")
        if isinstance(base, RowDesign) and int(base.row_counts.sum()) != m:
            got = f"counts summing to {int(base.row_counts.sum())}"
            raise FieldError(owner, f"{path}.row_counts", f"draw counts summing to num_sampled ({m})", got)
        if isinstance(base, (FixedSizeDesign, SystematicDesign)) and base.num_sampled != m:
            raise FieldError(owner, f"{path}.num_sampled", f"num_sampled ({m})", str(base.num_sampled))
        if isinstance(base, FullDesign) and m != n:
            raise FieldError(owner, "num_sampled", f"the number of clients ({n}) for full participation", str(m))
