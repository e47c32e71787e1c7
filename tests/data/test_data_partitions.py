"""Partitioners and size generators: exact sizes, disjointness, coverage, label structure, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample.data import (
    Partition,
    lognormal_sizes,
    osmd_skewed_sizes,
    partition_by_sizes,
    partition_dirichlet,
    partition_iid,
    partition_one_label_per_client,
    partition_test_like,
    summarise,
)
from fedsample.errors import FedsampleError
from fedsample.federation import builtin_sizes
from fedsample.rng import Stream, stream_rng

FAST = settings(max_examples=40, deadline=None)


def same_partition(a: Partition, b: Partition) -> bool:
    return bool(np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices))


# --- i.i.d. and size-driven splits ---------------------------------------------------------------


@FAST
@given(num_samples=st.integers(1, 300), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_partition_iid_is_a_balanced_disjoint_cover(num_samples: int, data: st.DataObject, seed: int) -> None:
    num_clients = data.draw(st.integers(1, num_samples))
    part = partition_iid(num_samples, num_clients=num_clients, rng=np.random.default_rng(seed))
    sizes = part.sizes()
    assert part.num_clients == num_clients
    assert sizes.max() - sizes.min() <= 1
    assert part.is_disjoint()
    assert part.covers_all()
    assert same_partition(part, partition_iid(num_samples, num_clients=num_clients, rng=np.random.default_rng(seed)))


@FAST
@given(
    sizes=st.lists(st.integers(0, 20), min_size=1, max_size=30),
    spare=st.integers(0, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_partition_by_sizes_gives_exact_disjoint_sizes(sizes: list[int], spare: int, seed: int) -> None:
    num_samples = sum(sizes) + spare
    part = partition_by_sizes(num_samples, sizes, rng=np.random.default_rng(seed))
    assert part.sizes().tolist() == sizes
    assert part.is_disjoint()
    assert part.covers_all() == (spare == 0)


def test_partition_by_sizes_takes_labels_or_a_count() -> None:
    labels = np.zeros(10, dtype=np.int64)
    a = partition_by_sizes(labels, [4, 6], rng=np.random.default_rng(3))
    b = partition_by_sizes(10, [4, 6], rng=np.random.default_rng(3))
    assert same_partition(a, b)
    assert partition_iid(10, num_clients=3, rng=np.random.default_rng(0)).name == "iid"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: partition_by_sizes(5, [3, 3], rng=np.random.default_rng(0)),
            "summing to at most the number of rows (5)",
        ),
        (lambda: partition_by_sizes(5, [3, -1], rng=np.random.default_rng(0)), "non-negative integers"),
        (lambda: partition_by_sizes(5, [1.5], rng=np.random.default_rng(0)), "non-negative integers"),
        (lambda: partition_by_sizes(5, [1], rng=0), "'rng' parameter of partition_by_sizes must be a numpy"),
        (lambda: partition_iid(5, num_clients=6, rng=np.random.default_rng(0)), "[1, 5]. Got 6 instead."),
        (lambda: partition_iid(0, num_clients=1, rng=np.random.default_rng(0)), "'num_samples' parameter"),
    ],
)
def test_size_driven_splits_reject_bad_input(call: object, message: str) -> None:
    with pytest.raises(FedsampleError) as info:
        call()  # type: ignore[operator]
    assert message in str(info.value)


# --- one label per client (paper 000, MNIST) ------------------------------------------------------


def test_one_label_per_client_reproduces_the_mnist_split_of_000() -> None:
    labels = np.random.default_rng(5).permutation(np.repeat(np.arange(10), 5500))
    part = partition_one_label_per_client(labels, num_clients=100, samples_per_client=500, rng=np.random.default_rng(1))
    assert part.sizes().tolist() == [500] * 100
    assert part.is_disjoint()
    summary = summarise(part, labels)
    assert summary.label_counts is not None
    assert summary.distinct_labels().tolist() == [1] * 100  # type: ignore[union-attr]
    held = summary.label_counts.argmax(axis=1)
    assert held.tolist() == list(np.repeat(np.arange(10), 10))  # ten clients per digit
    # The label of each client depends only on (n, C): the test split matches the training split.
    test_labels = np.repeat(np.arange(10), 1000)
    test = partition_one_label_per_client(
        test_labels, num_clients=100, samples_per_client=100, rng=np.random.default_rng(2)
    )
    assert summarise(test, test_labels).label_counts.argmax(axis=1).tolist() == held.tolist()  # type: ignore[union-attr]


@FAST
@given(
    counts=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_one_label_per_client_invariants(counts: list[int], data: st.DataObject, seed: int) -> None:
    labels = np.repeat(np.arange(len(counts)), counts)
    num_clients = data.draw(st.integers(1, min(counts) * len(counts) if min(counts) else 1))
    group = np.bincount(np.arange(num_clients) * len(counts) // num_clients, minlength=len(counts))
    if np.any((group > 0) & (np.array(counts) < group)):
        with pytest.raises(FedsampleError):
            partition_one_label_per_client(labels, num_clients=num_clients, rng=np.random.default_rng(seed))
        return
    part = partition_one_label_per_client(labels, num_clients=num_clients, rng=np.random.default_rng(seed))
    sizes = part.sizes()
    assert np.all(sizes == sizes[0])
    assert sizes[0] >= 1
    assert part.is_disjoint()
    for i in range(num_clients):
        assert np.unique(labels[part.client(i)]).size == 1


def test_one_label_per_client_reports_the_largest_feasible_size() -> None:
    labels = np.repeat(np.arange(2), [30, 12])
    part = partition_one_label_per_client(labels, num_clients=4, rng=np.random.default_rng(0))
    assert part.sizes().tolist() == [6, 6, 6, 6]
    with pytest.raises(FedsampleError) as info:
        partition_one_label_per_client(labels, num_clients=4, samples_per_client=7, rng=np.random.default_rng(0))
    assert str(info.value) == (
        "The 'samples_per_client' parameter of partition_one_label_per_client must be at most 6 "
        "(label 1 has 12 rows for 2 clients). Got 7 instead."
    )


# --- Dirichlet (paper 000, CIFAR-10) ---------------------------------------------------------------


def cifar_like_labels(per_class: int = 5000) -> np.ndarray:
    return np.random.default_rng(11).permutation(np.repeat(np.arange(10), per_class))


def test_dirichlet_on_the_unbalanced_federation_of_000() -> None:
    labels = cifar_like_labels()
    sizes = builtin_sizes("unbalanced")
    part = partition_dirichlet(labels, alpha=0.1, sizes=sizes, rng=np.random.default_rng(0))
    assert part.sizes().tolist() == sizes.tolist()
    assert part.is_disjoint()
    assert part.name == "dirichlet(alpha=0.1)"
    again = partition_dirichlet(labels, alpha=0.1, sizes=sizes, rng=np.random.default_rng(0))
    assert same_partition(part, again)
    other = partition_dirichlet(labels, alpha=0.1, sizes=sizes, rng=np.random.default_rng(1))
    assert not same_partition(part, other)


def test_dirichlet_small_alpha_gives_about_one_label_per_client() -> None:
    labels = cifar_like_labels(per_class=50000)  # ample pools: no exhaustion
    part = partition_dirichlet(labels, alpha=0.001, sizes=builtin_sizes("unbalanced"), rng=np.random.default_rng(0))
    counts = summarise(part, labels).label_counts
    assert counts is not None
    dominant_share = counts.max(axis=1) / counts.sum(axis=1)
    assert np.median((counts > 0).sum(axis=1)) == 1
    assert dominant_share.mean() > 0.95


def test_dirichlet_large_alpha_gives_the_global_mix() -> None:
    labels = cifar_like_labels()
    part = partition_dirichlet(labels, alpha=1000.0, sizes=[1000] * 20, rng=np.random.default_rng(0))
    counts = summarise(part, labels).label_counts
    assert counts is not None
    # Each label share is about Binomial(1000, 0.1)/1000: sd < 0.01, so 0.05 is over 5 sd.
    assert np.abs(counts / 1000 - 0.1).max() < 0.05


def test_dirichlet_exhausted_pools_still_fill_every_client() -> None:
    labels = cifar_like_labels(per_class=100)
    part = partition_dirichlet(labels, alpha=0.001, sizes=[250] * 4, rng=np.random.default_rng(0))
    assert part.sizes().tolist() == [250] * 4  # every label pool (100) is smaller than a client
    assert part.is_disjoint()
    assert part.covers_all()


@FAST
@given(
    class_counts=st.lists(st.integers(0, 30), min_size=1, max_size=6).filter(lambda c: sum(c) > 0),
    data=st.data(),
    alpha=st.sampled_from([0.001, 0.1, 1.0, 100.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_invariants(class_counts: list[int], data: st.DataObject, alpha: float, seed: int) -> None:
    labels = np.repeat(np.arange(len(class_counts)), class_counts)
    total = labels.size
    sizes = data.draw(st.lists(st.integers(1, total), min_size=1, max_size=8).filter(lambda s: sum(s) <= total))
    part = partition_dirichlet(labels, alpha=alpha, sizes=sizes, rng=np.random.default_rng(seed))
    assert part.sizes().tolist() == sizes
    assert part.is_disjoint()
    assert same_partition(part, partition_dirichlet(labels, alpha=alpha, sizes=sizes, rng=np.random.default_rng(seed)))


def test_dirichlet_error_messages() -> None:
    labels = np.repeat(np.arange(2), 5)
    with pytest.raises(FedsampleError) as info:
        partition_dirichlet(labels, alpha=-1, sizes=[2], rng=np.random.default_rng(0))
    assert str(info.value) == (
        "The 'alpha' parameter of partition_dirichlet must be a float in the range (0, inf). Got -1 instead."
    )
    with pytest.raises(FedsampleError, match="summing to at most the number of rows"):
        partition_dirichlet(labels, alpha=1.0, sizes=[6, 5], rng=np.random.default_rng(0))
    with pytest.raises(FedsampleError, match="'sizes' parameter of partition_dirichlet"):
        partition_dirichlet(labels, alpha=1.0, sizes=[0, 5], rng=np.random.default_rng(0))
    with pytest.raises(FedsampleError, match="'labels' parameter of partition_dirichlet"):
        partition_dirichlet([[0, 1]], alpha=1.0, sizes=[1], rng=np.random.default_rng(0))


def test_dirichlet_takes_num_clients_as_the_other_partitioners_do() -> None:
    """``num_clients=n`` (the name partition_iid, partition_one_label_per_client and FederationSpec use; it
    raised a TypeError) gives n clients of ``len(labels) // n`` rows, the same partition as those sizes."""
    labels = np.repeat(np.arange(4), 25)
    part = partition_dirichlet(labels, alpha=0.1, num_clients=7, rng=np.random.default_rng(3))
    assert part.sizes().tolist() == [14] * 7
    by_sizes = partition_dirichlet(labels, alpha=0.1, sizes=[14] * 7, rng=np.random.default_rng(3))
    assert same_partition(part, by_sizes)
    with pytest.raises(FedsampleError) as info:
        partition_dirichlet(labels, alpha=0.1, rng=np.random.default_rng(0))
    assert str(info.value) == (
        "The 'sizes' parameter of partition_dirichlet must be given when num_clients (equal sizes) is not. "
        "Got None instead."
    )
    with pytest.raises(FedsampleError, match="'num_clients' parameter of partition_dirichlet must be None"):
        partition_dirichlet(labels, alpha=0.1, sizes=[5], num_clients=5, rng=np.random.default_rng(0))
    with pytest.raises(FedsampleError, match=r"'num_clients' parameter .* range \[1, 100\]. Got 101"):
        partition_dirichlet(labels, alpha=0.1, num_clients=101, rng=np.random.default_rng(0))


