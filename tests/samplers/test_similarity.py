"""Clustered sampling by model similarity (Algorithm 2 of paper 000): each stage (distances, Ward's
tree on the condensed matrix, the cut, the allocation) on its own, Proposition 1 exactly on random
federations and gradients, 'target' sampling on separated clusters, and the sampler's contract."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest
import scipy.cluster.hierarchy
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.cluster.hierarchy import ClusterWarning, linkage, to_tree
from scipy.spatial.distance import squareform

from fedsample import Federation, FedsampleError, Feedback, MDSampler, Selection, dumps, exact_statistics
from fedsample import loads as json_loads
from fedsample.samplers import (
    SimilarityClusteredSampler,
    SimilarityState,
    check_proposition_1,
    cluster_labels,
    make_sampler,
    sampler_class,
    similarity_clustered_design,
)
from fedsample.samplers.schemes.clustered import integer_masses
from fedsample.samplers.similarity.sampler import (
    MAX_SIMILARITY_CLIENTS,
    allocate_clustered_rows,
    cut_by_mass,
    distance_rows,
    pairwise_distances,
    update_distances,
    ward_linkage,
)
from sampler_cases import unit_matrix

SIMILARITIES = ["arccos", "l2", "l1"]
GRADIENT_KINDS = ["zero", "duplicated", "clustered", "random", "partly-zero"]

# Sizes mix clients of one sample, moderate ones and huge ones, so that some draws have a client
# with m p_i > 1 (it then fills whole rows alone).
sizes_strategy = st.lists(st.one_of(st.just(1), st.integers(1, 20), st.integers(1, 10**6)), min_size=1, max_size=25)


def _gradients(kind: str, n: int, seed: int, d: int = 6) -> np.ndarray:
    """Synthetic representative gradients of ``kind`` for ``n`` clients."""
    rng = np.random.default_rng(seed)
    if kind == "zero":
        return np.zeros((n, d))
    if kind == "duplicated":  # a few distinct vectors, each shared by several clients
        return rng.normal(size=(3, d))[rng.integers(0, 3, size=n)]
    if kind == "clustered":
        centers = 5.0 * rng.normal(size=(4, d))
        return centers[rng.integers(0, 4, size=n)] + 0.01 * rng.normal(size=(n, d))
    g = rng.normal(size=(n, d))
    if kind == "partly-zero":  # clients never sampled keep the zero vector
        g[rng.random(n) < 0.5] = 0.0
    return g


def _feedback(clients: Any, updates: Any, t: int = 0) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    return Feedback(
        round=t,
        selection=Selection(clients=ids, weights=np.full(ids.size, 1.0 / max(ids.size, 1))),
        clients=ids,
        updates=np.asarray(updates, dtype=np.float64),
    )


# --- the allocation: Proposition 1 exactly --------------------------------------------------------


@settings(deadline=None, max_examples=120)
@given(
    sizes=sizes_strategy,
    m=st.integers(1, 40),
    uniform=st.booleans(),
    kind=st.sampled_from(GRADIENT_KINDS),
    similarity=st.sampled_from(SIMILARITIES),
    seed=st.integers(0, 2**16),
)
@example(sizes=[1], m=1, uniform=False, kind="zero", similarity="arccos", seed=0)
@example(sizes=[1, 1, 1, 1], m=4, uniform=False, kind="random", similarity="arccos", seed=0)  # n = m
@example(sizes=[1, 1, 1, 1, 1], m=4, uniform=True, kind="duplicated", similarity="l2", seed=1)  # n = m + 1
@example(sizes=[3, 1, 2], m=4, uniform=False, kind="clustered", similarity="l1", seed=2)  # n = m - 1
@example(sizes=[1, 1, 1], m=7, uniform=False, kind="random", similarity="arccos", seed=3)  # m > n
@example(sizes=[10**6, 1, 1, 1, 1], m=3, uniform=False, kind="partly-zero", similarity="arccos", seed=4)
@example(sizes=[6, 3, 3], m=4, uniform=False, kind="random", similarity="l2", seed=5)  # m p_1 = 2 exactly
def test_algorithm_2_satisfies_proposition_1_exactly(
    sizes: list[int], m: int, uniform: bool, kind: str, similarity: Any, seed: int
) -> None:
    """Every row holds exactly Q units (000, eq. 7) and client i exactly m q_i (eq. 8), in integers;
    a client with m q_i >= Q owns floor(m q_i / Q) rows alone (000, end of Section 5)."""
    federation = Federation.from_sizes(sizes, importance="uniform" if uniform else "size")
    masses = integer_masses(federation, m)
    total = int(masses.sum())
    distances = pairwise_distances(_gradients(kind, len(sizes), seed), similarity=similarity)
    rows = similarity_clustered_design(distances, masses, m)
    design = rows.design
    assert design.num_rows == m
    assert design.unit_total == total
    assert design.units is not None
    assert np.all(design.units > 0)
    units = unit_matrix(design)
    assert units.sum(axis=1).tolist() == [total] * m
    assert units.sum(axis=0).tolist() == [m * int(q) for q in masses]
    # Rows drawn with probability 1: one per whole multiple of Q in m q_i.
    whole_rows = (units == total).sum(axis=0)
    assert whole_rows.tolist() == [(m * int(q)) // total for q in masses]
    check_proposition_1(design, federation.importances, owner="test", atol=1e-12)
    # Draws: one per row, weight 1/m per draw.
    assert design.row_counts.tolist() == [1] * m
    np.testing.assert_array_equal(design.draw_weights, np.full(len(sizes), 1.0 / m))
    # The groups partition the clients, labelled 0 .. K-1.
    assert rows.groups.shape == (len(sizes),)
    assert set(rows.groups.tolist()) == set(range(int(rows.groups.max()) + 1))


def test_groups_seed_the_rows_and_the_rest_fill_them_in_order() -> None:
    """A hand-checked allocation. Masses q = (4, 2, 2, 1), m = 2: client units m q = (8, 4, 4, 2)
    into 2 rows of Q = 9 units. On a line at 0, 10, 20, 20.5, Ward's tree is ((0, 1), (2, 3)).
    {0, 1} weighs 12 > 9 and splits; {2, 3} weighs 6 <= 9. Groups by decreasing weight:
    {0} (8), {2, 3} (6), {1} (4)."""
    points = np.array([0.0, 10.0, 20.0, 20.5])
    distances = np.abs(points[:, None] - points[None, :])
    rows = similarity_clustered_design(distances, np.array([4, 2, 2, 1]), 2)
    units = unit_matrix(rows.design)
    # The two heaviest groups seed the rows: {0} row 0 (8 units), {2, 3} row 1 (6 units). The
    # last group {1} (4 units) fills the remaining capacity in row order: 1 unit in row 0, 3 in row 1.
    np.testing.assert_array_equal(units, [[8, 1, 0, 0], [0, 3, 4, 2]])
    assert rows.groups.tolist() == [0, 2, 1, 1]


def test_init_builds_valid_rows_from_zero_gradients(federation: Federation) -> None:
    """Before any feedback every client is at distance 0 from every other; the rows still satisfy Prop. 1."""
    sampler = SimilarityClusteredSampler()
    state = sampler.init(federation, 3)
    assert state.gradients.shape == (federation.num_clients, 0)
    assert state.update_dim == 0
    assert np.all(state.distances == 0)
    check_proposition_1(state.design, federation.importances, owner="test", atol=1e-15)


# --- stage 1: distances --------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    kind=st.sampled_from(GRADIENT_KINDS),
    similarity=st.sampled_from(SIMILARITIES),
    n=st.integers(1, 30),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_incremental_distance_rows_equal_a_full_recomputation(
    kind: str, similarity: Any, n: int, seed: int, data: st.DataObject
) -> None:
    """Recomputing only the rows and columns of the clients that returned gives the matrix of a full
    O(n^2 d) recomputation (to floating-point rounding), exactly symmetric with a zero diagonal."""
    before = _gradients(kind, n, seed).astype(np.float32)
    changed = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=np.int64)
    after = before.copy()
    after[changed] = _gradients("random", changed.size, seed + 1).astype(np.float32)
    distances = pairwise_distances(before, similarity=similarity)
    updated = update_distances(distances, after, changed, similarity=similarity)
    full = pairwise_distances(after, similarity=similarity)
    # Angles of (near) parallel vectors amplify rounding: arccos(1 - 1e-16) is 1.4e-8.
    np.testing.assert_allclose(updated, full, rtol=1e-9, atol=1e-7)
    np.testing.assert_array_equal(updated, updated.T)
    np.testing.assert_array_equal(np.diag(updated), 0.0)
    # Rows and columns of clients that did not return are untouched.
    kept = np.setdiff1d(np.arange(n), changed)
    np.testing.assert_array_equal(updated[np.ix_(kept, kept)], distances[np.ix_(kept, kept)])


def test_update_distances_does_not_modify_its_input() -> None:
    g = _gradients("random", 5, 0)
    distances = np.zeros((5, 5))
    update_distances(distances, g, [1, 3], similarity="arccos")
    assert np.all(distances == 0)


def _cosine_above_one(rng: np.random.Generator) -> np.ndarray:
    """A vector whose cosine with itself, computed the usual way, rounds above 1."""
    for _ in range(10_000):
        v = rng.normal(size=7) * 10.0 ** rng.integers(-5, 5)
        if float(v @ v) / (np.sqrt(v @ v) * np.sqrt(v @ v)) > 1.0:
            return v
    raise AssertionError("no vector found")


def test_arccos_of_identical_vectors_is_zero_without_nan() -> None:
    """Clipping the cosine to [-1, 1]: identical vectors (even ones whose computed cosine exceeds 1)
    are at angle 0 and never NaN; arccos(1 + eps) would be NaN with a RuntimeWarning (an error here)."""
    v = _cosine_above_one(np.random.default_rng(0))
    g = np.stack([v, v, v, 2.0 * v, -v])
    rows = distance_rows(g, np.arange(5), similarity="arccos")
    assert np.all(np.isfinite(rows))
    np.testing.assert_allclose(rows[:4, :4], 0.0, atol=1e-7)
    np.testing.assert_allclose(rows[4, :4], np.pi, rtol=1e-7)
    np.testing.assert_array_equal(np.diag(rows), 0.0)


def test_zero_gradients_are_orthogonal_to_the_others_and_together() -> None:
    """A zero gradient (a client never sampled) is at pi/2 from every non-zero one under arccos and
    at 0 from another zero one, so never-sampled clients group together (000, Section 5)."""
    g = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])
    rows = distance_rows(g, np.arange(4), similarity="arccos")
    h = np.pi / 2
    expected = [[0, 0, h, h], [0, 0, h, h], [h, h, 0, h], [h, h, h, 0]]
    np.testing.assert_allclose(rows, expected, rtol=1e-15)


def test_l2_is_the_squared_distance_and_l1_the_absolute_one() -> None:
    g = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    np.testing.assert_allclose(distance_rows(g, [0], similarity="l2"), [[0.0, 25.0, 2.0]], rtol=1e-15)
    np.testing.assert_allclose(distance_rows(g, [0], similarity="l1"), [[0.0, 7.0, 2.0]], rtol=1e-15)


# --- stage 2: Ward's tree on the condensed matrix ------------------------------------------------


def test_ward_linkage_is_given_the_condensed_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """linkage receives the n(n-1)/2 condensed distances, not the square matrix (whose rows SciPy
    would read as observations, the released code's bug)."""
    received: list[np.ndarray] = []

    def spy(y: np.ndarray, method: str) -> np.ndarray:
        received.append(np.array(y))
        assert method == "ward"
        return linkage(y, method=method)  # type: ignore[no-any-return]

    # ward_linkage imports linkage from scipy.cluster.hierarchy when called: spy on it there.
    monkeypatch.setattr(scipy.cluster.hierarchy, "linkage", spy)
    distances = pairwise_distances(_gradients("clustered", 9, 1), similarity="arccos")
    tree = ward_linkage(distances)
    assert len(received) == 1
    assert received[0].shape == (9 * 8 // 2,)
    np.testing.assert_array_equal(received[0], squareform(distances, checks=False))
    np.testing.assert_array_equal(tree, linkage(squareform(distances, checks=False), method="ward"))


def test_square_matrix_as_observations_gives_another_tree() -> None:
    """Passing the square matrix clusters the rows as points in R^n: heights and merges differ."""
    distances = pairwise_distances(_gradients("random", 8, 2), similarity="arccos")
    right = ward_linkage(distances)
    with pytest.warns(ClusterWarning, match="uncondensed distance matrix"):
        wrong = linkage(distances, method="ward")
    assert not np.allclose(right[:, 2], wrong[:, 2])


@pytest.mark.parametrize("bad", [np.zeros((2, 3)), np.zeros(4), np.full((2, 2), np.nan), np.zeros((0, 0))])
def test_ward_linkage_rejects_bad_distances(bad: np.ndarray) -> None:
    with pytest.raises(FedsampleError, match="'distances'") as info:
        ward_linkage(bad)
    assert info.value.parameter == "distances"


# --- stage 3: the tree cut -----------------------------------------------------------------------


def _reference_cut(tree: np.ndarray, units: np.ndarray, capacity: int) -> list[set[int]]:
    """Top-down recursion on SciPy's tree: a node light enough is a group, otherwise split it."""

    def groups(node: Any) -> list[set[int]]:
        leaves = node.pre_order()
        if node.is_leaf() or int(units[leaves].sum()) <= capacity:
            return [set(leaves)]
        return groups(node.get_left()) + groups(node.get_right())

    return groups(to_tree(tree))


@settings(deadline=None, max_examples=80)
@given(
    units=st.lists(st.integers(0, 50), min_size=2, max_size=30),
    extra=st.integers(0, 100),
    seed=st.integers(0, 2**16),
)
def test_cut_gives_the_maximal_subtrees_within_capacity(units: list[int], extra: int, seed: int) -> None:
    """The groups are the maximal subtrees of at most `capacity` units: a partition of the leaves,
    each group within capacity, K >= sum / capacity, equal to a recursive reference cut."""
    u = np.array(units, dtype=np.int64)
    capacity = int(u.max()) + extra
    if capacity == 0:
        capacity = 1
    tree = ward_linkage(pairwise_distances(_gradients("random", u.size, seed), similarity="l2"))
    labels = cut_by_mass(tree, u, capacity)
    assert labels.shape == u.shape
    groups = [set(np.flatnonzero(labels == g).tolist()) for g in range(int(labels.max()) + 1)]
    assert all(groups)  # labels 0 .. K-1 all used
    assert sorted(i for g in groups for i in g) == list(range(u.size))
    assert all(int(u[list(g)].sum()) <= capacity for g in groups)
    assert len(groups) >= -(-int(u.sum()) // capacity)
    assert sorted(map(sorted, groups)) == sorted(map(sorted, _reference_cut(tree, u, capacity)))


@settings(deadline=None, max_examples=60)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    m=st.integers(1, 12),
    kind=st.sampled_from(GRADIENT_KINDS),
    seed=st.integers(0, 2**16),
)
def test_groups_weigh_at_most_one_over_m_and_number_at_least_m(sizes: list[int], m: int, kind: str, seed: int) -> None:
    """When every m p_i < 1, the tree cut gives K >= m groups, each of weight at most 1/m (Alg. 2 line 3)."""
    total = sum(sizes)
    if m * max(sizes) >= total:
        m = max(1, (total - 1) // max(sizes))
    if m * max(sizes) >= total:
        return  # a single client, or one client with m p_i >= 1 for every m
    federation = Federation.from_sizes(sizes)
    rows = similarity_clustered_design(
        pairwise_distances(_gradients(kind, len(sizes), seed), similarity="arccos"), integer_masses(federation, m), m
    )
    weights = np.bincount(rows.groups, weights=federation.importances)
    assert weights.size >= m
    assert np.all(weights <= 1.0 / m + 1e-12)
    # Ranked by decreasing weight.
    assert np.all(np.diff(weights) <= 1e-12)


# --- the sampler: 'target' sampling on separated clusters ----------------------------------------


def _cluster_gradients(num_clusters: int, per_cluster: int, d: int, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_clusters, d))
    return np.repeat(centers, per_cluster, axis=0) + noise * rng.normal(size=(num_clusters * per_cluster, d))


def _assert_one_row_per_cluster(sampler: SimilarityClusteredSampler, state: SimilarityState) -> None:
    units = unit_matrix(state.design)
    row_clusters = [sorted(set((np.flatnonzero(r) // 10).tolist())) for r in units]
    assert sorted(row_clusters) == [[c] for c in range(10)]
    np.testing.assert_array_equal(units[units > 0], 10 * 500)  # each client 1/10 of its cluster's row
    rng = np.random.default_rng(0)
    for _ in range(200):
        drawn = sampler.sample(state, rng).clients
        assert sorted((drawn // 10).tolist()) == list(range(10))


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_separated_clusters_get_one_row_each(similarity: Any) -> None:
    """10 clusters of 10 equal clients, m = 10: once every gradient is known each row is one cluster,
    so every round draws one client per cluster (000's 'target' sampling, Section 6)."""
    federation = Federation.from_sizes(np.full(100, 500))
    sampler = SimilarityClusteredSampler(similarity=similarity)
    state = sampler.init(federation, 10)
    state = sampler.update(state, _feedback(np.arange(100), _cluster_gradients(10, 10, 40, 0.05, seed=1)))
    _assert_one_row_per_cluster(sampler, state)
    assert np.bincount(cluster_labels(state)).tolist() == [10] * 10


def test_sampling_loop_reaches_target_sampling() -> None:
    """Learning from the drawn clients only: once each client has returned once, the rows are the clusters."""
    federation = Federation.from_sizes(np.full(100, 500))
    sampler = SimilarityClusteredSampler()
    state = sampler.init(federation, 10)
    gradients = _cluster_gradients(10, 10, 40, 0.05, seed=2)
    rng = np.random.default_rng(3)
    seen: set[int] = set()
    for t in range(300):
        ids, _ = sampler.sample(state, rng).distinct()
        state = sampler.update(state, _feedback(ids, gradients[ids], t))
        check_proposition_1(state.design, federation.importances, owner="test", atol=1e-15)
        seen.update(ids.tolist())
        if len(seen) == 100:
            break
    assert len(seen) == 100
    assert state.round == t + 1
    _assert_one_row_per_cluster(sampler, state)


# --- statistics of the produced rows -------------------------------------------------------------


def _state_after_updates(federation: Federation, m: int, kind: str, seed: int, **params: Any) -> Any:
    sampler = SimilarityClusteredSampler(**params)
    state = sampler.init(federation, m)
    n = federation.num_clients
    gradients = _gradients(kind, n, seed)
    rng = np.random.default_rng(seed)
    for t in range(3):
        ids = np.flatnonzero(rng.random(n) < 0.6)
        state = sampler.update(state, _feedback(ids, gradients[ids], t))
    return sampler, state


@settings(deadline=None, max_examples=60)
@given(
    sizes=st.lists(st.one_of(st.integers(1, 10), st.integers(1, 10**6)), min_size=1, max_size=20),
    m=st.integers(1, 25),
    uniform=st.booleans(),
    kind=st.sampled_from(GRADIENT_KINDS),
    seed=st.integers(0, 2**16),
)
@example(sizes=[1000, 1, 1, 1], m=3, uniform=False, kind="random", seed=0)
def test_similarity_rows_are_unbiased_and_beat_md_for_every_client(
    sizes: list[int], m: int, uniform: bool, kind: str, seed: int
) -> None:
    """E[w_i] = p_i exactly from the design, Var[w_i] <= MD's (000, eq. 17), P(i in S) >= MD's (eq. 23)."""
    federation = Federation.from_sizes(sizes, importance="uniform" if uniform else "size")
    sampler, state = _state_after_updates(federation, m, kind, seed)
    stats = exact_statistics(sampler.design(state), federation.importances)
    np.testing.assert_allclose(stats.mean_weights, federation.importances, rtol=0, atol=1e-15)
    assert not stats.biased
    md = MDSampler()
    md_stats = exact_statistics(md.design(md.init(federation, m)), federation.importances)
    assert np.all(stats.var_weights <= md_stats.var_weights * (1 + 1e-12) + 1e-18)
    assert np.all(stats.p_included >= md_stats.p_included - 1e-12)


def test_float_importances_are_unbiased_to_rounding() -> None:
    """Importances that are not ratios of integers are scaled to 2**40 units, as for Algorithm 1."""
    federation = Federation.from_importances([0.1, 0.2 / 3, 0.4 / 3, 0.7])
    sampler, state = _state_after_updates(federation, 3, "random", 0)
    stats = exact_statistics(sampler.design(state), federation.importances)
    assert stats.max_bias < 1e-9
    check_proposition_1(state.design, federation.importances, owner="test")


def test_dominant_client_is_drawn_with_probability_one_in_its_rows() -> None:
    """Sizes (6, 1, 1, 1, 1), m = 3: m p_1 = 1.8, so client 0 owns one row alone (000, end of Section 5)."""
    federation = Federation.from_sizes([6, 1, 1, 1, 1])
    _, state = _state_after_updates(federation, 3, "random", 1)
    units = unit_matrix(state.design)
    assert (units[:, 0] == 10).sum() == 1
    stats = exact_statistics(state.design, federation.importances)
    assert stats.p_included[0] == 1.0


# --- the sampler's contract ----------------------------------------------------------------------


def test_registered_and_asks_for_updates() -> None:
    assert sampler_class("clustered-similarity") is SimilarityClusteredSampler
    sampler = make_sampler("clustered-similarity", similarity="l1", projection_dim=8)
    assert isinstance(sampler, SimilarityClusteredSampler)
    assert SimilarityClusteredSampler.needs_updates


def test_update_returns_a_new_state_and_leaves_its_input_alone(federation: Federation) -> None:
    sampler = SimilarityClusteredSampler()
    state = sampler.init(federation, 3)
    before = dumps(state)
    feedback = _feedback([0, 3, 5], np.arange(12.0).reshape(3, 4))
    new_state = sampler.update(state, feedback)
    assert new_state is not state
    assert dumps(state) == before
    assert new_state.round == 1
    assert new_state.update_dim == 4
    assert new_state.gradients.shape == (federation.num_clients, 4)
    assert new_state.gradients.dtype == np.float32
    np.testing.assert_array_equal(new_state.gradients[[0, 3, 5]], np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(new_state.gradients[[1, 2, 4, 6, 7]], 0.0)
    # A second update keeps the first one's gradients for clients that did not return.
    newer = sampler.update(new_state, _feedback([3], np.ones((1, 4)), 1))
    np.testing.assert_array_equal(newer.gradients[[0, 5]], new_state.gradients[[0, 5]])
    np.testing.assert_array_equal(newer.gradients[3], 1.0)
    np.testing.assert_allclose(
        newer.distances, pairwise_distances(newer.gradients, similarity="arccos"), rtol=1e-12, atol=1e-12
    )


def test_state_pickles_and_round_trips_through_json(federation: Federation) -> None:
    """After updates (gradients, distances, groups, rows): equal after pickle and JSON, read-only, same draws."""
    sampler, state = _state_after_updates(federation, 3, "clustered", 4, projection_dim=5)
    text = dumps(state)
    for restored in (pickle.loads(pickle.dumps(state)), json_loads(text)):
        assert type(restored) is SimilarityState
        assert dumps(restored) == text
        assert restored.gradients.dtype == np.float32
        for name in ("importances", "masses", "gradients", "distances", "groups"):
            array = getattr(restored, name)
            assert not array.flags.writeable
            np.testing.assert_array_equal(array, getattr(state, name))
        a = [sampler.sample(state, np.random.default_rng(9)).clients for _ in range(5)]
        b = [sampler.sample(restored, np.random.default_rng(9)).clients for _ in range(5)]
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        # A restored state keeps learning like the original.
        feedback = _feedback([1, 2], np.ones((2, 6)))
        assert dumps(sampler.update(restored, feedback)) == dumps(sampler.update(state, feedback))


def test_empty_feedback_only_advances_the_round(federation: Federation) -> None:
    sampler, state = _state_after_updates(federation, 3, "random", 5)
    new_state = sampler.update(state, _feedback([], np.zeros((0, 6))))
    assert new_state.round == state.round + 1
    np.testing.assert_array_equal(new_state.distances, state.distances)
    np.testing.assert_array_equal(new_state.design.units, state.design.units)


def test_non_finite_updates_are_ignored(federation: Federation) -> None:
    """A client returning NaN or Inf keeps its previous gradient (a failed client is not a crash)."""
    sampler = SimilarityClusteredSampler()
    state = sampler.update(sampler.init(federation, 3), _feedback([0, 1], np.ones((2, 3))))
    updates = np.array([[np.nan, 0.0, 1.0], [2.0, 2.0, 2.0], [np.inf, 0.0, 0.0], [1e300, 0.0, 0.0]])
    new_state = sampler.update(state, _feedback([0, 1, 2, 3], updates))
    np.testing.assert_array_equal(new_state.gradients[0], 1.0)  # NaN: kept
    np.testing.assert_array_equal(new_state.gradients[1], 2.0)
    np.testing.assert_array_equal(new_state.gradients[[2, 3]], 0.0)  # Inf, and beyond float32: ignored
    assert np.all(np.isfinite(new_state.distances))


BAD_HYPERPARAMETERS = [
    ("similarity", "cosine"),
    ("similarity", "L2"),
    ("similarity", None),
    ("similarity", 1),
    ("projection_dim", 0),
    ("projection_dim", -3),
    ("projection_dim", 2.0),
    ("projection_dim", True),
    ("projection_dim", "100"),
    ("projection_seed", -1),
    ("projection_seed", 0.5),
    ("projection_seed", None),
    ("projection_seed", False),
]


@pytest.mark.parametrize(
    ("parameter", "value"), BAD_HYPERPARAMETERS, ids=[f"{p}={v!r}" for p, v in BAD_HYPERPARAMETERS]
)
def test_bad_hyperparameters_raise_naming_the_parameter(parameter: str, value: Any) -> None:
    with pytest.raises(FedsampleError, match=rf"The '{parameter}' parameter of SimilarityClusteredSampler") as info:
        SimilarityClusteredSampler(**{parameter: value})
    assert info.value.parameter == parameter
    assert f"Got {value!r} instead" in str(info.value)


def _raw_feedback(clients: list[int], updates: np.ndarray) -> Feedback:
    """Feedback built directly, without _feedback's alignment of clients and updates."""
    one = Selection(clients=np.zeros(1, dtype=np.int64), weights=np.ones(1))
    return Feedback(round=0, selection=one, clients=np.array(clients, dtype=np.int64), updates=updates)


BAD_FEEDBACK = [
    (_feedback([0, 1], np.ones((2, 3))), "updates", None),  # no update vectors
    (_feedback([0, 9], np.ones((2, 3))), "clients", None),  # id out of range (n = 8)
    (_raw_feedback([0, 1], np.ones((3, 3))), "shape", None),  # 3 update rows for 2 clients
    (_raw_feedback([1, 1], np.ones((2, 3))), "distinct", None),  # a client twice
    (_feedback([0, 1], np.ones((2, 5))), "d = 3", 3),  # dimension changed after the first feedback
]


@pytest.mark.parametrize(
    ("feedback", "pattern", "known_dim"), BAD_FEEDBACK, ids=["no-updates", "range", "shape", "repeat", "dim"]
)
def test_bad_feedback_raises_naming_feedback(
    feedback: Feedback, pattern: str, known_dim: int | None, federation: Federation
) -> None:
    sampler = SimilarityClusteredSampler()
    state = sampler.init(federation, 3)
    if known_dim is not None:
        state = sampler.update(state, _feedback([2], np.ones((1, known_dim))))
    if pattern == "updates":
        feedback = Feedback(round=0, selection=feedback.selection, clients=feedback.clients, updates=None)
    with pytest.raises(FedsampleError, match=rf"'feedback'.*{pattern}") as info:
        sampler.update(state, feedback)
    assert info.value.parameter == "feedback"


def test_state_of_another_projection_is_refused(federation: Federation) -> None:
    """A state built with one projection_dim cannot be updated by a sampler with another."""
    sketched = SimilarityClusteredSampler(projection_dim=4)
    state = sketched.update(sketched.init(federation, 3), _feedback([0, 1], np.ones((2, 10))))
    with pytest.raises(FedsampleError, match=r"'state'.*10 columns.*projection_dim=None.*Got '4 columns'") as info:
        SimilarityClusteredSampler().update(state, _feedback([2], np.ones((1, 10))))
    assert info.value.parameter == "state"


def test_too_many_clients_are_refused_before_any_quadratic_work() -> None:
    federation = Federation.from_sizes(np.ones(MAX_SIMILARITY_CLIENTS + 1, dtype=np.int64))
    with pytest.raises(FedsampleError, match=r"'federation'.*at most 20000 clients") as info:
        SimilarityClusteredSampler().init(federation, 10)
    assert info.value.parameter == "federation"


def test_allocate_rejects_overflowing_units() -> None:
    tree = ward_linkage(np.zeros((2, 2)))
    with pytest.raises(FedsampleError, match="'num_sampled'") as info:
        allocate_clustered_rows(tree, np.array([2**40, 2**40]), 2**21)
    assert info.value.parameter == "num_sampled"


# --- the saved state: what a resume needs, not the derived matrices ---------------------------------


@settings(deadline=None, max_examples=80)
@given(
    kind=st.sampled_from(GRADIENT_KINDS),
    similarity=st.sampled_from(SIMILARITIES),
    n=st.integers(1, 25),
    d=st.sampled_from([1, 3, 6, 17, 4100]),
    seed=st.integers(0, 2**16),
)
def test_distances_recomputed_from_the_gradients_are_the_updates_bits(
    kind: str, similarity: Any, n: int, d: int, seed: int
) -> None:
    """The distances are not saved: a state read back recomputes them from its gradients in one
    O(n^2 d) pass. Round-by-round updates compute each entry the same way (the distance is symmetric
    in its two rows, bit for bit), so the recomputed matrix is the very one the updates built, and a
    resumed run continues identically."""
    sampler = SimilarityClusteredSampler(similarity=similarity)
    state = sampler.init(Federation.from_sizes(np.arange(1, n + 1)), min(n, 3))
    gradients = _gradients(kind, n, seed, d)
    rng = np.random.default_rng(seed)
    for t in range(4):
        ids = np.flatnonzero(rng.random(n) < 0.5)
        scale = 10.0 ** rng.uniform(-3, 3)
        state = sampler.update(state, _feedback(ids, gradients[ids] * scale + t, t))
    np.testing.assert_array_equal(state.distances, pairwise_distances(state.gradients, similarity=similarity))
    restored = json_loads(dumps(state))
    np.testing.assert_array_equal(restored.distances, state.distances)
    np.testing.assert_array_equal(restored.design.units, state.design.units)


def test_saved_state_holds_the_gradients_packed_and_no_distance_matrix(federation: Federation) -> None:
    """n x d float32 gradients as base64 (4 bytes a value, 5.3 characters), no n x n matrix."""
    n, d = federation.num_clients, 500
    sampler = SimilarityClusteredSampler()
    state = sampler.update(
        sampler.init(federation, 3), _feedback(np.arange(n), np.random.default_rng(1).normal(size=(n, d)))
    )
    encoded = json.loads(dumps(state))
    fields = encoded["fields"]
    assert "distances" not in fields
    assert fields["similarity"] == "arccos"
    assert set(fields["gradients"]) == {"__ndarray__", "shape", "base64"}
    assert fields["gradients"]["shape"] == [n, d]
    assert len(dumps(state)) < 1.1 * n * d * 4 * 4 / 3 + 5000  # the packed gradients and a few small fields
    restored = json_loads(dumps(state))
    assert restored.gradients.dtype == np.float32
    np.testing.assert_array_equal(restored.gradients.view(np.uint32), state.gradients.view(np.uint32))


def _earlier_version(state: SimilarityState) -> dict[str, Any]:
    """``state`` as an earlier fedsample saved it: gradients as decimals, the distance matrix, no similarity."""
    encoded: dict[str, Any] = json.loads(dumps(state))
    fields = encoded["fields"]
    fields["gradients"] = {
        "__ndarray__": "<f4",
        "shape": list(state.gradients.shape),
        "data": state.gradients.ravel().tolist(),
    }
    fields["distances"] = {
        "__ndarray__": "<f8",
        "shape": [state.importances.size] * 2,
        "data": state.distances.ravel().tolist(),
    }
    del fields["similarity"]
    return encoded


def test_a_state_file_of_an_earlier_version_reads_with_its_distances_recomputed(federation: Federation) -> None:
    _, state = _state_after_updates(federation, 3, "clustered", 4)
    old = _earlier_version(state)
    restored = json_loads(json.dumps(old))
    np.testing.assert_array_equal(restored.distances, state.distances)
    assert dumps(restored) == dumps(state)
    # Its saved matrix is not read: a tampered one changes nothing.
    old["fields"]["distances"]["data"] = [7.0] * len(old["fields"]["distances"]["data"])
    np.testing.assert_array_equal(json_loads(json.dumps(old)).distances, state.distances)


def test_a_file_cannot_hand_the_state_its_distances(federation: Federation) -> None:
    """Only the sampler's own update passes distances on (a ComputedDistances, not plain data)."""
    _, state = _state_after_updates(federation, 3, "random", 2)
    encoded = json.loads(dumps(state))
    encoded["fields"]["computed"] = {"__dict__": {"matrix": np.zeros(4).tolist()}}
    np.testing.assert_array_equal(json_loads(json.dumps(encoded)).distances, state.distances)


@pytest.mark.parametrize("value", ["cosine", 3, None])
def test_an_unknown_similarity_in_a_file_is_refused(federation: Federation, value: Any) -> None:
    _, state = _state_after_updates(federation, 3, "random", 2)
    encoded = json.loads(dumps(state))
    encoded["fields"]["similarity"] = value
    with pytest.raises(FedsampleError, match=r"'similarity' field of SimilarityState must be one of 'arccos'"):
        json_loads(json.dumps(encoded))


def test_state_of_another_similarity_is_refused(federation: Federation) -> None:
    _, state = _state_after_updates(federation, 3, "random", 2, similarity="l2")
    with pytest.raises(
        FedsampleError, match=r"'state'.*'arccos' distances.*Got \"one built from 'l2' distances\""
    ) as info:
        SimilarityClusteredSampler().update(state, _feedback([2], np.ones((1, 6))))
    assert info.value.parameter == "state"
