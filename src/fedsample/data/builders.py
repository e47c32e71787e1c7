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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedsample._validation import (
    Boolean,
    Constraint,
    Interval,
    NoneOr,
    Options,
    Text,
    check_param,
    check_params,
    invalid,
)
from fedsample.data import partitioners
from fedsample.data.dataset import ArrayDataset
from fedsample.data.digits import load_digits
from fedsample.data.federated import FederatedDataset, federate
from fedsample.data.mnist1d import make_mnist1d
from fedsample.data.partition import Partition
from fedsample.data.sizes import lognormal_sizes, osmd_skewed_sizes
from fedsample.data.synthetic import make_osmd_linear_regression
from fedsample.federation import BUILTIN_FEDERATIONS, builtin_sizes
from fedsample.rng import Stream, stream_rng

__all__ = ["DATASETS", "DEFAULT_TEST_FRACTION", "PARTITIONS", "FederationSpec", "build_federation"]

DATASETS = ("digits", "mnist1d", "osmd-linear", "mnist", "fashion-mnist", "kmnist", "cifar10", "shakespeare", "femnist")
PARTITIONS = ("iid", "dirichlet", "one-label", "lognormal", "osmd-skewed", "natural")
# Test rows per training row for data sets without their own test split (paper 000: a fifth).
DEFAULT_TEST_FRACTION = 0.2
_FILE_BACKED = ("mnist", "fashion-mnist", "kmnist", "cifar10", "shakespeare", "femnist")


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
    partition:
        ``iid``, ``dirichlet`` (label mixtures of concentration ``alpha``), ``one-label``
        (000's MNIST split), ``lognormal`` (004's sizes, ``lognormal_sigma``), ``osmd-skewed``
        (001's sizes) or ``natural`` (the data's own clients).
    sizes:
        A built-in size list (``unbalanced``...) for ``dirichlet`` and ``iid`` instead of equal sizes.
    test_fraction:
        ``None`` (default): the data set's own test split, whole, when it has one (IDX, CIFAR-10),
        else test rows a fifth of each client's training size. A number in ``[0, 1)``: test rows
        that fraction of each client's training size, with its label proportions, for any data
        set (drawn from the own split when there is one; 0 gives no test rows).
    path:
        The directory of a file-backed data set. ``None`` for ``fashion-mnist`` means the directory
        where the Debian package ``dataset-fashion-mnist`` installs it,
        ``/usr/share/datasets/fashion-mnist``.
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
    seed: int = 0
    per_seed: bool = False

    # Every field's constraint, checked in this order (fedsample._params.declared reads it with the defaults).
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "dataset": Options(DATASETS),
        "partition": Options(PARTITIONS),
        "num_clients": Interval(int, 1, None, closed="left"),
        "alpha": Interval(float, 0, math.inf, closed="neither"),
        "sizes": NoneOr(Options(tuple(BUILTIN_FEDERATIONS))),
        "test_fraction": NoneOr(Interval(float, 0, 1, closed="left")),
        "num_samples": Interval(int, 10, None, closed="left"),
        "sigma": Interval(float, 0, None, closed="left"),
        "lognormal_sigma": Interval(float, 0, None, closed="left"),
        "path": NoneOr(Text("a string")),
        "seed": Interval(int, 0, None, closed="left"),
        "per_seed": Boolean(),
    }

    def __post_init__(self) -> None:
        owner = "FederationSpec"
        constraints = self._parameter_constraints
        check_params(owner, {name: getattr(self, name) for name in constraints}, constraints)
        natural = self.dataset in ("osmd-linear", "shakespeare", "femnist")
        if natural != (self.partition == "natural"):
            need = "'natural'" if natural else "not 'natural'"
            raise invalid("partition", owner, f"{need} for the dataset {self.dataset!r}", self.partition)
        if self.dataset in _FILE_BACKED and self.path is None:
            from fedsample.data.loaders.idx import PACKAGED_DIRECTORIES

            # Frozen: the packaged default is filled in once, so that a resolved config names it.
            object.__setattr__(self, "path", PACKAGED_DIRECTORIES.get(self.dataset))
        if self.dataset in _FILE_BACKED and not self.path:
            raise invalid("path", owner, f"the directory holding the {self.dataset} files", self.path)


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
    if spec.dataset == "osmd-linear":
        return make_osmd_linear_regression(num_clients=spec.num_clients, sigma=spec.sigma, rng=rng)
    if spec.dataset in ("shakespeare", "femnist"):
        from fedsample.data.loaders import load_leaf

        base = str(spec.path)
        return load_leaf(f"{base}/train", kind=spec.dataset, test_directory=f"{base}/test")
    train, test = _centralised(spec, rng)
    partition = _partition(spec, train, rng)
    test_partition = None
    if test is not None and spec.test_fraction is None and spec.dataset in _FILE_BACKED:
        test_partition = partitioners.partition_test_split(
            partition, train.targets, test.targets, num_classes=train.num_classes, rng=rng
        )
    elif test is not None and _test_fraction(spec) > 0:
        fraction = _test_fraction(spec)
        if int(np.rint(fraction * partition.sizes()).sum()) > len(test.targets):
            raise invalid(
                "test_fraction",
                "FederationSpec",
                f"small enough that the {len(test.targets)} rows of the {spec.dataset} test split cover "
                f"{fraction:g} of the {int(partition.sizes().sum())} training rows (or None: the whole split)",
                spec.test_fraction,
            )
        test_partition = partitioners.partition_test_like(
            partition, train.targets, test.targets, fraction=fraction, num_classes=train.num_classes, rng=rng
        )
    return federate(train, partition, test=test if test_partition is not None else None, test_partition=test_partition)


def _test_fraction(spec: FederationSpec) -> float:
    return DEFAULT_TEST_FRACTION if spec.test_fraction is None else spec.test_fraction


def _centralised(spec: FederationSpec, rng: np.random.Generator) -> tuple[ArrayDataset, ArrayDataset | None]:
    """The training data and a test set to draw the clients' test rows from."""
    if spec.dataset in ("mnist", "fashion-mnist", "kmnist"):
        from fedsample.data.loaders import load_idx_dataset

        return load_idx_dataset(str(spec.path), kind=spec.dataset)
    if spec.dataset == "cifar10":
        from fedsample.data.loaders import load_cifar10

        return load_cifar10(str(spec.path))
    data = load_digits() if spec.dataset == "digits" else make_mnist1d(spec.num_samples, rng=rng)
    fraction = _test_fraction(spec)
    if fraction == 0:
        return data, None
    # Hold out a test pool whose share lets every client get test_fraction of its training size.
    order = rng.permutation(len(data.targets))
    num_test = round(len(order) * fraction / (1 + fraction))
    return _rows(data, order[num_test:], "train"), _rows(data, order[:num_test], "test")


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