def test_test_split_has_a_fifth_of_each_client_and_its_label_mix() -> None:
    train_labels = cifar_like_labels()
    test_labels = cifar_like_labels(per_class=1000)
    sizes = builtin_sizes("unbalanced")
    part = partition_dirichlet(train_labels, alpha=0.1, sizes=sizes, rng=np.random.default_rng(0))
    test = partition_test_like(part, train_labels, test_labels, rng=np.random.default_rng(1))
    assert test.sizes().tolist() == (sizes // 5).tolist()
    assert test.is_disjoint()
    train_counts = summarise(part, train_labels).label_counts
    test_counts = summarise(test, test_labels).label_counts
    assert train_counts is not None
    assert test_counts is not None
    # Test pools (1000 per label) run short for a few labels: most clients match exactly up to rounding.
    close = np.abs(test_counts - train_counts / 5).max(axis=1) <= 1
    assert close.mean() > 0.8
    assert test.name == "dirichlet(alpha=0.1)/test"


def test_test_split_rejects_too_large_fraction() -> None:
    part = Partition.from_lists([np.arange(10)], num_samples=10)
    with pytest.raises(FedsampleError, match="'fraction' parameter of partition_test_like"):
        partition_test_like(
            part, np.zeros(10, dtype=int), np.zeros(3, dtype=int), fraction=0.5, rng=np.random.default_rng(0)
        )
    with pytest.raises(FedsampleError, match="'train_labels' parameter of partition_test_like"):
        partition_test_like(part, np.zeros(9, dtype=int), np.zeros(3, dtype=int), rng=np.random.default_rng(0))


# --- size generators --------------------------------------------------------------------------------


def test_lognormal_sizes_reading_of_004() -> None:
    sizes = lognormal_sizes(5000, mean=2.0, sigma=4.0, rng=np.random.default_rng(0))
    assert sizes.sum() == 10000  # average size exactly 2
    assert sizes.min() >= 1
    assert np.median(sizes) == 1  # long tail: most clients hold a single sample...
    assert sizes.max() > 500  # ...and a few hold a large share
    assert np.array_equal(sizes, lognormal_sizes(5000, rng=np.random.default_rng(0)))
    flat = lognormal_sizes(100, mean=10.0, sigma=0.0, rng=np.random.default_rng(0))
    assert flat.tolist() == [10] * 100
    exact = lognormal_sizes(7, total=100, rng=np.random.default_rng(1))
    assert exact.sum() == 100
    assert exact.min() >= 1


@FAST
@given(
    num_clients=st.integers(1, 200),
    extra=st.integers(0, 2000),
    sigma=st.floats(0, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_lognormal_sizes_sum_exactly_and_are_positive(num_clients: int, extra: int, sigma: float, seed: int) -> None:
    sizes = lognormal_sizes(num_clients, sigma=sigma, total=num_clients + extra, rng=np.random.default_rng(seed))
    assert sizes.size == num_clients
    assert sizes.sum() == num_clients + extra
    assert sizes.min() >= 1


def test_lognormal_sizes_errors() -> None:
    with pytest.raises(
        FedsampleError, match=r"'mean' parameter of lognormal_sizes must be a float in the range \[1, inf\)"
    ):
        lognormal_sizes(10, mean=0.5, rng=np.random.default_rng(0))
    with pytest.raises(
        FedsampleError, match=r"'total' parameter of lognormal_sizes must be an int in the range \[10, inf\)"
    ):
        lognormal_sizes(10, total=9, rng=np.random.default_rng(0))


def test_osmd_skewed_sizes_share_the_builtin_federation() -> None:
    seed = 3
    sizes = osmd_skewed_sizes(500, rng=stream_rng(seed, Stream.FEDERATION))
    assert np.array_equal(sizes, builtin_sizes("osmd-skewed", seed=seed))


def test_osmd_skewed_sizes_frequencies() -> None:
    n = 100_000
    sizes = osmd_skewed_sizes(n, rng=np.random.default_rng(0))
    assert set(np.unique(sizes).tolist()) == {1, 10, 30, 100}
    for value, p in ((1, 0.65), (10, 0.2), (30, 0.1), (100, 0.05)):
        # Within 5 standard errors: false-failure rate below 1e-6 per value.
        assert abs(np.mean(sizes == value) - p) < 5 * np.sqrt(p * (1 - p) / n)
    with pytest.raises(FedsampleError, match="'num_clients' parameter of osmd_skewed_sizes"):
        osmd_skewed_sizes(0, rng=np.random.default_rng(0))


def test_end_to_end_cifar_style_federation_with_test_rows() -> None:
    from fedsample.data import federate, make_mnist1d

    rng = np.random.default_rng(0)
    train, test = make_mnist1d(6000, rng=rng), make_mnist1d(2000, rng=rng)
    sizes = np.repeat([100, 250, 500], [4, 4, 4])
    part = partition_dirichlet(train.targets, alpha=0.1, sizes=sizes, rng=rng)
    test_part = partition_test_like(part, train.targets, test.targets, rng=rng)
    fed = federate(train, part, test=test, test_partition=test_part)
    assert fed.train_sizes().tolist() == sizes.tolist()
    assert fed.test_sizes().tolist() == (sizes // 5).tolist()
    assert fed.name == "mnist1d/dirichlet(alpha=0.1)"
    assert fed.summary().label_counts.shape == (12, 10)  # type: ignore[union-attr]
