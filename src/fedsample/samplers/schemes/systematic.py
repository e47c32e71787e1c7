"""Fixed-size sampling without replacement with inclusion probabilities ``pi_i = min(1, c p_i)``.

``m`` distinct clients every round, client ``i`` with probability ``pi_i`` (water-filled to
``sum pi_i = m`` by :func:`~fedsample.samplers.capped_inclusion`), Horvitz-Thompson weights
``p_i / pi_i``. The draw is systematic sampling over a layout order fixed at :meth:`init`
(:class:`~fedsample.designs.SystematicDesign`), whose second-order inclusion probabilities are
exact in closed form. Clustered sampling is its natural competitor: both draw ``m`` distinct
clients (clustered sampling: at most ``m``) with unbiased weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from fedsample._validation import Constraint, Interval, Options
from fedsample.designs import SystematicDesign
from fedsample.federation import Federation
from fedsample.samplers._base import FixedDesignSampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import DesignState
from fedsample.samplers.schemes.bernoulli import capped_inclusion

__all__ = ["SystematicSampler"]


@register_sampler
@dataclass(frozen=True, kw_only=True)
class SystematicSampler(FixedDesignSampler):
    """``m`` distinct clients with ``P(i in S) = min(1, c p_i)``, weights ``p_i / pi_i`` (systematic sampling).

    Unbiased, exactly ``m`` distinct clients, and ``sum_i w_i = 1`` every round (each uncapped
    client drawn weighs ``1/c``, and ``m - k`` of them are drawn beside the ``k`` capped ones), so
    ``Var[sum_i w_i] = 0`` like MD. The pairs depend on the layout ``order``: ``"random"`` (default)
    lays the clients out in a random permutation drawn from ``order_seed`` at :meth:`init`;
    ``"given"`` keeps the client ids' order (neighbours in it are never drawn together when their
    probabilities sum to at most 1). Draws cost ``O(m log n)``.
    """

    name = "systematic"
    order: Literal["random", "given"] = "random"
    order_seed: int = 0
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "order": Options(("random", "given")),
        "order_seed": Interval(int, 0, 2**63 - 1, closed="both"),
    }

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        p = federation.importances
        pi = capped_inclusion(p, m)
        if self.order == "random":
            layout = np.random.default_rng(self.order_seed).permutation(n).astype(np.int64)
        else:
            layout = np.arange(n, dtype=np.int64)
        weights = np.divide(p, pi, out=np.zeros(n), where=pi > 0)
        return DesignState(
            num_sampled=m, importances=p, design=SystematicDesign(inclusion=pi, weights=weights, order=layout)
        )
