"""MD sampling: ``m`` i.i.d. draws with probabilities ``p``, ``w_i = count_i / m`` (000, eq. 4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsample._arrays import frozen
from fedsample.designs import RowDesign
from fedsample.federation import Federation
from fedsample.samplers._base import FixedDesignSampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import DesignState

__all__ = ["MDSampler", "multinomial_design"]


def multinomial_design(federation: Federation, num_sampled: int) -> RowDesign:
    """One row ``p`` drawn ``m`` times with weight ``1/m`` per draw.

    When the importances are ratios of integers (sizes or uniform) draws use exact integer units.
    """
    n = federation.num_clients
    indptr = np.array([0, n], dtype=np.int64)
    # Built here and held by nobody else: frozen in place rather than copied by the design.
    indices = frozen(np.arange(n, dtype=np.int64))
    row_counts = np.array([num_sampled], dtype=np.int64)
    draw_weights = frozen(np.full(n, 1.0 / num_sampled))
    masses = federation.importance_masses
    if masses is not None:
        return RowDesign.from_units(
            num_clients=n,
            indptr=indptr,
            indices=indices,
            units=masses,
            unit_total=int(masses.sum()),
            row_counts=row_counts,
            draw_weights=draw_weights,
        )
    return RowDesign.from_probabilities(
        num_clients=n,
        indptr=indptr,
        indices=indices,
        probabilities=federation.importances,
        row_counts=row_counts,
        draw_weights=draw_weights,
    )


@register_sampler
@dataclass(frozen=True, kw_only=True)
class MDSampler(FixedDesignSampler):
    """Multinomial (MD) sampling of Li et al. as used in paper 000 (eq. 4) and 003 (eq. 5).

    Unbiased; ``Var[w_i] = p_i (1 - p_i) / m``, ``alpha = 1/m``, ``Var[sum_i w_i] = 0``. A draw
    costs ``O(m log n)``: the cumulative distribution is built once by :meth:`init`.
    """

    name = "md"

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        m = self._check_num_sampled(num_sampled, upper=None)
        return DesignState(num_sampled=m, importances=federation.importances, design=multinomial_design(federation, m))
