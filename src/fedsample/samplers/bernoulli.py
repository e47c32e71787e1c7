"""Independent-inclusion samplers: Poisson-binomial (003, App. A.5) and binomial (003, App. A.6)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Boolean, Constraint
from fedsample.designs import BernoulliDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import DesignState, Sampler
from fedsample.samplers._registry import register_sampler

__all__ = ["BinomialSampler", "PoissonSampler", "capped_inclusion"]


def capped_inclusion(importances: FloatArray, num_sampled: int) -> FloatArray:
    """Inclusion probabilities ``q_i = min(1, c p_i)`` with ``c`` chosen so that ``sum_i q_i = m``.

    The clients whose ``c p_i`` would exceed one are included every round; the others share the
    remaining expected ``m - k`` slots in proportion to ``p_i``. Requires ``m <= n``.
    """
    p = np.asarray(importances, dtype=np.float64)
    n = p.size
    if num_sampled >= n:
        return np.ones(n)
    order = np.argsort(-p, kind="stable")
    sorted_p = p[order]
    tail = np.cumsum(sorted_p[::-1])[::-1]  # tail[k] = sum of the n - k smallest
    k = np.arange(n)
    # With the k largest capped, the rest get c = (m - k) / tail[k]; it works when c p_(k) <= 1.
    feasible = (num_sampled - k) * sorted_p <= tail * (1 + 1e-12)
    feasible &= k < num_sampled
    first = int(np.flatnonzero(feasible)[0])
    scale = (num_sampled - first) / tail[first]
    q_sorted = np.minimum(1.0, scale * sorted_p)
    q_sorted[:first] = 1.0
    q = np.empty(n)
    q[order] = q_sorted
    return q


@register_sampler
@dataclass(frozen=True, kw_only=True)
class PoissonSampler(Sampler[DesignState]):
    """Poisson-binomial sampling: client ``i`` joins independently with probability ``q_i = m p_i``.

    ``w_i = 1{i in S} / m`` (003, App. A.5): unbiased, no covariance (``alpha = 0``),
    ``Var[w_i] = p_i (1 - m p_i) / m``, and the number of clients is random with mean ``m``.

    It needs ``m p_i <= 1`` for every client. With ``capped=True`` a client with ``m p_i > 1`` is
    instead included every round, the others share the remaining slots (:func:`capped_inclusion`)
    and every weight is ``p_i / q_i``: still unbiased, still ``m`` clients in expectation.
    """

    name = "poisson"
    capped: bool = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {"capped": Boolean()}

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        p = federation.importances
        if self.capped:
            m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
            q = capped_inclusion(p, m)
        else:
            m = self._check_num_sampled(num_sampled, upper=None)
            masses = federation.importance_masses
            if masses is not None:  # exact: m q_i <= Q  <=>  m <= Q // max q
                limit = int(masses.sum()) // int(masses.max())
            else:
                limit = math.floor(1.0 / float(p.max()) * (1 + 1e-12))
            if m > limit:
                worst = int(np.argmax(p))
                raise FedsampleError(
                    f"The 'num_sampled' parameter of PoissonSampler.init must be an int in the range "
                    f"[1, {limit}] so that every inclusion probability m * p_i is at most 1 "
                    f"(client {worst} would get {m * float(p[worst]):.4g}; PoissonSampler(capped=True) "
                    f"accepts it). Got {m} instead.",
                    parameter="num_sampled",
                )
            q = np.minimum(m * p, 1.0)
        return DesignState(num_sampled=m, importances=p, design=BernoulliDesign(inclusion=q, weights=p / q))

    def design(self, state: DesignState) -> BernoulliDesign:
        return state.design  # type: ignore[no-any-return]


@register_sampler
@dataclass(frozen=True, kw_only=True)
class BinomialSampler(Sampler[DesignState]):
    """Binomial sampling: every client joins independently with probability ``m/n``.

    ``w_i = (n/m) p_i 1{i in S}`` (003, App. A.6): unbiased, ``alpha = 0``,
    ``Var[w_i] = (n-m)/m p_i^2``, number of clients Binomial(n, m/n).
    """

    name = "binomial"

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        p = federation.importances
        q = np.full(n, m / n)
        return DesignState(num_sampled=m, importances=p, design=BernoulliDesign(inclusion=q, weights=p / q))

    def design(self, state: DesignState) -> BernoulliDesign:
        return state.design  # type: ignore[no-any-return]
