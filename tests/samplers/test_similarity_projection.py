"""The count-sketch projection of SimilarityClusteredSampler (deterministic, O(d) memory, inner
products kept in expectation, clustering kept on clustered gradients) and the adjusted Rand index."""

from __future__ import annotations

import itertools
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import Federation, FedsampleError, Feedback, Selection, dumps
from fedsample.samplers import SimilarityClusteredSampler, adjusted_rand_index, cluster_labels
from fedsample.samplers.similarity.sampler import count_sketch


def _feedback(clients: Any, updates: Any) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    return Feedback(
        round=0,
        selection=Selection(clients=ids, weights=np.full(ids.size, 1.0 / ids.size)),
        clients=ids,
        updates=updates,
    )


def _hierarchical_gradients(seed: int, d: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """100 clients: 10 families of 5 clusters of 2 clients. Returns gradients and family labels."""
    rng = np.random.default_rng(seed)
    families = rng.normal(size=(10, d))
    clusters = np.repeat(families, 5, axis=0) + 0.7 * rng.normal(size=(50, d))
    gradients = np.repeat(clusters, 2, axis=0) + noise * rng.normal(size=(100, d))
    return gradients, np.repeat(np.arange(10), 10)


# --- the sketch ----------------------------------------------------------------------------------


def test_sketch_is_deterministic_given_the_seed() -> None:
    a, b, c = count_sketch(1000, 64, 7), count_sketch(1000, 64, 7), count_sketch(1000, 64, 8)
    np.testing.assert_array_equal(a.buckets, b.buckets)
    np.testing.assert_array_equal(a.signs, b.signs)
    assert not np.array_equal(a.buckets, c.buckets)
    x = np.random.default_rng(0).normal(size=(3, 1000))
    np.testing.assert_array_equal(a.project(x), b.project(x))


def test_sampler_projection_is_deterministic_given_the_seed(federation: Federation) -> None:
    """Two samplers with the same seed build the same state; another seed gives other sketches."""
    updates = np.random.default_rng(1).normal(size=(4, 300))
    feedback = _feedback([0, 2, 5, 7], updates)

    def state_for(seed: int) -> Any:
        sampler = SimilarityClusteredSampler(projection_dim=16, projection_seed=seed)
        return sampler.update(sampler.init(federation, 3), feedback)

    first, again, other = state_for(3), state_for(3), state_for(4)
    assert dumps(first) == dumps(again)
    assert first.gradients.shape == (federation.num_clients, 16)
    assert first.update_dim == 300
    assert not np.array_equal(first.gradients, other.gradients)
    np.testing.assert_allclose(first.gradients[[0, 2, 5, 7]], count_sketch(300, 16, 3).project(updates), rtol=1e-6)


def test_sketch_memory_is_linear_in_d() -> None:
    """The sketch stores 9 bytes per input coordinate (bucket and sign), and sketching k vectors
    allocates O(d + k d') memory, far below a dense d x d' projection matrix."""
    d, d_out, k = 200_000, 1000, 4
    sketch = count_sketch(d, d_out, 11)
    assert sketch.buckets.shape == (d,)
    assert sketch.signs.shape == (d,)
    assert sketch.buckets.nbytes + sketch.signs.nbytes == 9 * d
    x = np.random.default_rng(0).normal(size=(k, d))
    tracemalloc.start()
    try:
        sketch.project(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * (k * d_out + 4 * d)  # a dense projection would take 8 d d' = 1.6 GB
    tracemalloc.start()
    try:
        count_sketch(d, d_out, 12)  # a fresh draw
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 4 * d


def test_sketch_keeps_inner_products_in_expectation() -> None:
    """E[<Sx, Sy>] = <x, y>: averaged over 200 seeds, within 4 standard errors (false-failure ~6e-5)."""
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(2, 500))
    values = np.array(
        [
            (lambda s: float(s.project(x[None])[0] @ s.project(y[None])[0]))(count_sketch(500, 32, seed))
            for seed in range(200)
        ]
    )
    stderr = values.std(ddof=1) / np.sqrt(values.size)
    assert abs(values.mean() - float(x @ y)) < 4 * stderr
    # Each coordinate lands in exactly one bucket with sign +-1: squared norms of a coordinate vector are kept.
    e = np.zeros((1, 500))
    e[0, 17] = 3.0
    assert float(np.sum(count_sketch(500, 32, 0).project(e) ** 2)) == 9.0


@pytest.mark.parametrize(
    ("noise", "projection_dim", "minimum_ari"),
    # Measured (seed 0, d = 20000): ARI = 1.0 in all three settings; the bounds leave room for
    # other platforms' rounding.
    [(1.0, 256, 0.95), (2.0, 1000, 0.95), (0.5, 64, 0.95)],
)
@pytest.mark.parametrize("similarity", ["arccos", "l2"])
def test_projection_keeps_the_clustering_of_clustered_gradients(
    noise: float, projection_dim: int, minimum_ari: float, similarity: Any
) -> None:
    """On hierarchically clustered gradients (d = 20000), the groups with a count sketch of d' <= 1000
    dimensions match the uncompressed groups: adjusted Rand index >= 0.95 (measured 1.0)."""
    gradients, families = _hierarchical_gradients(0, 20_000, noise)
    federation = Federation.from_sizes(np.full(100, 10))
    feedback = _feedback(np.arange(100), gradients)
    labels = {}
    for dim in (None, projection_dim):
        sampler = SimilarityClusteredSampler(similarity=similarity, projection_dim=dim)
        labels[dim] = cluster_labels(sampler.update(sampler.init(federation, 10), feedback))
    assert adjusted_rand_index(labels[None], families) == 1.0
    assert adjusted_rand_index(labels[projection_dim], labels[None]) >= minimum_ari


def test_strong_compression_of_noisy_gradients_loses_the_clustering() -> None:
    """The index does measure the damage: d' = 64 of very noisy gradients scrambles the groups
    (measured ARI 0.13 at seed 0; 0.51 with d' = 256, 1.0 with d' = 1000)."""
    gradients, _ = _hierarchical_gradients(0, 20_000, 3.0)
    federation = Federation.from_sizes(np.full(100, 10))
    feedback = _feedback(np.arange(100), gradients)
    full = SimilarityClusteredSampler()
    sketched = SimilarityClusteredSampler(projection_dim=64)
    a = cluster_labels(full.update(full.init(federation, 10), feedback))
    b = cluster_labels(sketched.update(sketched.init(federation, 10), feedback))
    assert adjusted_rand_index(a, b) < 0.5


# --- the adjusted Rand index ---------------------------------------------------------------------


def _pair_counting_ari(a: list[int], b: list[int]) -> float:
    """The index from its pair-counting definition, over all pairs (an independent O(n^2) reference)."""
    same_a = np.array([a[i] == a[j] for i, j in itertools.combinations(range(len(a)), 2)])
    same_b = np.array([b[i] == b[j] for i, j in itertools.combinations(range(len(a)), 2)])
    tp = int(np.sum(same_a & same_b))
    fp = int(np.sum(~same_a & same_b))
    fn = int(np.sum(same_a & ~same_b))
    tn = int(np.sum(~same_a & ~same_b))
    if fn == 0 and fp == 0:
        return 1.0
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([0, 0, 1, 1], [0, 0, 1, 1], 1.0),
        ([0, 0, 1, 1], [5, 5, 3, 3], 1.0),  # renaming does not matter
        ([0, 0, 1, 1], [0, 1, 0, 1], -0.5),
        ([0, 0, 1, 1], [0, 0, 1, 2], 4 / 7),
        ([0, 0, 0, 0], [0, 1, 2, 3], 0.0),
        ([0, 0, 0], [1, 1, 1], 1.0),  # everything together in both
        ([0, 1, 2], [2, 0, 1], 1.0),  # everything apart in both
        ([7], [3], 1.0),
    ],
)
def test_adjusted_rand_index_known_values(a: list[int], b: list[int], expected: float) -> None:
    assert adjusted_rand_index(a, b) == pytest.approx(expected, abs=1e-15)


@settings(deadline=None, max_examples=100)
@given(data=st.data(), n=st.integers(2, 30))
def test_adjusted_rand_index_equals_its_pair_counting_definition(data: st.DataObject, n: int) -> None:
    a = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    b = data.draw(st.lists(st.integers(-2, 6), min_size=n, max_size=n))
    value = adjusted_rand_index(a, b)
    assert value == pytest.approx(_pair_counting_ari(a, b), abs=1e-12)
    assert value == pytest.approx(adjusted_rand_index(b, a), abs=1e-15)
    assert value <= 1.0 + 1e-15


def test_adjusted_rand_index_rejects_mismatched_labelings() -> None:
    with pytest.raises(FedsampleError, match="'labels_b'") as info:
        adjusted_rand_index([0, 1, 1], [0, 1])
    assert info.value.parameter == "labels_b"
