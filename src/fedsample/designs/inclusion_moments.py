"""Exact moments of fixed-size designs with prescribed inclusion probabilities (systematic sampling).

For :class:`~fedsample.designs.SystematicDesign`, client ``i`` is selected when the round's
uniform ``u`` lies in its segment taken modulo 1, ``A_i`` (an interval of length ``pi_i``, split in
two where it wraps past 1). With weights ``c_i``:

* ``P(i in S) = pi_i``, ``E[w_i] = c_i pi_i``, ``Var[w_i] = c_i^2 pi_i (1 - pi_i)``;
* ``pi_ij = |A_i intersect A_j|`` and ``Cov[w_i, w_j] = c_i c_j (pi_ij - pi_i pi_j)``
  (:func:`pair_inclusion_probabilities`, an ``n x n`` matrix for small populations);
* ``sum_i w_i = W(u)`` is a step function of ``u`` with at most ``2n`` steps, so
  ``Var[sum_i w_i] = int_0^1 (W(u) - E W)^2 du`` exactly in ``O(n log n)`` for any ``n``, and the
  sum of the off-diagonal covariances is that minus ``sum_i Var[w_i]``;
* exactly ``m`` distinct clients every round: ``Var[N] = 0``, no repeat.
"""

from __future__ import annotations

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.designs import SystematicDesign
from fedsample.designs.moments import Moments, design_moments

__all__ = ["pair_inclusion_probabilities", "segment_pieces"]


def segment_pieces(design: SystematicDesign) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Each client's set ``A_i`` modulo 1 as two intervals ``[lo1, hi1)`` and ``[lo2, hi2)`` (the second
    empty, ``lo2 = hi2 = 0``, unless the segment wraps past 1)."""
    start = design.starts()
    lo1 = start - np.floor(start)
    end = lo1 + design.inclusion
    hi1 = np.minimum(end, 1.0)
    hi2 = np.maximum(end - 1.0, 0.0)
    return lo1, hi1, np.zeros_like(hi2), hi2


def pair_inclusion_probabilities(design: SystematicDesign) -> FloatArray:
    """The ``n x n`` matrix of ``P(i, j in S)`` (``pi_i`` on the diagonal)."""
    lo1, hi1, lo2, hi2 = segment_pieces(design)
    n = design.num_clients
    out = np.zeros((n, n))
    pieces = ((lo1, hi1), (lo2, hi2))
    for start in range(0, n, 1024):
        rows = slice(start, start + 1024)
        block = np.zeros((min(1024, n - start), n))
        for a_lo, a_hi in pieces:
            for b_lo, b_hi in pieces:
                overlap = np.minimum(a_hi[rows, None], b_hi[None, :]) - np.maximum(a_lo[rows, None], b_lo[None, :])
                block += np.maximum(overlap, 0.0)
        out[rows] = block
    np.fill_diagonal(out, design.inclusion)
    return out


def _variance_of_sum(design: SystematicDesign) -> float:
    """``Var[sum_i w_i]``: the variance over ``u`` of the step function ``W(u)``."""
    lo1, hi1, lo2, hi2 = segment_pieces(design)
    c = design.weights
    wraps = hi2 > 0
    positions = np.concatenate([lo1, hi1, lo2[wraps], hi2[wraps]])
    jumps = np.concatenate([c, -c, c[wraps], -c[wraps]])
    order = np.argsort(positions, kind="stable")
    positions, level = positions[order], np.cumsum(jumps[order])
    lengths = np.diff(np.concatenate([positions, [1.0]]))
    lengths = np.maximum(lengths, 0.0)
    # Before the first event W is 0 (the first event is at 0 when some segment covers it).
    head = float(positions[0]) if positions.size else 1.0
    mean = float(level @ lengths)
    return float(((level - mean) ** 2) @ lengths + head * mean * mean)


@design_moments.register
def _(design: SystematicDesign, importances: FloatArray) -> Moments:
    pi, c = design.inclusion, design.weights
    var = c * c * pi * (1 - pi)
    return Moments(
        mean=c * pi,
        var=var,
        p_included=np.array(pi, dtype=np.float64),
        alpha=None,
        offdiag_cov_sum=_variance_of_sum(design) - float(var.sum()),
        expected_distinct=float(design.num_sampled),
        var_distinct=0.0,
        p_all_distinct=1.0,
    )
