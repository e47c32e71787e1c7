"""Stages 2 to 4 of Algorithm 2 of paper 000: Ward's tree, its cut by mass, and the rows.

From a distance matrix to the ``m`` rows of a clustered sampling design, in exact integer units
so that Proposition 1 holds exactly. Used by the similarity sampler
(:mod:`fedsample.samplers.similarity.sampler`) and by HiCS-FL (:mod:`fedsample.samplers.selectors.hicsfl`), which also
reads a tree of the matrix's rows (:func:`rows_linkage`) and cuts it into a number of clusters
(:func:`cut_into_clusters`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._validation import invalid
from fedsample.designs import RowDesign
from fedsample.errors import FedsampleError

__all__ = [
    "SimilarityRows",
    "allocate_clustered_rows",
    "cut_by_mass",
    "cut_into_clusters",
    "rows_linkage",
    "similarity_clustered_design",
    "ward_linkage",
]

_INT64_LIMIT = 2**62


# --- stage 2: Ward's tree ----------------------------------------------------------------------


def ward_linkage(distances: npt.ArrayLike) -> FloatArray:
    """Ward's hierarchical clustering of a square ``(n, n)`` distance matrix (its upper triangle).

    The matrix is turned into SciPy's *condensed* form first. Passing the square matrix to
    :func:`scipy.cluster.hierarchy.linkage` would make SciPy read each row as an observation in
    ``R^n`` and cluster the rows by their Euclidean distances: the authors' released code did
    that. Returns the ``(n - 1, 4)`` linkage matrix (empty for one client).
    """
    rho = np.asarray(distances, dtype=np.float64)
    if rho.ndim != 2 or rho.shape[0] != rho.shape[1] or rho.shape[0] == 0:
        raise invalid("distances", "ward_linkage", "a square (n, n) matrix with n >= 1", rho.shape)
    if not np.all(np.isfinite(rho)):
        raise invalid("distances", "ward_linkage", "finite", rho)
    if rho.shape[0] == 1:
        return np.zeros((0, 4))
    # scipy.cluster costs about 0.3 s to import: loaded on first use, not with the package.
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    condensed = squareform(rho, checks=False)
    result: FloatArray = linkage(condensed, method="ward")
    return result


def rows_linkage(dissimilarities: FloatArray) -> FloatArray:
    """Ward's tree of the *rows* of a square matrix taken as points of ``R^n`` (the authors' code passes
    its ``n x n`` dissimilarity matrix to SciPy's ``linkage`` and scikit-learn's ``AgglomerativeClustering``
    as observations). Their Euclidean distances come from the Gram matrix (``O(n^3)`` by BLAS)."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    rho = np.asarray(dissimilarities, dtype=np.float64)
    if rho.shape[0] < 2:
        return np.zeros((0, 4))
    gram = rho @ rho.T
    squared = np.diag(gram)
    distances = np.sqrt(np.maximum(squared[:, None] + squared[None, :] - 2.0 * gram, 0.0))
    np.fill_diagonal(distances, 0.0)
    distances = 0.5 * (distances + distances.T)
    result: FloatArray = linkage(squareform(distances, checks=False), method="ward")
    return result


# --- stage 3: the tree cut ---------------------------------------------------------------------


def cut_by_mass(linkage_matrix: npt.ArrayLike, units: npt.ArrayLike, capacity: int) -> IntArray:
    """Cut a tree into its maximal subtrees of total ``units`` at most ``capacity`` (Alg. 2 line 3).

    ``units`` are the leaves' integer weights. Returns a group label per leaf, ``0 .. K-1`` in
    top-down discovery order. A leaf heavier than ``capacity`` forms a group alone. When every
    leaf fits, the groups weigh at most ``capacity`` each, so ``K >= sum(units) / capacity``.
    """
    u = np.asarray(units, dtype=np.int64)
    n = u.size
    if n <= 1:
        return np.zeros(n, dtype=np.int64)
    children = np.asarray(linkage_matrix)[:, :2].astype(np.int64).tolist()
    mass = [int(x) for x in u.tolist()] + [0] * (n - 1)  # Python ints: exact sums
    for j, (a, b) in enumerate(children):
        mass[n + j] = mass[a] + mass[b]
    label = [-1] * (2 * n - 1)
    next_label = 0
    if mass[2 * n - 2] <= capacity:
        label[2 * n - 2] = 0
        next_label = 1
    # Merge j's children have ids below n + j: visiting merges from the top handles parents first.
    for j in range(n - 2, -1, -1):
        inherited = label[n + j]
        for child in children[j]:
            if inherited >= 0:
                label[child] = inherited
            elif mass[child] <= capacity or child < n:
                label[child] = next_label
                next_label += 1
    return np.asarray(label[:n], dtype=np.int64)


