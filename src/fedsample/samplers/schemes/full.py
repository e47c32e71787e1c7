"""Full participation: every client, every round, with ``w_i = p_i`` (paper 003, App. A.2)."""

from __future__ import annotations

from dataclasses import dataclass

from fedsample.designs import FullDesign
from fedsample.federation import Federation
from fedsample.samplers._base import FixedDesignSampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import DesignState

__all__ = ["FullSampler"]


@register_sampler
@dataclass(frozen=True, kw_only=True)
class FullSampler(FixedDesignSampler):
    """Every client participates with its importance as weight: zero variance, ``alpha = 0``.

    ``num_sampled`` is accepted for a uniform interface and checked, but all ``n`` clients are
    selected; the state records ``n``.
    """

    name = "full"

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        self._check_num_sampled(num_sampled, upper=None)
        p = federation.importances
        return DesignState(num_sampled=federation.num_clients, importances=p, design=FullDesign(weights=p))
