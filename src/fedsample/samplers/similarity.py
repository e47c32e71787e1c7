"""Clustered sampling by model similarity: Algorithm 2 of paper 000 (Section 5).

Each round the server keeps the latest *representative gradient* ``G_i = theta_i - theta`` of
every client (zero for a client never sampled) and rebuilds the ``m`` rows of a clustered
sampling design from them, in four stages, each a function of this module:

1. **distances** (:func:`update_distances`): the pairwise distance matrix ``rho[i, j] =
   s(G_i, G_j)``. Only the rows and columns of the clients that returned change, so a round
   costs ``O(n k d)`` for ``k`` returned clients instead of ``O(n^2 d)`` (000, App. C.2).
2. **tree** (:func:`ward_linkage`): Ward's hierarchical clustering of the *condensed* distance
   matrix (Alg. 2 line 2).
3. **groups** (:func:`cut_by_mass`): the maximal subtrees whose total weight is at most ``1/m``,
   ``K >= m`` of them (line 3).
4. **rows** (:func:`allocate_clustered_rows`): the ``m`` heaviest groups seed the ``m`` rows,
   the clients of the other groups fill the remaining capacity row after row (lines 4-19), in
   exact integer units, so that Proposition 1 holds exactly.

Each round then draws one client per row, ``w_i = count_i / m``, which is unbiased, with
``Var[w_i]`` no larger than MD sampling's and ``P(i in S)`` no smaller (000, eqs. 17 and 23).
See ``docs/similarity.md`` for the choices made where the paper is silent.

>>> import numpy as np
>>> from fedsample import Federation, Feedback
>>> sampler = SimilarityClusteredSampler()
>>> state = sampler.init(Federation.from_sizes([10, 10, 10, 10]), num_sampled=2)
>>> selection = sampler.sample(state, np.random.default_rng(0))
>>> updates = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
>>> state = sampler.update(state, Feedback(round=0, selection=selection, clients=np.arange(4), updates=updates))
>>> cluster_labels(state).tolist()  # two directions, two groups of weight 1/m
[0, 0, 1, 1]
>>> sampler.design(state).dense_rows().tolist()  # one row per group: one client of each per round
[[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from fedsample._agreement import adjusted_rand_index
from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._invariants import FieldError, check_count, check_distribution, check_values
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.designs import RowDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import MAX_NUM_SAMPLED, Feedback, Sampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers.clustered import integer_masses
from fedsample.samplers.sketch import CountSketch, count_sketch
from fedsample.serialization import plain_data

__all__ = [
    "MAX_SIMILARITY_CLIENTS",
    "CountSketch",
    "SimilarityClusteredSampler",
    "SimilarityRows",
    "SimilarityState",
    "adjusted_rand_index",
    "allocate_clustered_rows",
    "cluster_labels",
    "count_sketch",
    "cut_by_mass",
    "distance_rows",
    "pairwise_distances",
    "similarity_clustered_design",
    "update_distances",
    "ward_linkage",
]

Similarity = Literal["arccos", "l2", "l1"]
Float32Array = npt.NDArray[np.float32]

# The distance matrix and Ward's linkage are quadratic in n: the state holds 8 n^2 bytes and an
# update peaks about 12.6 n^2 bytes above it (the new matrix and SciPy's condensed copy), so 20000
# clients already take 3.2 GB held and about 8 GB at an update. The default of `max_clients`.
MAX_SIMILARITY_CLIENTS = 20_000
_INT64_LIMIT = 2**62
# Gradients are read in blocks of this many float64 elements (32 MiB), so that dot products are
# accumulated in double precision without a double copy of the whole (n, d) matrix.
_BLOCK_ELEMENTS = 1 << 22
# Dot products are summed over slices of this many coordinates (32 KiB of float64 per row, so a
# block's slice stays in cache while every probe reads it), the slices added in order.
_DOT_SLICE = 4096


# --- stage 1: distances ------------------------------------------------------------------------


def distance_rows(gradients: npt.ArrayLike, clients: npt.ArrayLike, *, similarity: Similarity) -> FloatArray:
    """Distances from each client in ``clients`` to every client: a ``(k, n)`` array.

    ``similarity`` is ``"arccos"`` (the angle ``arccos(cos(G_i, G_j))``, the cosine clipped to
    ``[-1, 1]``; a zero vector is orthogonal to every non-zero one and at angle 0 from another
    zero vector), ``"l2"`` (the *squared* Euclidean distance, as the authors used) or ``"l1"``.
    Dot products are accumulated in float64, in an order fixed by ``d`` alone
    (:func:`_fixed_order_dots`), so the distances have the same bits at any thread count. Cost
    ``O(n k d)``.
    """
    g = np.asarray(gradients)
    ids = np.asarray(clients, dtype=np.int64)
    n, d = g.shape
    out = np.zeros((ids.size, n))
    if d == 0 or ids.size == 0:
        return out
    probe = g[ids].astype(np.float64)
    probe_sq = np.einsum("ij,ij->i", probe, probe)
    step = max(1, _BLOCK_ELEMENTS // d)
    buffer = np.empty((min(step, n), d))  # reused: one allocation, not one per block
    for start in range(0, n, step):
        stop = min(n, start + step)
        chunk = buffer[: stop - start]
        np.copyto(chunk, g[start:stop])
        if similarity == "l1":
            for a in range(ids.size):
                out[a, start:stop] = np.abs(chunk - probe[a]).sum(axis=1)
            continue
        dots = _fixed_order_dots(probe, chunk)
        chunk_sq = np.einsum("ij,ij->i", chunk, chunk)
        if similarity == "l2":
            # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b; rounding can make it slightly negative.
            out[:, start:stop] = np.maximum(probe_sq[:, None] + chunk_sq[None, :] - 2.0 * dots, 0.0)
        else:
            norms = np.sqrt(probe_sq)[:, None] * np.sqrt(chunk_sq)[None, :]
            cosine = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
            angle = np.arccos(np.clip(cosine, -1.0, 1.0))
            angle[(probe_sq[:, None] == 0) & (chunk_sq[None, :] == 0)] = 0.0
            out[:, start:stop] = angle
    out[np.arange(ids.size), ids] = 0.0
    return out


def _fixed_order_dots(probe: FloatArray, chunk: FloatArray) -> FloatArray:
    """``probe @ chunk.T``, summed in an order that depends on the shapes alone.

    A BLAS matrix product splits its work over threads in a way that depends on the thread count,
    and with it the order of the sums: the distances of one run then differed in their last bits
    between 1 and 2 threads, and so could Ward's tree. numpy's ``einsum`` (without ``optimize``)
    does not call BLAS and runs on one thread.
    """
    out = np.zeros((probe.shape[0], chunk.shape[0]))
    for start in range(0, probe.shape[1], _DOT_SLICE):
        stop = start + _DOT_SLICE
        out += np.einsum("ij,kj->ik", probe[:, start:stop], chunk[:, start:stop])
    return out


def update_distances(
    distances: npt.ArrayLike, gradients: npt.ArrayLike, clients: npt.ArrayLike, *, similarity: Similarity
) -> FloatArray:
    """A copy of the ``(n, n)`` matrix ``distances`` with the rows and columns of ``clients``
    recomputed from ``gradients`` (000, App. C.2: ``O(n k d)`` per round).

    The block between two updated clients is symmetrised, so the result stays exactly symmetric.
    """
    ids = np.asarray(clients, dtype=np.int64)
    out = np.array(distances, dtype=np.float64, copy=True)
    if ids.size == 0:
        return out
    rows = distance_rows(gradients, ids, similarity=similarity)
    block = rows[:, ids]
    rows[:, ids] = 0.5 * (block + block.T)
    out[ids, :] = rows
    out[:, ids] = rows.T
    return out


def pairwise_distances(gradients: npt.ArrayLike, *, similarity: Similarity) -> FloatArray:
    """The full ``(n, n)`` distance matrix, ``O(n^2 d)``: every row recomputed (the naive way)."""
    g = np.asarray(gradients)
    n, d = g.shape
    out = np.zeros((n, n))
    # Probe blocks of about 256 MiB in float64 keep the matrix products large.
    step = max(1, (8 * _BLOCK_ELEMENTS) // max(d, 1))
    for start in range(0, n, step):
        ids = np.arange(start, min(n, start + step))
        out[ids] = distance_rows(g, ids, similarity=similarity)
    return 0.5 * (out + out.T)


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


# --- random projection -------------------------------------------------------------------------


@plain_data
@dataclass(frozen=True, eq=False)
class SimilarityState:
    """State of :class:`SimilarityClusteredSampler`.

    Attributes
    ----------
    importances, num_sampled:
        ``p_i`` and ``m``.
    masses:
        Integers ``q_i`` with ``p_i = q_i / sum(q)`` (exactly for size or uniform importance)
        that the rows are allocated in.
    gradients:
        ``(n, d)`` float32: each client's latest representative gradient (its sketch when
        projecting), zero for a client never heard from; ``d = 0`` before the first feedback.
    update_dim:
        Length of the update vectors received (0 before the first feedback).
    distances:
        ``(n, n)`` pairwise distances of ``gradients``.
    groups:
        Each client's group from the tree cut, 0 for the heaviest group (:func:`cluster_labels`).
    design:
        The current rows.
    round:
        Number of updates applied.
    """

    importances: FloatArray
    num_sampled: int
    masses: IntArray
    gradients: Float32Array
    update_dim: int
    distances: FloatArray
    groups: IntArray
    design: RowDesign
    round: int = 0

    def __post_init__(self) -> None:
        for name, dtype in (
            ("importances", np.float64),
            ("masses", np.int64),
            ("gradients", np.float32),
            ("distances", np.float64),
            ("groups", np.int64),
        ):
            object.__setattr__(self, name, readonly(np.asarray(getattr(self, name), dtype=dtype)))
        for name in ("num_sampled", "update_dim", "round"):
            object.__setattr__(self, name, int(getattr(self, name)))

    def check_invariants(self) -> None:
        owner = "SimilarityState"
        check_distribution(owner, "importances", self.importances)
        n = int(self.importances.size)
        m = check_count(owner, "num_sampled", self.num_sampled, 1, min(n, MAX_NUM_SAMPLED))
        check_values(owner, "masses", self.masses, shape=(n,), low=1, integer=True)
        check_values(owner, "gradients", self.gradients, shape=(n, None))
        check_count(owner, "update_dim", self.update_dim, 0)
        check_values(owner, "distances", self.distances, shape=(n, n), low=0.0)
        check_values(owner, "groups", self.groups, shape=(n,), low=0, high=max(n - 1, 0), integer=True)
        if not isinstance(self.design, RowDesign) or self.design.num_clients != n:
            raise FieldError(owner, "design", f"a RowDesign over {n} clients", f"a {type(self.design).__name__}")
        if int(self.design.row_counts.sum()) != m:
            got = f"counts summing to {int(self.design.row_counts.sum())}"
            raise FieldError(owner, "design.row_counts", f"draw counts summing to num_sampled ({m})", got)
        check_count(owner, "round", self.round, 0)


def cluster_labels(state: SimilarityState) -> IntArray:
    """The group of each client in ``state`` (the tree cut of Alg. 2, 0 for the heaviest group).

    Compare two of them with :func:`adjusted_rand_index`, for example with and without projection.
    """
    return state.groups


@register_sampler
@dataclass(frozen=True, kw_only=True)
class SimilarityClusteredSampler(Sampler[SimilarityState]):
    """Clustered sampling by model similarity, Algorithm 2 of paper 000.

    After each round, the returned clients' update vectors ``theta_i - theta`` become their
    representative gradients; the distance rows of those clients are recomputed (``O(n k d)``),
    Ward's tree is built from the *condensed* distance matrix (the released code passed the square
    matrix, which SciPy reads as ``n`` observations, a bug), cut into the maximal subtrees of
    weight at most ``1/m``, and the ``m`` rows are allocated in exact integer units so that
    Proposition 1 holds exactly. Clients with ``m p_i >= 1`` get ``floor(m p_i)`` rows of their
    own. Each round draws one client per row, ``w_i = count_i / m``.

    Hyperparameters
    ---------------
    similarity:
        ``"arccos"`` (default), ``"l2"`` (squared Euclidean distance) or ``"l1"``.
    projection_dim:
        ``None`` keeps the full gradients; an int ``d'`` keeps a count sketch of each
        (:func:`count_sketch`, ``O(d)`` memory), so the state holds ``n x d'`` floats and a
        round costs ``O(n k d')`` after an ``O(k d)`` sketch. Meant for ``"arccos"`` and ``"l2"``
        (a sketch preserves inner products); with ``"l1"`` it measures the sketches' L1 distance.
    projection_seed:
        Seed of the sketch.
    max_clients:
        The largest federation :meth:`init` accepts (default :data:`MAX_SIMILARITY_CLIENTS`,
        20000). Memory is quadratic in ``n``: the state holds the ``8 n^2``-byte distance matrix
        and an update allocates about ``12.6 n^2`` bytes more (3.2 GB and 5 GB at ``n = 20000``).
        A larger federation raises :class:`~fedsample.FedsampleError` before anything quadratic
        is allocated; raise the cap knowingly, or use a population sampler
        (:mod:`fedsample.samplers.population`) for populations of millions.

    Update vectors with a NaN or infinite entry are ignored (the client keeps its previous
    gradient).
    """

    name = "clustered-similarity"
    needs_updates = True
    similarity: Similarity = "arccos"
    projection_dim: int | None = None
    projection_seed: int = 0
    max_clients: int = MAX_SIMILARITY_CLIENTS
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "similarity": Options(("arccos", "l2", "l1")),
        "projection_dim": NoneOr(Interval(int, 1, None, closed="left")),
        "projection_seed": Interval(int, 0, None, closed="left"),
        "max_clients": Interval(int, 1, None, closed="left"),
    }

    def init(self, federation: Federation, num_sampled: int) -> SimilarityState:
        m = self._check_num_sampled(num_sampled, upper=None)
        n = federation.num_clients
        if n > self.max_clients:
            raise FedsampleError(
                f"The 'federation' parameter of {type(self).__name__}.init must have at most "
                f"{self.max_clients} clients (max_clients: the distance matrix and Ward's tree are quadratic in n, "
                f"about {20.6 * n * n / 2**30:.1f} GiB at an update for this federation). Got {n} clients instead.",
                parameter="federation",
            )
        masses = integer_masses(federation, m)
        # No gradient yet: every client is the zero vector, at distance 0 from every other.
        distances = np.zeros((n, n))
        rows = similarity_clustered_design(distances, masses, m)
        return SimilarityState(
            importances=federation.importances,
            num_sampled=m,
            masses=masses,
            gradients=np.zeros((n, 0), dtype=np.float32),
            update_dim=0,
            distances=distances,
            groups=rows.groups,
            design=rows.design,
            round=0,
        )

    def design(self, state: SimilarityState) -> RowDesign:
        return state.design

    def update(self, state: SimilarityState, feedback: Feedback) -> SimilarityState:
        clients, vectors, update_dim = self._received(state, feedback)
        gradients = state.gradients
        stored_dim = update_dim if self.projection_dim is None else self.projection_dim
        if state.update_dim == 0:  # the first feedback sets d
            gradients = np.zeros((gradients.shape[0], stored_dim), dtype=np.float32)
        elif gradients.shape[1] != stored_dim:
            raise invalid(
                "state",
                f"{type(self).__name__}.update",
                f"a state whose gradients have {stored_dim} columns (built with projection_dim={self.projection_dim})",
                f"{gradients.shape[1]} columns",
            )
        if clients.size == 0:
            return replace(state, gradients=gradients, update_dim=update_dim, round=state.round + 1)
        gradients = np.array(gradients, copy=True)
        gradients[clients] = vectors
        gradients.flags.writeable = False  # the state takes it without another copy
        distances = update_distances(state.distances, gradients, clients, similarity=self.similarity)
        distances.flags.writeable = False
        rows = similarity_clustered_design(distances, state.masses, state.num_sampled)
        return SimilarityState(
            importances=state.importances,
            num_sampled=state.num_sampled,
            masses=state.masses,
            gradients=gradients,
            update_dim=update_dim,
            distances=distances,
            groups=rows.groups,
            design=rows.design,
            round=state.round + 1,
        )

    def _received(self, state: SimilarityState, feedback: Feedback) -> tuple[IntArray, Float32Array, int]:
        """The returned clients with finite updates, their (sketched) vectors, and ``d``."""
        owner = f"{type(self).__name__}.update"
        updates = feedback.updates
        if updates is None:
            raise invalid("feedback", owner, "a Feedback carrying the clients' update vectors (updates)", None)
        clients = np.asarray(feedback.clients, dtype=np.int64)
        n = state.gradients.shape[0]
        if clients.ndim != 1 or np.any((clients < 0) | (clients >= n)) or np.unique(clients).size != clients.size:
            raise invalid("feedback", owner, f"a Feedback whose clients are distinct ids in [0, {n})", clients)
        if updates.ndim != 2 or updates.shape[0] != clients.size or (clients.size and updates.shape[1] == 0):
            raise invalid("feedback", owner, f"a Feedback whose updates have shape ({clients.size}, d)", updates.shape)
        update_dim = int(updates.shape[1])
        if state.update_dim and update_dim != state.update_dim:
            raise invalid(
                "feedback", owner, f"a Feedback whose updates have d = {state.update_dim} columns", update_dim
            )
        finite = np.all(np.isfinite(updates), axis=1)
        clients, updates = clients[finite], updates[finite]
        if self.projection_dim is not None and clients.size:
            updates = count_sketch(update_dim, self.projection_dim, self.projection_seed).project(updates)
        with np.errstate(over="ignore"):
            vectors = updates.astype(np.float32)
        # Values beyond float32's range became infinite: treat them like a non-finite update.
        finite = np.all(np.isfinite(vectors), axis=1)
        return clients[finite], vectors[finite], update_dim
