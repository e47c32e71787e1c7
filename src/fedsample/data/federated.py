"""A federated dataset: training (and test) rows grouped by client, ready for the engine.

Rows of client ``i`` are the contiguous block ``indptr[i]:indptr[i + 1]`` of the pooled arrays,
so the engine can gather a selection's data with one index operation instead of a Python loop.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, IntArray
from fedsample._validation import invalid
from fedsample.data._checks import frozen_view
from fedsample.data.dataset import ArrayDataset, Task, check_arrays
from fedsample.data.partition import Partition, label_histogram, render_table
from fedsample.errors import FedsampleError
from fedsample.federation import Federation, ImportanceMode

__all__ = ["FederatedDataset", "FederationSummary", "federate"]


def _check_indptr(indptr: npt.ArrayLike, num_rows: int, name: str, owner: str) -> IntArray:
    constraint = f"a non-decreasing int array of at least 2 entries from 0 to {num_rows} (the number of rows)"
    raw = np.asarray(indptr)
    if raw.ndim != 1 or raw.size < 2 or raw.dtype.kind not in "iu":
        raise invalid(name, owner, constraint, raw)
    values = raw.astype(np.int64)
    if values[0] != 0 or values[-1] != num_rows or np.any(np.diff(values) < 0):
        raise invalid(name, owner, constraint, values)
    return frozen_view(values)


def _largest_label(*arrays: npt.ArrayLike) -> int:
    largest = -1
    for values in arrays:
        array = np.asarray(values)
        if array.size and array.dtype.kind in "iuf" and np.all(np.isfinite(array)):
            largest = max(largest, int(array.max()))
    return largest


@dataclass(frozen=True, eq=False)
class FederatedDataset:
    """Training and test data of ``n`` clients, pooled by client.

    Build one with :func:`federate` (a centralised dataset and a :class:`Partition`), with a
    loader for naturally federated data (LEAF, tables with a client column), or directly.

    Attributes
    ----------
    train_features, train_targets:
        Pooled training rows; client ``i`` owns rows ``train_indptr[i]:train_indptr[i + 1]``.
    train_indptr:
        ``(n + 1,)`` int64 offsets. Every client has at least one training row.
    test_features, test_targets, test_indptr:
        The same for per-client test rows; a client may have none.
    num_classes:
        Number of classes, ``None`` for regression.
    task:
        ``"classification"`` or ``"regression"``.
    name:
        A short description (``"mnist/one-label-per-client"``).
    client_names:
        Names of the clients (LEAF users, table client ids), or ``None``.
    metadata:
        Arrays describing how synthetic data were generated (true parameters...); may be empty.

    >>> import numpy as np
    >>> data = FederatedDataset(
    ...     train_features=np.zeros((3, 2)), train_targets=[0, 1, 1], train_indptr=[0, 1, 3],
    ...     test_features=np.zeros((0, 2)), test_targets=np.zeros(0, dtype=int), test_indptr=[0, 0, 0],
    ... )
    >>> data.num_clients, data.train_sizes().tolist(), data.federation().importances.tolist()
    (2, [1, 2], [0.3333333333333333, 0.6666666666666666])
    """

    train_features: npt.NDArray[Any]
    train_targets: npt.NDArray[Any]
    train_indptr: IntArray
    test_features: npt.NDArray[Any]
    test_targets: npt.NDArray[Any]
    test_indptr: IntArray
    num_classes: int | None = None
    task: Task = "classification"
    name: str = "federation"
    client_names: tuple[str, ...] | None = None
    metadata: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "FederatedDataset"
        num_classes = self.num_classes
        if self.task == "classification" and num_classes is None:
            # Test labels may include a class that no training row has: count both splits.
            num_classes = _largest_label(self.train_targets, self.test_targets) + 1 or None
        x, y, num_classes = check_arrays(
            self.train_features,
            self.train_targets,
            task=self.task,
            num_classes=num_classes,
            owner=owner,
            prefix="train_",
        )
        tx, ty, _ = check_arrays(
            self.test_features, self.test_targets, task=self.task, num_classes=num_classes, owner=owner, prefix="test_"
        )
        if tx.shape[1:] != x.shape[1:] or tx.dtype != x.dtype:
            raise invalid(
                "test_features",
                owner,
                f"of sample shape {x.shape[1:]} and dtype {x.dtype} like train_features",
                f"shape {tx.shape[1:]} and dtype {tx.dtype}",
            )
        train_indptr = _check_indptr(self.train_indptr, x.shape[0], "train_indptr", owner)
        test_indptr = _check_indptr(self.test_indptr, tx.shape[0], "test_indptr", owner)
        if test_indptr.size != train_indptr.size:
            raise invalid("test_indptr", owner, f"of length {train_indptr.size} like train_indptr", test_indptr.size)
        empty = np.flatnonzero(np.diff(train_indptr) == 0)
        if empty.size:
            raise FedsampleError(
                f"Every client of {owner} must have at least one training sample. "
                f"Got {empty.size} empty clients (first: client {int(empty[0])}) instead.",
                parameter="train_indptr",
            )
        names = self.client_names
        if names is not None:
            names = tuple(str(v) for v in names)
            if len(names) != train_indptr.size - 1:
                raise invalid("client_names", owner, f"of length {train_indptr.size - 1}", len(names))
        metadata = {str(k): frozen_view(np.asarray(v)) for k, v in dict(self.metadata).items()}
        for key, value in {
            "train_features": x,
            "train_targets": y,
            "train_indptr": train_indptr,
            "test_features": tx,
            "test_targets": ty,
            "test_indptr": test_indptr,
            "num_classes": num_classes,
            "client_names": names,
            "metadata": metadata,
        }.items():
            object.__setattr__(self, key, value)

    @property
    def num_clients(self) -> int:
        return int(self.train_indptr.size - 1)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample's features."""
        return tuple(int(s) for s in self.train_features.shape[1:])

    def train_sizes(self) -> IntArray:
        """``n_i``: the number of training samples of each client."""
        return np.diff(self.train_indptr)

    def test_sizes(self) -> IntArray:
        """Number of test samples of each client (possibly zero)."""
        return np.diff(self.test_indptr)

    def federation(self, *, importance: ImportanceMode = "size") -> Federation:
        """The sampler's view: training sizes, importances ``n_i / M`` (``"size"``) or ``1 / n``."""
        return Federation.from_sizes(self.train_sizes(), importance=importance)

    def _check_client(self, i: int, owner: str) -> int:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= i < self.num_clients:
            raise invalid("i", owner, f"an int in the range [0, {self.num_clients - 1}]", i)
        return int(i)

    def client_train(self, i: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Features and targets of client ``i``'s training rows (read-only views)."""
        i = self._check_client(i, "FederatedDataset.client_train")
        lo, hi = self.train_indptr[i], self.train_indptr[i + 1]
        return self.train_features[lo:hi], self.train_targets[lo:hi]

    def client_test(self, i: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Features and targets of client ``i``'s test rows (read-only views; possibly empty)."""
        i = self._check_client(i, "FederatedDataset.client_test")
        lo, hi = self.test_indptr[i], self.test_indptr[i + 1]
        return self.test_features[lo:hi], self.test_targets[lo:hi]

    def train_clients(self) -> IntArray:
        """The client id of every training row."""
        return np.repeat(np.arange(self.num_clients, dtype=np.int64), self.train_sizes())

    @functools.cached_property
    def label_counts(self) -> IntArray:
        """``(n, C)`` counts of each training label per client (classification only)."""
        if self.num_classes is None:
            raise FedsampleError(f"label_counts needs a classification task; {self.name!r} is a regression task.")
        counts = label_histogram(self.train_clients(), self.train_targets, self.num_clients, self.num_classes)
        return frozen_view(counts)

    @property
    def label_presence(self) -> BoolArray:
        """``(n, C)`` whether client ``i`` holds training samples of label ``c``."""
        return frozen_view(self.label_counts > 0)

    def label_sets(self) -> tuple[IntArray, ...]:
        """The distinct training labels of each client, in increasing order."""
        presence = self.label_presence
        return tuple(np.flatnonzero(row).astype(np.int64) for row in presence)

    def distinct_labels(self, clients: npt.ArrayLike) -> int:
        """How many distinct labels the union of ``clients``' training data holds (repeats allowed).

        >>> import numpy as np
        >>> data = FederatedDataset(
        ...     train_features=np.zeros((4, 1)), train_targets=[0, 0, 1, 2], train_indptr=[0, 1, 2, 4],
        ...     test_features=np.zeros((0, 1)), test_targets=np.zeros(0, dtype=int), test_indptr=[0, 0, 0, 0],
        ... )
        >>> data.distinct_labels([0, 1, 1]), data.distinct_labels([2])
        (1, 2)
        """
        ids = np.asarray(clients)
        if ids.ndim != 1 or (
            ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= self.num_clients)
        ):
            raise invalid(
                "clients",
                "FederatedDataset.distinct_labels",
                f"a 1-D array of client ids in [0, {self.num_clients})",
                ids,
            )
        if ids.size == 0:
            return 0
        return int(self.label_presence[ids.astype(np.int64)].any(axis=0).sum())

    def summary(self) -> FederationSummary:
        """Per-client training and test sizes and label histograms."""
        test_counts = None
        if self.num_classes is not None:
            test_clients = np.repeat(np.arange(self.num_clients, dtype=np.int64), self.test_sizes())
            test_counts = label_histogram(test_clients, self.test_targets, self.num_clients, self.num_classes)
        return FederationSummary(
            name=self.name,
            task=self.task,
            train_sizes=self.train_sizes(),
            test_sizes=self.test_sizes(),
            label_counts=None if self.num_classes is None else np.array(self.label_counts),
            test_label_counts=test_counts,
        )


@dataclass(frozen=True, eq=False, repr=False)
class FederationSummary:
    """Per-client sizes and label histograms of a :class:`FederatedDataset`.

    Attributes
    ----------
    train_sizes, test_sizes:
        ``(n,)`` number of training and test samples per client.
    label_counts, test_label_counts:
        ``(n, C)`` label histograms of the training and test rows (``None`` for regression).
    """

    name: str
    task: Task
    train_sizes: IntArray
    test_sizes: IntArray
    label_counts: IntArray | None
    test_label_counts: IntArray | None

    @property
    def num_clients(self) -> int:
        return int(self.train_sizes.size)

    def text(self) -> str:
        """A short human-readable rendering."""
        columns = {"train samples": self.train_sizes, "test samples": self.test_sizes}
        return render_table(f"{self.name} ({self.task})", columns, self.label_counts)

    def __repr__(self) -> str:  # a notebook shows the table, not the arrays (print() shows it too)
        return self.text()

    __str__ = __repr__


def federate(
    dataset: ArrayDataset,
    partition: Partition,
    *,
    test: ArrayDataset | None = None,
    test_partition: Partition | None = None,
    name: str | None = None,
    client_names: Sequence[str] | None = None,
) -> FederatedDataset:
    """Group the rows of ``dataset`` by client following ``partition`` (and likewise for ``test``).

    Parameters
    ----------
    dataset:
        The centralised training data.
    partition:
        Rows of ``dataset`` per client; every client needs at least one row.
    test, test_partition:
        Test data and its split among the same clients (give both or neither). Without them the
        clients have no test rows.
    name:
        Name of the result; defaults to ``"<dataset name>/<partition name>"``.
    client_names:
        Optional names of the clients.

    >>> import numpy as np
    >>> data = ArrayDataset(features=np.arange(8.0).reshape(4, 2), targets=[0, 1, 0, 1], name="toy")
    >>> fed = federate(data, Partition.from_lists([[3, 0], [1, 2]], num_samples=4, name="manual"))
    >>> fed.name, fed.client_train(0)[1].tolist()
    ('toy/manual', [1, 0])
    """
    owner = "federate"
    if not isinstance(dataset, ArrayDataset):
        raise invalid("dataset", owner, "an ArrayDataset", dataset)
    if not isinstance(partition, Partition):
        raise invalid("partition", owner, "a Partition", partition)
    if partition.num_samples != dataset.num_samples:
        raise invalid("partition", owner, f"a Partition of num_samples = {dataset.num_samples}", partition.num_samples)
    if (test is None) != (test_partition is None):
        raise invalid("test_partition", owner, "given together with 'test' (both or neither)", test_partition)
    rows = partition.indices
    if test is None or test_partition is None:
        test_x = dataset.features[:0]
        test_y = dataset.targets[:0]
        test_indptr: IntArray = np.zeros(partition.num_clients + 1, dtype=np.int64)
    else:
        if not isinstance(test, ArrayDataset):
            raise invalid("test", owner, "an ArrayDataset", test)
        if not isinstance(test_partition, Partition):
            raise invalid("test_partition", owner, "a Partition", test_partition)
        if test_partition.num_samples != test.num_samples or test_partition.num_clients != partition.num_clients:
            raise invalid(
                "test_partition",
                owner,
                f"a Partition of {partition.num_clients} clients over num_samples = {test.num_samples}",
                f"{test_partition.num_clients} clients over {test_partition.num_samples} samples",
            )
        if test.task != dataset.task:
            raise invalid("test", owner, f"a {dataset.task} dataset like 'dataset'", test.task)
        test_x = test.features[test_partition.indices]
        test_y = test.targets[test_partition.indices]
        test_indptr = test_partition.indptr
    num_classes = dataset.num_classes
    if num_classes is not None and test is not None and test.num_classes is not None:
        num_classes = max(num_classes, test.num_classes)
    return FederatedDataset(
        train_features=dataset.features[rows],
        train_targets=dataset.targets[rows],
        train_indptr=partition.indptr,
        test_features=test_x,
        test_targets=test_y,
        test_indptr=test_indptr,
        num_classes=num_classes,
        task=dataset.task,
        name=f"{dataset.name}/{partition.name}" if name is None else name,
        client_names=None if client_names is None else tuple(client_names),
    )
