"""Test rows of a federation: a data set's own test split, the fraction rule, the packaged directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsample.data import Partition, partition_test_split
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.data.loaders import PACKAGED_DIRECTORIES
from fedsample.errors import FedsampleError
from idx_files import write_mnist_format

FASHION_MNIST = Path(PACKAGED_DIRECTORIES["fashion-mnist"])


def mnist_like(folder: Path, per_label_train: int = 60, per_label_test: int = 10) -> Path:
    """Files with MNIST's 6 : 1 ratio of training to test rows (a fifth of the training rows would not fit)."""
    return write_mnist_format(
        folder, np.repeat(np.arange(10), per_label_train), np.repeat(np.arange(10), per_label_test)
    )


def test_own_test_split_is_used_whole(tmp_path: Path) -> None:
    # Before, the default asked for test rows a fifth of the training rows: 120 from a split of 100.
    spec = FederationSpec(dataset="mnist", partition="one-label", num_clients=20, path=str(mnist_like(tmp_path)))
    fed = build_federation(spec)
    assert int(fed.train_sizes().sum()) == 600
    assert int(fed.test_sizes().sum()) == 100
    np.testing.assert_array_equal(fed.test_sizes(), np.full(20, 5))
    # each client is tested on its own label
    for i in range(20):
        train_labels = set(fed.client_train(i)[1].tolist())
        assert set(fed.client_test(i)[1].tolist()) == train_labels
    assert build_federation(spec).test_targets.tolist() == fed.test_targets.tolist()  # deterministic


def test_explicit_fraction_draws_from_the_own_split_and_names_the_key_when_too_large(tmp_path: Path) -> None:
    folder = str(mnist_like(tmp_path))
    fed = build_federation(
        FederationSpec(dataset="mnist", partition="one-label", num_clients=20, path=folder, test_fraction=0.1)
    )
    np.testing.assert_array_equal(fed.test_sizes(), np.full(20, 3))
    with pytest.raises(FedsampleError, match=r"'test_fraction'.*100 rows of the mnist test split.*Got 0\.2") as info:
        build_federation(
            FederationSpec(dataset="mnist", partition="one-label", num_clients=20, path=folder, test_fraction=0.2)
        )
    assert info.value.parameter == "test_fraction"
    fed = build_federation(
        FederationSpec(dataset="mnist", partition="iid", num_clients=5, path=folder, test_fraction=0.0)
    )
    assert int(fed.test_sizes().sum()) == 0


def test_data_sets_without_a_test_split_keep_the_fifth_rule() -> None:
    fed = build_federation(FederationSpec(dataset="mnist1d", partition="iid", num_clients=10, num_samples=600))
    np.testing.assert_array_equal(fed.test_sizes(), np.rint(0.2 * fed.train_sizes()))


def test_partition_test_split_follows_training_label_counts() -> None:
    train = np.array([0] * 6 + [1] * 6)
    # client 0: four 0s; client 1: two 0s and two 1s; client 2: four 1s; label 2 is trained by nobody
    part = Partition.from_lists([np.arange(4), np.array([4, 5, 6, 7]), np.arange(8, 12)], num_samples=12)
    test = np.array([0] * 6 + [1] * 6 + [2] * 6)
    split = partition_test_split(part, train, test, rng=np.random.default_rng(3))
    assert split.is_disjoint()
    assert split.covers_all()
    counts = [np.bincount(test[split.client(i)], minlength=3).tolist() for i in range(3)]
    # label 0: 6 rows as 4 : 2; label 1: 6 rows as 2 : 4; label 2: by training sizes 4 : 4 : 4
    assert counts == [[4, 0, 2], [2, 2, 2], [0, 4, 2]]
    again = partition_test_split(part, train, test, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(again.indices, split.indices)


def test_partition_test_split_rejects_mismatched_labels() -> None:
    part = Partition.from_lists([np.arange(3)], num_samples=3)
    with pytest.raises(FedsampleError) as info:
        partition_test_split(part, np.zeros(4, dtype=int), np.zeros(2, dtype=int), rng=np.random.default_rng(0))
    assert info.value.parameter == "train_labels"


def test_fashion_mnist_defaults_to_the_packaged_directory() -> None:
    assert FederationSpec(dataset="fashion-mnist", partition="iid").path == "/usr/share/datasets/fashion-mnist"
    assert FederationSpec(dataset="fashion-mnist", partition="iid", path="/elsewhere").path == "/elsewhere"
    with pytest.raises(FedsampleError) as info:
        FederationSpec(dataset="kmnist", partition="iid")
    assert info.value.parameter == "path"


@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="the Debian package dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_shards_with_its_test_split() -> None:
    fed = build_federation(FederationSpec(dataset="fashion-mnist", partition="one-label", num_clients=100))
    assert (fed.num_clients, int(fed.train_sizes().sum()), int(fed.test_sizes().sum())) == (100, 60000, 10000)
    np.testing.assert_array_equal(fed.train_sizes(), np.full(100, 600))
    np.testing.assert_array_equal(fed.test_sizes(), np.full(100, 100))
    assert (fed.label_presence.sum(axis=1) == 1).all()
