"""Named federations: a dataset, a partition and a test split, described as plain data.

:class:`FederationSpec` (:mod:`fedsample.data.spec`, imported from here as the docs show) is what a
command line or a config file says about the data; :func:`build_federation` turns it into a
:class:`~fedsample.data.FederatedDataset`, deterministically from its ``seed``.

Centralised datasets (digits, MNIST-1D, IDX, CIFAR-10 binaries) are split among ``num_clients``
clients by ``partition``. Test rows, by default: a data set with its own test split (IDX,
CIFAR-10) gives the clients the whole split, each label's test rows shared in proportion to the
clients' training rows of that label, so the pooled test accuracy is the usual one on that
split; a data set without one (digits, MNIST-1D) is divided into a training pool and a test pool,
and each client gets test rows a fifth of its training size with its training label proportions
(paper 000's CIFAR-10 rule). An explicit ``test_fraction`` applies that fifth-rule with its own
fraction to every data set (0: no test rows). Naturally federated data (the OSMD regression, LEAF,
tables) keep their clients.

A user's own data file (``dataset`` a path to a ``.npz``, ``.csv``, ``.parquet`` or ``.pq`` file,
read by :func:`~fedsample.data.loaders.read_table`) is naturally federated when it has the client
column, and a centralised data set otherwise (see :class:`FederationSpec`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from fedsample._validation import (
    Interval,
    NoneOr,
    check_param,
    invalid,
)
from fedsample.data import files, partitioners
from fedsample.data.dataset import ArrayDataset
from fedsample.data.digits import load_digits
from fedsample.data.federated import FederatedDataset, federate
from fedsample.data.loaders.table import Table
from fedsample.data.mnist1d import make_mnist1d
from fedsample.data.partition import Partition
from fedsample.data.sizes import lognormal_sizes, osmd_skewed_sizes
from fedsample.data.spec import (
    DATASETS,
    DEFAULT_TEST_FRACTION,
    NATURAL_DATASETS,
    PARTITIONS,
    PATH_NEEDED,
    FederationSpec,
    has_own_clients,
    is_data_file,
    is_python_data,
)
from fedsample.data.synthetic import make_osmd_linear_regression
from fedsample.errors import FedsampleError
from fedsample.federation import builtin_sizes
from fedsample.rng import Stream, stream_rng

__all__ = [
    "DATASETS",
    "DEFAULT_TEST_FRACTION",
    "NATURAL_DATASETS",
    "PARTITIONS",
    "FederationSpec",
    "build_federation",
    "has_own_clients",
    "is_data_file",
    "is_python_data",
]


def build_federation(spec: FederationSpec, *, replicate: int | None = None) -> FederatedDataset:
    """The federated dataset ``spec`` describes (deterministic given ``spec.seed`` and ``replicate``).

    ``replicate`` (a run seed, for ``spec.per_seed``) keys an independent realization; ``None``
    gives the realization of ``spec.seed`` alone.

    >>> fed = build_federation(FederationSpec(dataset="mnist1d", partition="iid", num_clients=10, num_samples=500))
    >>> fed.num_clients, int(fed.train_sizes().sum()) + int(fed.test_sizes().sum()) <= 500
    (10, True)
    """
    check_param("replicate", "build_federation", replicate, NoneOr(Interval(int, 0, None, closed="left")))
    # The leading 1 keeps replicate 0 apart from the shared realization: numpy's seed sequences pad
    # their entropy with zeros, so the key (seed, stream, 0) would draw what (seed, stream) draws.
    keys = () if replicate is None else (1, replicate)
    rng = stream_rng(spec.seed, Stream.PARTITION, *keys)
    if is_python_data(spec.dataset):
        raise FedsampleError(
            f"The 'dataset' parameter of build_federation names data given from Python ({spec.dataset!r}), which "
            "no file can rebuild: run it from Python, fedsample.experiments.run_comparison(data, model, ...).",
            parameter="dataset",
        )
    if spec.dataset == "osmd-linear":
        return make_osmd_linear_regression(num_clients=spec.num_clients, sigma=spec.sigma, rng=rng)
    if spec.dataset in ("shakespeare", "femnist"):
        from fedsample.data.loaders import load_leaf, load_shakespeare_plays
        from fedsample.data.loaders.shakespeare_plays import is_plays_source

        base = str(spec.path)
        if spec.dataset == "shakespeare" and is_plays_source(base):
            return load_shakespeare_plays(base, rng=rng, num_clients=spec.num_clients)
        if spec.dataset == "shakespeare" and not os.path.isdir(f"{base}/train"):
            raise invalid("path", "FederationSpec", PATH_NEEDED["shakespeare"], spec.path)
        return load_leaf(f"{base}/train", kind=spec.dataset, test_directory=f"{base}/test")
    table = files.read_data_file(spec) if is_data_file(spec.dataset) else None
    if table is not None and table.client_names is not None:
        return files.natural_federation(spec, table, default_fraction=DEFAULT_TEST_FRACTION, rng=rng)
    train, test, own_split = _centralised(spec, table, rng)
    partition = _partition(spec, train, rng)
    num_classes = train.num_classes if train.num_classes is not None else 1
    test_partition = None
    if test is not None and spec.test_fraction is None and own_split:
        test_partition = partitioners.partition_test_split(
            partition, _labels(train), _labels(test), num_classes=num_classes, rng=rng
        )
    elif test is not None and _test_fraction(spec) > 0:
        fraction = _test_fraction(spec)
        if not own_split:  # a held-out pool: fits the fraction overall, rounding per client may ask a few more
            fraction = _fitting_fraction(fraction, partition.sizes(), test.num_samples)
        if int(np.rint(fraction * partition.sizes()).sum()) > len(test.targets):
            raise invalid(
                "test_fraction",
                "FederationSpec",
                f"small enough that the {len(test.targets)} rows of the {spec.dataset} test split cover "
                f"{fraction:g} of the {int(partition.sizes().sum())} training rows (or None: the whole split)",
                spec.test_fraction,
            )
        test_partition = partitioners.partition_test_like(
            partition, _labels(train), _labels(test), fraction=fraction, num_classes=num_classes, rng=rng
        )
    return federate(
        train,
        partition,
        test=test if test_partition is not None else None,
        test_partition=test_partition,
        name=None if table is None else table.name,
    )


def _fitting_fraction(fraction: float, sizes: np.ndarray, available: int) -> float:
    """``fraction``, or where the clients' rounded test rows ``rint(fraction n_i)`` would exceed the
    ``available`` held-out rows (small data sets, many clients), the largest smaller fraction that fits."""
    if int(np.rint(fraction * sizes).sum()) <= available:
        return fraction
    low, high = 0.0, fraction
    for _ in range(60):  # rint(f n_i) grows with f: bisect to float precision
        middle = (low + high) / 2
        low, high = (middle, high) if int(np.rint(middle * sizes).sum()) <= available else (low, middle)
    return low


def _labels(data: ArrayDataset) -> np.ndarray:
    """The rows' class labels; a regression data set's rows all get label 0, so that its test rows
    are shared by training size alone."""
    return data.targets if data.task == "classification" else np.zeros(data.num_samples, dtype=np.int64)


def _test_fraction(spec: FederationSpec) -> float:
    return DEFAULT_TEST_FRACTION if spec.test_fraction is None else spec.test_fraction


def _centralised(
    spec: FederationSpec, table: Table | None, rng: np.random.Generator
) -> tuple[ArrayDataset, ArrayDataset | None, bool]:
    """The training data, a test set to draw the clients' test rows from, and whether that set is
    the data set's own test split (IDX, CIFAR-10, a data file's test rows) rather than a held-out pool."""
    if table is not None:
        data, own_test = files.centralised_data(spec, table)
        if own_test is not None:
            return data, own_test, True
    elif spec.dataset in ("mnist", "fashion-mnist", "kmnist"):
        from fedsample.data.loaders import load_idx_dataset

        return (*load_idx_dataset(str(spec.path), kind=spec.dataset), True)
    elif spec.dataset == "cifar10":
        from fedsample.data.loaders import load_cifar10

        return (*load_cifar10(str(spec.path)), True)
    else:
        data = load_digits() if spec.dataset == "digits" else make_mnist1d(spec.num_samples, rng=rng)
    fraction = _test_fraction(spec)
    if fraction == 0:
        return data, None, False
    # Hold out a test pool whose share lets every client get test_fraction of its training size.
    order = rng.permutation(len(data.targets))
    num_test = round(len(order) * fraction / (1 + fraction))
    return _rows(data, order[num_test:], "train"), _rows(data, order[:num_test], "test"), False


def _rows(data: ArrayDataset, rows: np.ndarray, part: str) -> ArrayDataset:
    return ArrayDataset(
        features=data.features[rows],
        targets=data.targets[rows],
        task=data.task,
        num_classes=data.num_classes,
        name=f"{data.name}/{part}",
    )


def _partition(spec: FederationSpec, train: ArrayDataset, rng: np.random.Generator) -> Partition:
    labels = np.asarray(train.targets)
    count = labels.size
    n = spec.num_clients
    if spec.sizes is not None:
        sizes = builtin_sizes(spec.sizes, seed=spec.seed)
    else:
        if count < n:  # every client needs a training row
            raise invalid("num_clients", "FederationSpec", f"at most {count}, the training rows of {spec.dataset}", n)
        sizes = np.full(n, count // n, dtype=np.int64)
    if spec.partition in ("iid", "dirichlet") and int(sizes.sum()) > count:
        raise invalid(
            "sizes", "FederationSpec", f"summing to at most the {count} training rows of {spec.dataset}", spec.sizes
        )
    kind: Any = spec.partition
    if kind == "iid":
        return (
            partitioners.partition_iid(count, num_clients=n, rng=rng)
            if spec.sizes is None
            else _by_sizes(count, sizes, rng)
        )
    if kind == "dirichlet":
        return partitioners.partition_dirichlet(
            labels, alpha=spec.alpha, sizes=sizes, num_classes=train.num_classes, rng=rng
        )
    if kind == "one-label":
        return partitioners.partition_one_label_per_client(
            labels, num_clients=n, num_classes=train.num_classes, rng=rng
        )
    if kind == "lognormal":
        return _by_sizes(count, lognormal_sizes(n, sigma=spec.lognormal_sigma, total=count, rng=rng), rng)
    return _by_sizes(count, _fit(osmd_skewed_sizes(n, rng=rng), count), rng)


def _by_sizes(count: int, sizes: np.ndarray, rng: np.random.Generator) -> Partition:
    return partitioners.partition_by_sizes(count, sizes, rng=rng)


def _fit(sizes: np.ndarray, count: int) -> np.ndarray:
    """Scale sizes down (keeping at least one row each) when the data set is too small for them."""
    if int(sizes.sum()) <= count:
        return sizes
    scaled: np.ndarray = np.maximum(1, np.floor(sizes * (count / sizes.sum()))).astype(np.int64)
    if int(scaled.sum()) > count:
        raise invalid("num_clients", "FederationSpec", f"at most {count} for this data set", sizes.size)
    return scaled
