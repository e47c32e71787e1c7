"""ArrayDataset, Partition, FederatedDataset and federate: invariants, views and error messages."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample.data import (
    ArrayDataset,
    FederatedDataset,
    Partition,
    federate,
    partition_iid,
    summarise,
)
from fedsample.errors import FedsampleError


def toy_dataset(num_samples: int = 12, num_classes: int = 3) -> ArrayDataset:
    features = np.arange(num_samples * 2, dtype=np.float64).reshape(num_samples, 2)
    return ArrayDataset(features=features, targets=np.arange(num_samples) % num_classes, name="toy")


def test_array_dataset_converts_dtypes_and_is_read_only() -> None:
    data = toy_dataset()
    assert data.features.dtype == np.float32
    assert data.targets.dtype == np.int64
    assert data.num_classes == 3
    assert data.num_samples == 12
    assert data.sample_shape == (2,)
    with pytest.raises(ValueError, match="read-only"):
        data.features[0, 0] = 1.0


def test_array_dataset_does_not_freeze_the_callers_array() -> None:
    """The dataset holds a read-only view of an array of the right dtype (no copy): the caller's
    array stays writeable, and what the caller writes is what both then read."""
    features = np.zeros((2, 3), dtype=np.float32)
    data = ArrayDataset(features=features, targets=[0, 1])
    assert features.flags.writeable
    features[0, 0] = 1.0
    assert features[0, 0] == 1.0
    assert data.features[0, 0] == 1.0  # a view of the caller's memory, not a copy
    assert np.shares_memory(data.features, features)
    assert not data.features.flags.writeable
    np.testing.assert_array_equal(data.features, [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_array_dataset_token_ids_and_regression() -> None:
    text = ArrayDataset(features=np.zeros((2, 5), dtype=np.int32), targets=[1, 0], num_classes=80)
    assert text.features.dtype == np.int64
    reg = ArrayDataset(features=np.zeros((2, 1)), targets=[0.5, -1.0], task="regression")
    assert reg.targets.dtype == np.float32
    assert reg.num_classes is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"features": np.zeros(3), "targets": [0, 1, 2]}, "'features' parameter of ArrayDataset"),
        ({"features": np.zeros((3, 1)), "targets": [0, 1]}, "'targets' parameter of ArrayDataset must be of length 3"),
        ({"features": np.zeros((2, 1)), "targets": [0, -1]}, "non-negative integer class labels"),
        ({"features": np.zeros((2, 1)), "targets": [0, 0.5]}, "non-negative integer class labels"),
        ({"features": np.full((2, 1), np.nan), "targets": [0, 1]}, "must be finite"),
        ({"features": np.zeros((2, 1)), "targets": [0, 3], "num_classes": 3}, "larger than the largest label (3)"),
        ({"features": np.zeros((2, 1)), "targets": [0, 1], "task": "ranking"}, "'task' parameter"),
        ({"features": np.zeros((2, 1)), "targets": [0.0, 1.0], "task": "regression", "num_classes": 2}, "None for"),
    ],
)
def test_array_dataset_rejects_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(FedsampleError) as info:
        ArrayDataset(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert "Got" in str(info.value)


def test_take_copies_rows_and_checks_indices() -> None:
    data = toy_dataset()
    sub = data.take([3, 0], name="sub")
    assert sub.targets.tolist() == [0, 0]
    assert sub.features[0].tolist() == [6.0, 7.0]
    assert sub.name == "sub"
    with pytest.raises(FedsampleError, match=r"'indices' parameter of ArrayDataset\.take"):
        data.take([12])


def test_partition_from_lists_and_assignment_agree() -> None:
    a = Partition.from_lists([[4, 1], [], [0, 2]], num_samples=5)
    b = Partition.from_assignment(np.array([2, 0, 2, -1, 0]), num_clients=3)
    assert a.sizes().tolist() == b.sizes().tolist() == [2, 0, 2]
    assert sorted(a.client(0).tolist()) == b.client(0).tolist() == [1, 4]
    assert a.client_of_rows().tolist() == [0, 0, 2, 2]
    assert a.is_disjoint()
    assert not a.covers_all()
    assert Partition.from_lists([[0, 1], [1]], num_samples=2).is_disjoint() is False
    assert Partition.from_lists([[0, 1], [2]], num_samples=3).covers_all()


@pytest.mark.parametrize(
    ("indptr", "indices", "num_samples", "message"),
    [
        ([1, 2], [0, 1], 3, "'indptr' parameter of Partition"),
        ([0, 2, 1, 2], [0, 1], 3, "'indptr' parameter of Partition"),
        ([0, 2], [0, 5], 3, "'indices' parameter of Partition must be row indices in [0, num_samples)"),
        ([0, 1], [-1], 3, "'indices' parameter of Partition"),
        ([0, 1], [0], -1, "'num_samples' parameter of Partition"),
        ([0], [], 3, "'indptr' parameter of Partition"),
    ],
)
def test_partition_rejects_bad_csr(indptr: list[int], indices: list[int], num_samples: int, message: str) -> None:
    with pytest.raises(FedsampleError) as info:
        Partition(indptr=np.array(indptr), indices=np.array(indices, dtype=np.int64), num_samples=num_samples)
    assert message in str(info.value)


def test_partition_client_index_is_checked() -> None:
    part = Partition.from_lists([[0]], num_samples=1)
    with pytest.raises(FedsampleError, match=r"'i' parameter of Partition.client must be an int in the range \[0, 0\]"):
        part.client(1)


def test_summarise_counts_labels_per_client() -> None:
    part = Partition.from_lists([[0, 1, 2], [3]], num_samples=4, name="manual")
    summary = summarise(part, [0, 1, 1, 2])
    assert summary.label_counts is not None
    assert summary.label_counts.tolist() == [[1, 2, 0], [0, 0, 1]]
    assert summary.distinct_labels().tolist() == [2, 1]  # type: ignore[union-attr]
    assert summary.sizes.tolist() == [3, 1]
    text = str(summary)
    assert text.startswith("manual: 2 clients")
    assert "3 classes" in text
    assert part.summary().label_counts is None
    assert summarise(part, [0, 1, 1, 2], num_classes=5).label_counts.shape == (2, 5)  # type: ignore[union-attr]
    with pytest.raises(FedsampleError, match="'labels' parameter of summarise must be of length num_samples = 4"):
        summarise(part, [0, 1])


def test_federate_groups_rows_by_client() -> None:
    data = toy_dataset()
    part = Partition.from_lists([[5, 0], [1, 2, 3], [11]], num_samples=12, name="manual")
    fed = federate(data, part)
    assert fed.name == "toy/manual"
    assert fed.num_clients == 3
    assert fed.train_sizes().tolist() == [2, 3, 1]
    assert fed.test_sizes().tolist() == [0, 0, 0]
    x, y = fed.client_train(0)
    assert x.tolist() == [[10.0, 11.0], [0.0, 1.0]]
    assert y.tolist() == [2, 0]
    assert fed.client_test(1)[0].shape == (0, 2)
    assert fed.train_clients().tolist() == [0, 0, 1, 1, 1, 2]
    assert fed.sample_shape == (2,)
    with pytest.raises(ValueError, match="read-only"):
        fed.train_features[0, 0] = 3.0


def test_federation_view_for_samplers() -> None:
    fed = federate(toy_dataset(), Partition.from_lists([[0], [1, 2, 3]], num_samples=12))
    assert fed.federation().importances.tolist() == [0.25, 0.75]
    assert fed.federation().sizes.tolist() == [1, 3]
    assert fed.federation(importance="uniform").importances.tolist() == [0.5, 0.5]


def test_federate_with_test_split() -> None:
    train, test = toy_dataset(12), toy_dataset(6)
    rng = np.random.default_rng(0)
    fed = federate(
        train,
        partition_iid(12, num_clients=3, rng=rng),
        test=test,
        test_partition=Partition.from_lists([[0, 1], [], [5]], num_samples=6),
    )
    assert fed.test_sizes().tolist() == [2, 0, 1]
    assert fed.client_test(2)[1].tolist() == [2]
    summary = fed.summary()
    assert summary.test_label_counts is not None
    assert summary.test_label_counts.sum() == 3
    assert summary.label_counts is not None
    assert summary.label_counts.sum() == 12
    assert "train samples per client: total 12" in summary.text()


def test_label_sets_and_distinct_labels() -> None:
    data = ArrayDataset(features=np.zeros((6, 1)), targets=[0, 0, 1, 2, 2, 3], name="toy")
    fed = federate(data, Partition.from_lists([[0, 1], [2, 3], [4, 5]], num_samples=6))
    assert [s.tolist() for s in fed.label_sets()] == [[0], [1, 2], [2, 3]]
    assert fed.label_counts.tolist() == [[2, 0, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    assert fed.distinct_labels([0, 0, 0]) == 1
    assert fed.distinct_labels([1, 2]) == 3
    assert fed.distinct_labels(np.array([0, 1, 2])) == 4
    assert fed.distinct_labels([]) == 0
    with pytest.raises(FedsampleError, match=r"'clients' parameter of FederatedDataset\.distinct_labels"):
        fed.distinct_labels([3])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition": Partition.from_lists([[0], []], num_samples=12)}, "at least one training sample"),
        ({"partition": Partition.from_lists([[0]], num_samples=5)}, "'partition' parameter of federate"),
        ({"test": toy_dataset(3)}, "'test_partition' parameter of federate"),
        (
            {"test": toy_dataset(3), "test_partition": Partition.from_lists([[0], [1]], num_samples=3)},
            "'test_partition' parameter of federate must be a Partition of 1 clients",
        ),
    ],
)
def test_federate_rejects_inconsistent_inputs(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"partition": Partition.from_lists([[0, 1]], num_samples=12), **kwargs}
    with pytest.raises(FedsampleError) as info:
        federate(toy_dataset(), **arguments)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_federated_dataset_validation() -> None:
    base = {
        "train_features": np.zeros((3, 2)),
        "train_targets": [0, 1, 1],
        "train_indptr": [0, 1, 3],
        "test_features": np.zeros((1, 2)),
        "test_targets": [4],
        "test_indptr": [0, 0, 1],
    }
    fed = FederatedDataset(**base)  # type: ignore[arg-type]
    assert fed.num_classes == 5  # the test label counts too
    with pytest.raises(FedsampleError, match="'test_features' parameter of FederatedDataset"):
        FederatedDataset(**{**base, "test_features": np.zeros((1, 3))})  # type: ignore[arg-type]
    with pytest.raises(FedsampleError, match="'test_indptr' parameter of FederatedDataset"):
        FederatedDataset(**{**base, "test_indptr": [0, 1]})  # type: ignore[arg-type]
    with pytest.raises(FedsampleError, match="'train_indptr' parameter of FederatedDataset"):
        FederatedDataset(**{**base, "train_indptr": [0, 1, 4]})  # type: ignore[arg-type]
    with pytest.raises(FedsampleError, match="'client_names' parameter of FederatedDataset must be of length 2"):
        FederatedDataset(**{**base, "client_names": ("a",)})  # type: ignore[arg-type]
    with pytest.raises(FedsampleError, match=r"'i' parameter of FederatedDataset.client_train"):
        fed.client_train(2)


def test_regression_federation_has_no_label_histogram() -> None:
    fed = FederatedDataset(
        train_features=np.zeros((2, 1)),
        train_targets=[0.1, 0.2],
        train_indptr=[0, 2],
        test_features=np.zeros((0, 1)),
        test_targets=np.zeros(0),
        test_indptr=[0, 0],
        task="regression",
        name="reg",
    )
    assert fed.summary().label_counts is None
    assert "reg (regression): 1 clients" in fed.summary().text()
    with pytest.raises(FedsampleError, match="classification task"):
        _ = fed.label_counts
