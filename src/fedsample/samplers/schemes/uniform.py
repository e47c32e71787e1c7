"""Uniform sampling without replacement, unbiased (003, eq. 6) and FedAvg's biased variant (000, eq. 3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedsample._validation import Boolean, Constraint
from fedsample.designs import FixedSizeDesign, NormalizedDesign
from fedsample.federation import Federation
from fedsample.samplers._base import FixedDesignSampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import DesignState

__all__ = ["FedAvgUniformSampler", "UniformSampler"]


@register_sampler
@dataclass(frozen=True, kw_only=True)
class UniformSampler(FixedDesignSampler):
    """``m`` distinct clients uniformly without replacement, ``w_i = (n/m) p_i`` (003, eq. 6).

    Unbiased. ``Var[w_i] = (n/m - 1) p_i^2``, ``alpha = (n-m)/(m(n-1))``; the weights sum to one
    only when every ``p_i = 1/n``.
    """

    name = "uniform"

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        p = federation.importances
        return DesignState(num_sampled=m, importances=p, design=FixedSizeDesign(num_sampled=m, weights=(n / m) * p))


@register_sampler
@dataclass(frozen=True, kw_only=True)
class FedAvgUniformSampler(FixedDesignSampler):
    """FedAvg's original scheme: ``m`` clients uniformly without replacement, ``w_i = p_i`` (000, eq. 3).

    **Biased**: ``E[w_i] = (m/n) p_i``. The clients not sampled are kept at the global model, which
    in the server update ``theta + eta_g sum_i w_i (theta_i - theta)`` is the same as giving them
    weight zero. Kept for comparison with the literature; prefer ``uniform`` or ``md``.

    ``normalize=True`` gives the variant most FedAvg implementations run (McMahan et al.'s code,
    Flower): the sampled clients' weights ``p_i / sum_{j in S} p_j`` sum to one. Also biased; its
    moments (a ratio of random sums) come from the Monte-Carlo estimator.
    """

    name = "fedavg-uniform"
    biased = True
    normalize: bool = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"normalize": Boolean()}

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        p = federation.importances
        design: FixedSizeDesign | NormalizedDesign = FixedSizeDesign(num_sampled=m, weights=p)
        if self.normalize:
            design = NormalizedDesign(base=design)
        return DesignState(num_sampled=m, importances=p, design=design)
