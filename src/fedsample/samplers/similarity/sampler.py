"""Clustered sampling by model similarity: Algorithm 2 of paper 000 (Section 5).

Each round the server keeps the latest *representative gradient* ``G_i = theta_i - theta`` of
every client (zero for a client never sampled) and rebuilds the ``m`` rows of a clustered
sampling design from them, in four stages (stage 1 in :mod:`~fedsample.samplers.similarity.distances`,
stages 2 to 4 in :mod:`~fedsample.samplers.similarity.rows`, all re-exported here):

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

from dataclasses import InitVar, dataclass, field, replace
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from fedsample._agreement import adjusted_rand_index
from fedsample._arrays import DTypeTable, FloatArray, IntArray, readonly
from fedsample._invariants import FieldError, check_count, check_round, check_values
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.designs import RowDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.schemes.clustered import integer_masses
from fedsample.samplers.similarity.distances import Similarity, distance_rows, pairwise_distances, update_distances
from fedsample.samplers.similarity.rows import (
    SimilarityRows,
    allocate_clustered_rows,
    cut_by_mass,
    similarity_clustered_design,
    ward_linkage,
)
from fedsample.samplers.similarity.sketch import (
    MAX_PROJECTION_DIM,
    CountSketch,
    check_sketch_memory,
    count_sketch,
    received_vectors,
)
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

Float32Array = npt.NDArray[np.float32]

# The distance matrix and Ward's linkage are quadratic in n: the state holds 8 n^2 bytes and an
# update peaks about 12.6 n^2 bytes above it (the new matrix and SciPy's condensed copy), so 20000
# clients already take 3.2 GB held and about 8 GB at an update. The default of `max_clients`.
MAX_SIMILARITY_CLIENTS = 20_000


@dataclass(frozen=True, eq=False)
class ComputedDistances:
    """Distances the sampler computed from the state's own gradients, handed to the next state so that
    it need not recompute them. Not plain data: a saved file cannot hold one, so the distances of a
    state read from a file are always recomputed from its gradients."""

    matrix: FloatArray


SIMILARITIES = ("arccos", "l2", "l1")


@plain_data
@dataclass(frozen=True, eq=False)
class SimilarityState(SamplerState):
    """State of :class:`SimilarityClusteredSampler`: :class:`SamplerState`'s fields, and

    Attributes
    ----------
    masses:
        Integers ``q_i`` with ``p_i = q_i / sum(q)`` (exactly for size or uniform importance)
        that the rows are allocated in.
    gradients:
        ``(n, d)`` float32: each client's latest representative gradient (its sketch when
        projecting), zero for a client never heard from; ``d = 0`` before the first feedback.
    update_dim:
        Length of the update vectors received (0 before the first feedback).
    groups:
        Each client's group from the tree cut, 0 for the heaviest group (:func:`cluster_labels`).
    design:
        The current rows.
    round:
        Number of updates applied.
    similarity:
        The distance between gradients that the rows were built from (the sampler's).
    distances:
        ``(n, n)`` pairwise distances of ``gradients``: derived, so never saved. A state read from a
        file (or a checkpoint) recomputes them from its gradients (``O(n^2 d)``, once); they are the
        very bits that the round-by-round updates give (:func:`update_distances` is symmetric, so
        each entry is computed the same way either way), and a resumed run continues identically.
        Each update hands its own to the next state (``computed``, a :class:`ComputedDistances`).
    """

    masses: IntArray
    gradients: Float32Array
    update_dim: int
    groups: IntArray
    design: RowDesign
    round: int = 0
    similarity: Similarity = "arccos"
    distances: FloatArray = field(init=False, repr=False)
    computed: InitVar[ComputedDistances | None] = None

    _array_dtypes: ClassVar[DTypeTable] = {
        "masses": np.int64,
        "gradients": np.float32,
        "groups": np.int64,
    }
    # n x d float32: saved as raw bytes in base64 (fedsample.serialization), a quarter of their decimals.
    _packed_arrays: ClassVar[tuple[str, ...]] = ("gradients",)
    # Saved before distances were derived: a state file of an earlier version reads, its matrix recomputed.
    _formerly_saved: ClassVar[tuple[str, ...]] = ("distances",)

    def __post_init__(self, computed: ComputedDistances | None) -> None:
        super().__post_init__()
        for name in ("num_sampled", "update_dim", "round"):
            object.__setattr__(self, name, int(getattr(self, name)))
        if isinstance(computed, ComputedDistances):
            distances = computed.matrix
        else:  # read from a file: derived from the gradients, whatever else the file held
            owner = "SimilarityState"
            if self.similarity not in SIMILARITIES:
                raise FieldError(owner, "similarity", "one of 'arccos', 'l2', 'l1'", repr(self.similarity))
            check_values(owner, "gradients", self.gradients, shape=(self.importances.size, None))
            distances = pairwise_distances(self.gradients, similarity=self.similarity)
        object.__setattr__(self, "distances", readonly(np.asarray(distances, dtype=np.float64)))

    def check_invariants(self) -> None:
        owner = "SimilarityState"
        n, m = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        check_values(owner, "masses", self.masses, shape=(n,), low=1, integer=True)
        check_values(owner, "gradients", self.gradients, shape=(n, None))
        check_count(owner, "update_dim", self.update_dim, 0)
        if self.similarity not in SIMILARITIES:
            raise FieldError(owner, "similarity", "one of 'arccos', 'l2', 'l1'", repr(self.similarity))
        check_values(owner, "groups", self.groups, shape=(n,), low=0, high=max(n - 1, 0), integer=True)
        if not isinstance(self.design, RowDesign) or self.design.num_clients != n:
            raise FieldError(owner, "design", f"a RowDesign over {n} clients", f"a {type(self.design).__name__}")
        if int(self.design.row_counts.sum()) != m:
            got = f"counts summing to {int(self.design.row_counts.sum())}"
            raise FieldError(owner, "design.row_counts", f"draw counts summing to num_sampled ({m})", got)
        check_round(owner, "round", self.round)


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
        (:mod:`fedsample.samplers.population.samplers`) for populations of millions.

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
        "projection_dim": NoneOr(Interval(int, 1, MAX_PROJECTION_DIM, closed="both")),
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
        check_sketch_memory(self.projection_dim, n, type(self).__name__)
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
            groups=rows.groups,
            design=rows.design,
            round=0,
            similarity=self.similarity,
            computed=ComputedDistances(distances),
        )

    def design(self, state: SimilarityState) -> RowDesign:
        return state.design

    def update(self, state: SimilarityState, feedback: Feedback) -> SimilarityState:
        if state.similarity != self.similarity:
            raise invalid(
                "state",
                f"{type(self).__name__}.update",
                f"a state whose rows were built from {self.similarity!r} distances (similarity={self.similarity!r})",
                f"one built from {state.similarity!r} distances",
            )
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
            unchanged = ComputedDistances(state.distances)  # no gradient changed (a first one is all zero)
            return replace(state, gradients=gradients, update_dim=update_dim, round=state.round + 1, computed=unchanged)
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
            groups=rows.groups,
            design=rows.design,
            round=state.round + 1,
            similarity=self.similarity,
            computed=ComputedDistances(distances),
        )

    def _received(self, state: SimilarityState, feedback: Feedback) -> tuple[IntArray, Float32Array, int]:
        """The returned clients with finite update vectors, those vectors (sketched) and ``d``."""
        owner = f"{type(self).__name__}.update"
        return received_vectors(
            feedback,
            update_dim=state.update_dim,
            projection_dim=self.projection_dim,
            projection_seed=self.projection_seed,
            owner=owner,
        )
