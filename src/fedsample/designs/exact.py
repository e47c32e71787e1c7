"""Exact moments of the aggregation weights, computed from a sampling design.

For a design and the importances ``p`` it targets, :func:`exact_statistics` returns the per-client
mean and variance of ``w_i(S)``, the inclusion probabilities ``P(i in S)``, the covariance
structure (paper 003's ``alpha`` when ``Cov[w_i, w_j] = -alpha p_i p_j``, always the sum of the
off-diagonal covariances), ``Var[sum_i w_i]``, the mean and variance of the number of distinct
clients, the probability that no client is drawn twice, and the ``Sigma`` and ``gamma`` of
003's eq. 11. :func:`weight_covariance` gives the full matrix for small populations.

The per-design formulas (003, App. A, and 000, Section 3.2) live with their design family:
:mod:`fedsample.designs.moments` (full, uniform fixed size, independent inclusions, data level),
:mod:`fedsample.designs.row_moments` (row designs) and :mod:`fedsample.designs.inclusion_moments`
(fixed-size designs with prescribed inclusion probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import invalid
from fedsample.designs import (
    BernoulliDesign,
    DataLevelDesign,
    FixedSizeDesign,
    FullDesign,
    RowDesign,
    SystematicDesign,
)
from fedsample.designs.inclusion_moments import pair_inclusion_probabilities
from fedsample.designs.moments import check_importances, design_moments, no_closed_form
from fedsample.designs.row_moments import MAX_COVARIANCE_CLIENTS

__all__ = ["ExactStatistics", "design_moments", "exact_statistics", "weight_covariance"]


@dataclass(frozen=True, eq=False)
class ExactStatistics:
    """Exact statistics of a design's aggregation weights against importances ``p``.

    ``alpha`` is ``None`` when the covariance is not of the form ``-alpha p_i p_j`` (clustered
    sampling); ``alpha_effective`` is always eq. 24 of 003,
    ``(sum_i Var[w_i] - Var[sum_i w_i]) / (1 - sum_i p_i^2)``, and equals ``alpha`` when that exists.
    ``gamma = sum_i Var[w_i] + alpha_effective * sum_i p_i^2`` (003, eq. 11) and ``sigma`` is
    ``sum_i Var[w_i]``. ``var_distinct`` and ``p_all_distinct`` are ``None`` when their exact
    computation would be too large.
    """

    importances: FloatArray
    mean_weights: FloatArray
    var_weights: FloatArray
    p_included: FloatArray
    alpha: float | None
    alpha_effective: float
    offdiag_cov_sum: float
    var_sum_weights: float
    expected_distinct: float
    var_distinct: float | None
    p_all_distinct: float | None

    @property
    def sigma(self) -> float:
        """``Sigma = sum_i Var[w_i]`` (003, eq. 11)."""
        return float(self.var_weights.sum())

    @property
    def gamma(self) -> float:
        """``gamma = Sigma + alpha sum_i p_i^2`` (003, eq. 11), with ``alpha_effective``."""
        return self.sigma + self.alpha_effective * float(np.sum(self.importances**2))

    @property
    def max_bias(self) -> float:
        """``max_i |E[w_i] - p_i|``."""
        return float(np.max(np.abs(self.mean_weights - self.importances)))

    @property
    def biased(self) -> bool:
        """Whether some ``E[w_i]`` differs from ``p_i`` beyond floating-point error."""
        return bool(self.max_bias > 1e-9 * max(1.0, float(self.importances.max())))


def _design_and_importances(design: object, importances: object, owner: str) -> FloatArray:
    """``importances`` checked against ``design`` (a sampling design: its ``num_clients`` and ``draw``)."""
    n = getattr(design, "num_clients", None)
    if not isinstance(n, int) or isinstance(n, bool) or not callable(getattr(design, "draw", None)):
        raise no_closed_form(design, owner)
    return check_importances(importances, n, owner)


def exact_statistics(design: object, importances: FloatArray) -> ExactStatistics:
    """Exact statistics of ``design``'s weights against importances ``p`` (a sampler state's ``importances``).

    ``importances`` must hold one finite non-negative value per client of the design; a design
    without closed-form statistics raises :class:`~fedsample.designs.moments.NoClosedForm` (use
    :func:`~fedsample.stats.monte_carlo_statistics` for it).
    """
    p = _design_and_importances(design, importances, "exact_statistics")
    mo = design_moments(design, p)
    sigma = float(mo.var.sum())
    var_sum = max(sigma + mo.offdiag_cov_sum, 0.0)
    one_minus = 1.0 - float(np.sum(p**2))
    alpha_eff = -mo.offdiag_cov_sum / one_minus if one_minus > 1e-15 else (mo.alpha or 0.0)
    if mo.alpha is not None:
        alpha_eff = mo.alpha
    return ExactStatistics(
        importances=p,
        mean_weights=mo.mean,
        var_weights=mo.var,
        p_included=mo.p_included,
        alpha=mo.alpha,
        alpha_effective=float(alpha_eff),
        offdiag_cov_sum=float(mo.offdiag_cov_sum),
        var_sum_weights=var_sum if var_sum > 1e-14 * max(1.0, sigma) else 0.0,
        expected_distinct=mo.expected_distinct,
        var_distinct=mo.var_distinct,
        p_all_distinct=mo.p_all_distinct,
    )


def weight_covariance(design: object, importances: FloatArray) -> FloatArray:
    """The full ``n x n`` covariance matrix of the weights (for ``n`` up to 5000)."""
    owner = "weight_covariance"
    mo = design_moments(design, _design_and_importances(design, importances, owner))
    n = mo.mean.size
    if n > MAX_COVARIANCE_CLIENTS:
        rule = f"a design over at most {MAX_COVARIANCE_CLIENTS} clients (else use offdiag_cov_sum)"
        raise invalid("design", owner, rule, f"one over {n} clients")
    if isinstance(design, RowDesign):
        dense = design.dense_rows() * design.draw_weights[None, :]
        cov = -(dense.T * design.row_counts.astype(np.float64)) @ dense
    elif isinstance(design, FixedSizeDesign):
        m = design.num_sampled
        pi1 = m / n
        pi2 = m * (m - 1) / (n * (n - 1)) if n > 1 else 0.0
        cov = (pi2 - pi1 * pi1) * np.outer(design.weights, design.weights)
    elif isinstance(design, SystematicDesign):
        mean = design.weights * design.inclusion
        cov = pair_inclusion_probabilities(design) * np.outer(design.weights, design.weights) - np.outer(mean, mean)
    elif isinstance(design, (FullDesign, BernoulliDesign, DataLevelDesign)):
        cov = np.zeros((n, n))  # independent (or deterministic) weights
    else:
        raise no_closed_form(design, owner, "a covariance matrix")
    np.fill_diagonal(cov, mo.var)
    return cov
