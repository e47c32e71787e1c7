"""Projection onto the truncated simplex used by OSMD (paper 001).

The feasible set is ``A = {p : sum_m p_m = 1, p_m >= floor}`` with ``floor = alpha / M``. OSMD's
mirror map is the unnormalised negative entropy, so the projection of a positive vector ``q`` is
the minimiser of the generalised KL divergence ``sum_m p_m log(p_m / q_m) - p_m + q_m`` over ``A``.

Its optimality (KKT) conditions give the closed form ``p_m = max(floor, c q_m)`` with the scalar
``c > 0`` set by ``sum_m p_m = 1``. With ``q`` sorted increasingly, the floored entries are a
prefix; for a prefix of length ``k``, ``c_k = (1 - k floor) / sum_{j >= k} q_(j)``, and the answer
is the smallest ``k`` with ``c_k q_(k) >= floor``. Such a ``k`` always exists when
``M floor <= 1`` (at ``k = M - 1`` the condition reads ``1 - (M - 1) floor >= floor``), so there
is no fallback case. One sort and two cumulative sums: ``O(M log M)``, with no Python loop.
"""

from __future__ import annotations

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import invalid

__all__ = ["project_truncated_simplex"]


def project_truncated_simplex(q: FloatArray, floor: float) -> FloatArray:
    """KL projection of a positive vector ``q`` onto ``{p : sum p = 1, p >= floor}``.

    >>> project_truncated_simplex(np.array([1.0, 1.0, 8.0]), 0.2).round(3).tolist()
    [0.2, 0.2, 0.6]
    """
    values = np.asarray(q, dtype=np.float64)
    size = values.size
    if values.ndim != 1 or size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise invalid("q", "project_truncated_simplex", "a non-empty 1-D array of positive finite floats", values)
    if not 0 <= floor * size <= 1 + 1e-12:
        raise invalid("floor", "project_truncated_simplex", f"a float in [0, 1/{size}]", floor)
    if floor * size >= 1 - 1e-15:
        uniform: FloatArray = np.full(size, 1.0 / size)
        return uniform
    # The projection is invariant to scaling q: dividing by the maximum keeps the tail sums below
    # M, so entries near the largest float cannot overflow them.
    values = values / values.max()
    sorted_q = np.sort(values)
    tail = np.cumsum(sorted_q[::-1])[::-1]  # tail[k] = sum of the M - k largest
    k = np.arange(size)
    scale = (1.0 - k * floor) / tail
    # The first k whose own scaled value clears the floor; monotone in k, so argmax finds it.
    first = int(np.argmax(scale * sorted_q >= floor * (1 - 1e-12)))
    # Only the scalar c depends on the order: p = max(floor, c q) needs no permutation.
    out: FloatArray = np.maximum(floor, scale[first] * values)
    # Renormalise the unfloored part against rounding so that the sum is 1 to machine precision.
    free = out > floor
    if free.any():
        out[free] *= (1.0 - floor * (size - int(free.sum()))) / out[free].sum()
    return out
