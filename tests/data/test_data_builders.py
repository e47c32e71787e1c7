"""Named federations (``FederationSpec`` -> ``build_federation``): sizes, splits, determinism, errors."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import FedsampleError
from fedsample.data.builders import FederationSpec, build_federation


def test_default_digits_federation_has_clients_with_test_rows() -> None:
    fed = build_federation(FederationSpec())
    assert fed.num_clients == 50
    assert fed.num_classes == 10
    # a fifth of each client's training size, rounded, with the client's label proportions
    np.testing.assert_array_equal(fed.test_sizes(), np.rint(0.2 * fed.train_sizes()))
    assert int(fed.train_sizes().sum() + fed.test_sizes().sum()) <= 1797


@pytest.mark.parametrize("partition", ["iid", "dirichlet", "one-label", "lognormal", "osmd-skewed"])
def test_every_partition_is_deterministic_and_disjoint(partition: str) -> None:
    spec = FederationSpec(dataset="mnist1d", partition=partition, num_clients=20, num_samples=1000, seed=5)
    a, b = build_federation(spec), build_federation(spec)
    np.testing.assert_array_equal(a.train_features, b.train_features)
    np.testing.assert_array_equal(a.train_indptr, b.train_indptr)
    assert a.num_clients == 20
    assert a.train_sizes().min() >= 1
    other = build_federation(FederationSpec(dataset="mnist1d", partition=partition, num_clients=20, num_samples=1000))
    assert not np.array_equal(a.train_features, other.train_features)


def test_one_label_partition_gives_each_client_one_label() -> None:
    fed = build_federation(FederationSpec(dataset="digits", partition="one-label", num_clients=20))
    assert (fed.label_presence.sum(axis=1) == 1).all()


def test_natural_regression_federation() -> None:
    fed = build_federation(FederationSpec(dataset="osmd-linear", partition="natural", num_clients=30, sigma=3.0))
    assert fed.task == "regression"
    assert fed.num_clients == 30
    assert fed.train_sizes().tolist() == [100] * 30


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"dataset": "nope"}, "dataset"),
        ({"partition": "natural"}, "partition"),
        ({"dataset": "osmd-linear", "partition": "iid"}, "partition"),
        ({"dataset": "mnist"}, "path"),
        ({"sizes": "unbalanced"}, "sizes"),  # 48500 samples requested from 1797 digits
        ({"alpha": -1.0}, "alpha"),
        ({"test_fraction": 1.5}, "test_fraction"),
    ],
)
def test_bad_specs_name_the_parameter(kwargs: dict[str, object], parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        build_federation(FederationSpec(**kwargs))  # type: ignore[arg-type]
    assert info.value.parameter == parameter