def cut_into_clusters(linkage_matrix: FloatArray, num_clusters: int) -> IntArray:
    """The ``num_clusters`` clusters left after the first ``n - num_clusters`` merges of a tree (what
    ``AgglomerativeClustering(n_clusters=M)`` returns), labelled by their smallest member's order."""
    tree = np.asarray(linkage_matrix)
    n = tree.shape[0] + 1
    parent = list(range(2 * n - 1))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for j in range(max(n - num_clusters, 0)):
        a, b = int(tree[j, 0]), int(tree[j, 1])
        parent[root(a)] = n + j
        parent[root(b)] = n + j
    roots = np.array([root(i) for i in range(n)])
    _, labels = np.unique(roots, return_inverse=True)
    first = np.full(labels.max() + 1, n)
    np.minimum.at(first, labels, np.arange(n))
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    out: IntArray = rank[labels].astype(np.int64)
    return out


# --- stage 4: the allocation -------------------------------------------------------------------


class SimilarityRows(NamedTuple):
    """Algorithm 2's output: the row design and the group of each client (0 = heaviest group)."""

    design: RowDesign
    groups: IntArray


def allocate_clustered_rows(linkage_matrix: npt.ArrayLike, masses: npt.ArrayLike, num_sampled: int) -> SimilarityRows:
    """Cut the tree and allocate the ``m`` rows of Algorithm 2 in exact integer units.

    Client ``i`` owns ``m q_i`` units and every row holds ``Q = sum(q)`` units (``r[k, i]`` is
    client ``i``'s units in row ``k`` over ``Q``). A client with ``m q_i >= Q`` (``m p_i >= 1``)
    first fills ``floor(m q_i / Q)`` rows alone, where it is drawn with probability 1 (the
    extension at the end of 000, Section 5); its remaining ``m q_i mod Q`` units, and the
    ``m q_i`` units of every other client, go through Algorithm 2 on the ``m'`` rows left:

    * the tree is cut into the maximal subtrees of at most ``Q`` remaining units, ``K >= m'``
      groups, ranked by decreasing weight (ties: the group met first in the tree's leaf order);
    * the ``m'`` heaviest groups seed one row each (line 5);
    * the clients of the other groups, group after group and in leaf order within a group, pour
      their units into the remaining capacity of the rows, row after row (lines 6-19, with
      line 12 assigning the client's remaining units, as in the authors' code).

    Every row ends with exactly ``Q`` units and client ``i`` with ``m q_i`` (Proposition 1).
    """
    q = np.asarray(masses, dtype=np.int64)
    n, m = q.size, int(num_sampled)
    total = int(q.sum())
    if (m + 1) * total >= _INT64_LIMIT:
        raise FedsampleError(
            f"The 'num_sampled' parameter of allocate_clustered_rows must keep (m + 1) * sum(masses) below "
            f"2**62 for exact integer arithmetic (sum(masses) = {total}). Got {m} instead.",
            parameter="num_sampled",
        )
    owned = m * q
    full = owned // total  # rows where the client is drawn with probability 1
    rest = owned - full * total
    num_full = int(full.sum())
    free_rows = m - num_full

    labels = cut_by_mass(linkage_matrix, rest, total)
    leaf_position = np.empty(n, dtype=np.int64)
    from scipy.cluster.hierarchy import leaves_list

    leaf_position[leaves_list(np.asarray(linkage_matrix)) if n > 1 else np.zeros(1, dtype=np.int64)] = np.arange(n)
    num_groups = int(labels.max()) + 1
    group_mass = np.zeros(num_groups, dtype=np.int64)
    np.add.at(group_mass, labels, rest)
    first_leaf = np.full(num_groups, n, dtype=np.int64)
    np.minimum.at(first_leaf, labels, leaf_position)
    ranking = np.lexsort((first_leaf, -group_mass))  # Alg. 2 line 4
    rank = np.empty(num_groups, dtype=np.int64)
    rank[ranking] = np.arange(num_groups)
    groups = rank[labels]

    # Rows 0 .. num_full-1: one client each, probability 1.
    big = np.flatnonzero(full > 0)
    full_clients = np.repeat(big, full[big])
    full_rows = np.arange(num_full, dtype=np.int64)
    full_units = np.full(num_full, total, dtype=np.int64)

    # Rows num_full + g for the m' heaviest groups g (line 5).
    seeded = (groups < free_rows) & (rest > 0)
    seed_clients = np.flatnonzero(seeded)
    seed_rows = num_full + groups[seed_clients]
    seed_units = rest[seed_clients]
    filled = np.zeros(free_rows, dtype=np.int64)
    np.add.at(filled, groups[seed_clients], seed_units)

    # The other groups fill the rows' remaining capacity in order (lines 6-19): lay the
    # capacities end to end on a line, and the clients' units on the same line; a client's
    # entry in row k is the overlap of its interval with row k's.
    pending = np.flatnonzero(~seeded & (rest > 0) & (groups >= free_rows))
    pending = pending[np.lexsort((leaf_position[pending], groups[pending]))]
    capacity_end = np.cumsum(total - filled)
    capacity_start = capacity_end - (total - filled)
    client_end = np.cumsum(rest[pending])
    client_start = client_end - rest[pending]
    first_row = np.searchsorted(capacity_end, client_start, side="right")
    last_row = np.searchsorted(capacity_end, client_end - 1, side="right")
    span = last_row - first_row + 1
    owner = np.repeat(np.arange(pending.size), span)
    offset = np.arange(owner.size) - np.repeat(np.cumsum(span) - span, span)
    row = first_row[owner] + offset
    lo = np.maximum(client_start[owner], capacity_start[row])
    hi = np.minimum(client_end[owner], capacity_end[row])
    overlap = hi > lo  # rows already full have an empty interval
    fill_clients = pending[owner[overlap]]
    fill_rows = num_full + row[overlap]
    fill_units = (hi - lo)[overlap]

    rows = np.concatenate([full_rows, seed_rows, fill_rows]).astype(np.int64)
    clients = np.concatenate([full_clients, seed_clients, fill_clients]).astype(np.int64)
    units = np.concatenate([full_units, seed_units, fill_units]).astype(np.int64)
    order = np.argsort(rows, kind="stable")
    rows, clients, units = rows[order], clients[order], units[order]
    _check_units(rows, clients, units, q, m, total)
    design = RowDesign.from_units(
        num_clients=n,
        indptr=np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]).astype(np.int64),
        indices=clients,
        units=units,
        unit_total=total,
        row_counts=np.ones(m, dtype=np.int64),
        draw_weights=np.full(n, 1.0 / m),
    )
    return SimilarityRows(design=design, groups=readonly(groups))


def _check_units(rows: IntArray, clients: IntArray, units: IntArray, q: IntArray, m: int, total: int) -> None:
    """Proposition 1 in integers, ``O(entries + n)``: a failure is a bug, not bad input."""
    row_units = np.zeros(m, dtype=np.int64)
    np.add.at(row_units, rows, units)
    client_units = np.zeros(q.size, dtype=np.int64)
    np.add.at(client_units, clients, units)
    if np.any(units <= 0) or np.any(row_units != total) or np.any(client_units != m * q):
        raise AssertionError("Algorithm 2 produced rows that break Proposition 1 of paper 000")


def similarity_clustered_design(distances: npt.ArrayLike, masses: npt.ArrayLike, num_sampled: int) -> SimilarityRows:
    """Algorithm 2 of paper 000 from a distance matrix: Ward's tree, its cut, the allocation.

    ``distances`` is a square ``(n, n)`` matrix, ``masses`` the integers ``q_i`` with
    ``p_i = q_i / sum(q)`` (sizes, or ones for uniform importance), ``num_sampled`` is ``m``.
    """
    return allocate_clustered_rows(ward_linkage(distances), masses, num_sampled)
