"""Agreement between two clusterings: the adjusted Rand index (Hubert and Arabie, 1985)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._validation import invalid

__all__ = ["adjusted_rand_index"]


def adjusted_rand_index(labels_a: npt.ArrayLike, labels_b: npt.ArrayLike) -> float:
    """Hubert and Arabie's adjusted Rand index of two labelings of the same items.

    With ``n_uv`` the number of items labelled ``u`` in ``a`` and ``v`` in ``b``, ``a_u`` and
    ``b_v`` the label counts and ``C(x) = x (x - 1) / 2``:
    ``ARI = (sum C(n_uv) - E) / ((sum C(a_u) + sum C(b_v)) / 2 - E)`` with
    ``E = sum C(a_u) sum C(b_v) / C(n)``. 1 for identical partitions (up to renaming), about 0
    for independent ones. Two labelings that both put everything together, or everything
    apart, give 1.
    """
    owner = "adjusted_rand_index"
    arrays = []
    for name, labels in (("labels_a", labels_a), ("labels_b", labels_b)):
        try:
            arrays.append(np.asarray(labels))
        except (TypeError, ValueError):  # a ragged list
            raise invalid(name, owner, "a 1-D array of labels", labels) from None
    a, b = arrays
    if a.ndim != 1:
        raise invalid("labels_a", owner, "a 1-D array of labels", a.shape)
    if b.shape != a.shape:
        raise invalid("labels_b", owner, f"a 1-D array of the shape of 'labels_a' {a.shape}", b.shape)
    n = a.size
    if n <= 1:
        return 1.0
    _, a_ids = np.unique(a, return_inverse=True)
    _, b_ids = np.unique(b, return_inverse=True)
    _, joint = np.unique(a_ids.astype(np.int64) * (int(b_ids.max()) + 1) + b_ids, return_counts=True)

    def pairs(counts: IntArray) -> float:
        c = counts.astype(np.float64)
        return float(np.sum(c * (c - 1.0)) / 2.0)

    index = pairs(joint)
    sum_a = pairs(np.bincount(a_ids))
    sum_b = pairs(np.bincount(b_ids))
    expected = sum_a * sum_b / (n * (n - 1) / 2.0)
    maximum = (sum_a + sum_b) / 2.0
    if maximum == expected:
        return 1.0
    return (index - expected) / (maximum - expected)


# --- the sampler -------------------------------------------------------------------------------
