"""Per-design moments of the aggregation weights: the dispatcher every design family registers with.

:func:`design_moments` returns a :class:`Moments` for one design; the formulas of the simple
designs live here, those of the row designs in :mod:`fedsample.designs.row_moments` and those of
the fixed-size inclusion-probability designs in :mod:`fedsample.designs.inclusion_moments`.

* fixed size ``m`` of ``n``, weight ``c_i``: ``P(i in S) = m/n``, ``P(i, j in S) = m(m-1)/(n(n-1))``;
* independent inclusions ``q_i``, weight ``c_i`` (003, eqs. 65-69 with ``c_i = p_i / q_i``):
  ``Var[w_i] = c_i^2 q_i (1 - q_i)``, no covariance, ``E[N] = sum q_i``, ``Var[N] = sum q_i (1 - q_i)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch

import numpy as np

from fedsample._arrays import FloatArray, as_field_array
from fedsample._validation import invalid
from fedsample.designs import BernoulliDesign, DataLevelDesign, FixedSizeDesign, FullDesign
from fedsample.errors import FedsampleError

__all__ = [
    "Moments",
    "NoClosedForm",
    "alpha_if_proportional",
    "check_importances",
    "design_moments",
    "independent_moments",
]


class NoClosedForm(FedsampleError, TypeError):
    """A design without closed-form statistics (successive sampling, a selection rule), or no design
    at all: the library's error, and a ``TypeError`` for the callers that fall back to Monte Carlo."""


def no_closed_form(design: object, owner: str, what: str = "exact statistics", got: str = "") -> NoClosedForm:
    """The error of ``owner`` for a ``design`` without ``what`` in closed form (``got`` describes it)."""
    error = invalid("design", owner, f"a sampling design with {what} in closed form", got or type(design).__name__)
    return NoClosedForm(str(error), parameter="design", owner=owner, constraint=error.constraint, value=error.value)


def check_importances(importances: object, num_clients: int, owner: str) -> FloatArray:
    """``importances`` as ``p``: a 1-D float array of ``num_clients`` finite, non-negative values
    (NaN or a negative value would give NaN or negative statistics)."""
    rule = f"a 1-D array of {num_clients} finite non-negative floats (one per client of the design)"
    p = as_field_array(importances, np.float64, "importances", owner)
    if p.shape != (num_clients,):
        raise invalid("importances", owner, rule, f"an array of shape {p.shape}")
    bad = ~np.isfinite(p) | (p < 0)
    if bad.any():
        raise invalid("importances", owner, rule, p)
    out: FloatArray = p
    return out


@dataclass(frozen=True)
class Moments:
    """One design's moments: per-client mean, variance and inclusion probability, and the pair terms."""

    mean: FloatArray
    var: FloatArray
    p_included: FloatArray
    alpha: float | None
    offdiag_cov_sum: float
    expected_distinct: float
    var_distinct: float | None
    p_all_distinct: float | None


@singledispatch
def design_moments(design: object, importances: FloatArray) -> Moments:
    """Per-design moments; register an implementation for each new design type."""
    raise no_closed_form(design, "design_moments")


def alpha_if_proportional(mean: FloatArray, p: FloatArray, factor: float) -> float | None:
    """``factor * s^2`` when ``mean = s p`` for one scalar ``s`` (then ``Cov = -alpha p_i p_j``)."""
    s = float(mean.sum() / p.sum())
    if np.allclose(mean, s * p, rtol=1e-9, atol=1e-15):
        return max(factor * s * s, 0.0)
    return None


def independent_moments(mean: FloatArray, var: FloatArray, p_included: FloatArray) -> Moments:
    """Moments of a design whose clients are included independently, each at most once: no
    covariance, ``E[N] = sum_i P(i in S)`` and ``Var[N] = sum_i P(i in S) (1 - P(i in S))``."""
    return Moments(
        mean=mean,
        var=var,
        p_included=p_included,
        alpha=0.0,
        offdiag_cov_sum=0.0,
        expected_distinct=float(p_included.sum()),
        var_distinct=float(np.sum(p_included * (1 - p_included))),
        p_all_distinct=1.0,
    )


@design_moments.register
def _(design: FullDesign, importances: FloatArray) -> Moments:
    n = design.num_clients
    return independent_moments(np.array(design.weights, dtype=np.float64), np.zeros(n), np.ones(n))


@design_moments.register
def _(design: FixedSizeDesign, importances: FloatArray) -> Moments:
    n, m = design.num_clients, design.num_sampled
    c = design.weights
    pi1 = m / n
    pi2 = m * (m - 1) / (n * (n - 1)) if n > 1 else 0.0
    kappa = pi2 - pi1 * pi1  # Cov[1{i in S}, 1{j in S}] for i != j
    mean = c * pi1
    alpha = alpha_if_proportional(mean, importances, -kappa / (pi1 * pi1)) if n > 1 else 0.0
    return Moments(
        mean=mean,
        var=c * c * pi1 * (1 - pi1),
        p_included=np.full(n, pi1),
        alpha=alpha,
        offdiag_cov_sum=float(kappa * (c.sum() ** 2 - np.sum(c * c))),
        expected_distinct=float(m),
        var_distinct=0.0,
        p_all_distinct=1.0,
    )


@design_moments.register
def _(design: BernoulliDesign, importances: FloatArray) -> Moments:
    q, c = design.inclusion, design.weights
    return independent_moments(c * q, c * c * q * (1 - q), np.array(q, dtype=np.float64))


@design_moments.register
def _(design: DataLevelDesign, importances: FloatArray) -> Moments:
    # Only FedSampling's fixed divisor has a closed form: w_i = k_i / K with independent
    # k_i ~ Binomial(n_i, r). The naive variants divide by random totals (Monte Carlo covers them).
    if design.aggregation != "fixed":
        got = f"a DataLevelDesign with {design.aggregation!r} aggregation"
        raise no_closed_form(design, "design_moments", got=got)
    n, r, k = design.sizes.astype(np.float64), design.rate, design.divisor
    p_in = -np.expm1(n * np.log1p(-r)) if r < 1 else np.ones_like(n)
    return independent_moments(n * r / k, n * r * (1 - r) / (k * k), p_in)
