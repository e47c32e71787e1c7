"""Independent-inclusion samplers: Poisson-binomial (003, App. A.5), binomial (A.6) and Bernoulli with any
inclusion probabilities (A.8), and the water-filling that every inclusion-probability design shares."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Boolean, Constraint, Options
from fedsample.designs import BernoulliDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import FixedDesignSampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import DesignState

__all__ = ["BernoulliSampler", "BinomialSampler", "InclusionVector", "PoissonSampler", "capped_inclusion"]


_FLOAT_MAX = float(np.finfo(np.float64).max)


def capped_inclusion(scores: FloatArray, num_sampled: int) -> FloatArray:
    """Water-filling: inclusion probabilities ``q_i = min(1, c s_i)`` with ``c`` chosen so that ``sum_i q_i = m``.

    ``scores`` are any nonnegative numbers (importances, ``p_i ||U_i||`` for optimal sampling, ...).
    The clients whose ``c s_i`` would exceed one are included every round; the others share the
    remaining expected ``m - k`` slots in proportion to their scores. Equal scores get equal
    probabilities (a tie is never split between capped and uncapped). When fewer than ``m`` scores
    are positive, those clients get 1 and the zero-score clients share the ``m - k`` remaining
    slots equally, so ``sum q = m`` always holds; ``m = n`` gives every client 1. Requires
    ``1 <= m <= n``. One sort of the scores, then ``O(n)``.

    >>> capped_inclusion(np.array([6.0, 1.0, 1.0, 1.0, 1.0]), 2).tolist()
    [1.0, 0.25, 0.25, 0.25, 0.25]
    """
    s = np.asarray(scores, dtype=np.float64)
    n = s.size
    if s.ndim != 1 or not (1 <= num_sampled <= n):
        raise FedsampleError(
            f"The 'num_sampled' parameter of capped_inclusion must be an int in the range [1, {n}] "
            f"(the number of scores). Got {num_sampled} instead.",
            parameter="num_sampled",
        )
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise FedsampleError(
            "The 'scores' parameter of capped_inclusion must be finite nonnegative floats. "
            f"Got {s[~(np.isfinite(s) & (s >= 0))][:1].tolist()} among them instead.",
            parameter="scores",
        )
    if n * float(s.max()) > _FLOAT_MAX / 2:
        # q is invariant to scaling the scores: scores near float's largest (a reported norm of 1e308)
        # are scaled down, where the sums and products below would overflow to inf.
        s = s / s.max()
    positive = int(np.count_nonzero(s))
    if positive <= num_sampled:
        # Every client with a positive score is always in; the zero-score ones share what remains.
        rest = n - positive
        filled: FloatArray = np.where(s > 0, 1.0, (num_sampled - positive) / rest if rest else 0.0)
        return filled
    sorted_s = np.sort(s)[::-1]
    tail = np.cumsum(sorted_s[::-1])[::-1]  # tail[k] = sum of the n - k smallest
    k = np.arange(num_sampled)
    # With the k largest capped, the rest get c = (m - k) / tail[k]; it works when c s_(k) <= 1.
    # More than m scores are positive, so tail[k] > 0 for k < m, and k = m - 1 is always feasible.
    feasible = (num_sampled - k) * sorted_s[:num_sampled] <= tail[:num_sampled] * (1 + 1e-12)
    first = int(np.flatnonzero(feasible)[0])
    scale = (num_sampled - first) / tail[first]
    q: FloatArray = np.minimum(1.0, scale * s)
    if first:
        q[s >= sorted_s[first - 1]] = 1.0  # the capped clients (ties are never split, see above)
    return q


@register_sampler
@dataclass(frozen=True, kw_only=True)
class PoissonSampler(FixedDesignSampler):
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


@register_sampler
@dataclass(frozen=True, kw_only=True)
class BinomialSampler(FixedDesignSampler):
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


@dataclass(frozen=True)
class InclusionVector:
    """``None``, or a sequence of inclusion probabilities, each in (0, 1]."""

    def is_satisfied_by(self, value: object) -> bool:
        if value is None:
            return True
        if not isinstance(value, (list, tuple)) or not value:
            return False
        # Compared as given: float(10**400) would raise OverflowError instead of refusing the value.
        return all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 < x <= 1.0 for x in value)

    def __str__(self) -> str:
        return "None or a non-empty sequence of floats in (0, 1]"


@register_sampler
@dataclass(frozen=True, kw_only=True)
class BernoulliSampler(FixedDesignSampler):
    """Independent inclusion with any probabilities ``q_i`` in (0, 1] (003, App. A.8, eqs. 65-69).

    ``w_i = (p_i / q_i) 1{i in S}``: unbiased, ``Var[w_i] = (1 - q_i) p_i^2 / q_i``, no covariance,
    ``Var[sum_i w_i] = sum_i (1 - q_i) p_i^2 / q_i``, ``E[N] = sum_i q_i``, ``Var[N] = sum_i q_i (1 - q_i)``.

    The ``q`` come from ``inclusion`` when it is given (one per client; the expected number of
    clients is then ``sum q_i`` whatever ``m``), else from ``rule``:

    * ``"proportional"`` (default): ``q_i = min(1, c p_i)`` water-filled to ``sum q_i = m``
      (:func:`capped_inclusion`; the same design as ``poisson`` with ``capped=True``);
    * ``"uniform"``: ``q_i = m / n`` (the same design as ``binomial``).
    """

    name = "bernoulli"
    rule: Literal["proportional", "uniform"] = "proportional"
    inclusion: tuple[float, ...] | None = None
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "rule": Options(("proportional", "uniform")),
        "inclusion": InclusionVector(),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inclusion is not None:  # a list (TOML, JSON) is kept as a tuple: the sampler stays hashable
            object.__setattr__(self, "inclusion", tuple(float(x) for x in self.inclusion))

    def init(self, federation: Federation, num_sampled: int) -> DesignState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        p = federation.importances
        q: Any
        if self.inclusion is not None:
            if len(self.inclusion) != n:
                raise FedsampleError(
                    f"The 'inclusion' parameter of BernoulliSampler must hold one probability per client "
                    f"({n} clients). Got {len(self.inclusion)} probabilities instead.",
                    parameter="inclusion",
                )
            q = np.asarray(self.inclusion, dtype=np.float64)
        elif self.rule == "uniform":
            q = np.full(n, m / n)
        else:
            q = capped_inclusion(p, m)
        # A client with p_i = 0 and q_i = 0 (proportional rule) is never drawn: its weight is 0.
        weights = np.divide(p, q, out=np.zeros(n), where=q > 0)
        return DesignState(num_sampled=m, importances=p, design=BernoulliDesign(inclusion=q, weights=weights))
