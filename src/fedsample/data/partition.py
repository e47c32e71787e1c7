"""Which samples each client owns: a CSR partition of dataset rows, and its label summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._validation import invalid
from fedsample.data._checks import as_labels, frozen_view, infer_num_classes

__all__ = ["Partition", "PartitionSummary", "label_histogram", "render_table", "summarise"]


def _as_index_array(values: npt.ArrayLike, name: str, owner: str) -> IntArray:
    constraint = "a 1-D array of non-negative integers"
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise invalid(name, owner, constraint, values) from exc
    if raw.ndim != 1 or (raw.size and (raw.dtype.kind not in "iu")):
        raise invalid(name, owner, constraint, values)
    array = raw.astype(np.int64)
    if array.size and array.min() < 0:
        raise invalid(name, owner, constraint, array)
    return array


@dataclass(frozen=True, eq=False)
class Partition:
    """Rows of a dataset assigned to clients, in compressed sparse row form.

    Client ``i`` owns rows ``indices[indptr[i]:indptr[i + 1]]`` of a dataset of ``num_samples``
    rows. A partition may leave rows unused; the partitioners of :mod:`fedsample.data.partitioners`
    never give a row to two clients, but the type does not forbid it (see :meth:`is_disjoint`).

    Attributes
    ----------
    indptr:
        ``(n + 1,)`` int64, non-decreasing, from 0 to ``len(indices)``.
    indices:
        Row indices into the dataset, int64 in ``[0, num_samples)``.
    num_samples:
        Number of rows of the dataset the partition refers to.
    name:
        How the partition was made (``"dirichlet(alpha=0.1)"``), used in summaries.

    >>> part = Partition.from_lists([[0, 2], [1]], num_samples=4)
    >>> part.sizes().tolist(), part.client(0).tolist(), part.covers_all()
    ([2, 1], [0, 2], False)
    """

    indptr: IntArray
    indices: IntArray
    num_samples: int
    name: str = "partition"

    def __post_init__(self) -> None:
        owner = "Partition"
        indptr = _as_index_array(self.indptr, "indptr", owner)
        indices = _as_index_array(self.indices, "indices", owner)
        if not isinstance(self.num_samples, (int, np.integer)) or isinstance(self.num_samples, bool):
            raise invalid("num_samples", owner, "an int in the range [0, inf)", self.num_samples)
        if self.num_samples < 0:
            raise invalid("num_samples", owner, "an int in the range [0, inf)", self.num_samples)
        if indptr.size < 2 or indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
            raise invalid(
                "indptr",
                owner,
                f"a non-decreasing array of at least 2 entries from 0 to len(indices) = {indices.size}",
                indptr,
            )
        if indices.size and indices.max() >= self.num_samples:
            raise invalid("indices", owner, f"row indices in [0, num_samples) = [0, {self.num_samples})", indices)
        object.__setattr__(self, "indptr", frozen_view(indptr))
        object.__setattr__(self, "indices", frozen_view(indices))
        object.__setattr__(self, "num_samples", int(self.num_samples))

    @classmethod
    def from_lists(cls, parts: Sequence[npt.ArrayLike], *, num_samples: int, name: str = "partition") -> Partition:
        """A partition from one sequence of row indices per client."""
        arrays = [_as_index_array(p, "parts", "Partition.from_lists") for p in parts]
        if not arrays:
            raise invalid("parts", "Partition.from_lists", "a non-empty sequence of index arrays", parts)
        sizes = np.array([a.size for a in arrays], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return cls(indptr=indptr, indices=np.concatenate(arrays), num_samples=num_samples, name=name)

    @classmethod
    def from_assignment(
        cls, client_of_row: npt.ArrayLike, *, num_clients: int | None = None, name: str = "partition"
    ) -> Partition:
        """A partition from the client id of every row (``-1`` leaves a row unused); rows keep their order."""
        owner = "Partition.from_assignment"
        raw = np.asarray(client_of_row)
        if raw.ndim != 1 or raw.dtype.kind not in "iu" or (raw.size and raw.min() < -1):
            raise invalid("client_of_row", owner, "a 1-D array of client ids (>= 0, or -1 for unused rows)", raw)
        assignment = raw.astype(np.int64)
        largest = int(assignment.max()) if assignment.size else -1
        n = largest + 1 if num_clients is None else int(num_clients)
        if n < 1 or n <= largest:
            raise invalid("num_clients", owner, f"an int larger than the largest client id ({largest})", num_clients)
        used = np.flatnonzero(assignment >= 0)
        order = used[np.argsort(assignment[used], kind="stable")]
        counts = np.bincount(assignment[used], minlength=n)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(indptr=indptr, indices=order, num_samples=int(assignment.size), name=name)

    @property
    def num_clients(self) -> int:
        return int(self.indptr.size - 1)

    def sizes(self) -> IntArray:
        """Number of rows of each client."""
        return np.diff(self.indptr)

    def client(self, i: int) -> IntArray:
        """Row indices of client ``i``."""
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_clients:
            raise invalid("i", "Partition.client", f"an int in the range [0, {self.num_clients - 1}]", i)
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    def client_of_rows(self) -> IntArray:
        """The client of each entry of :attr:`indices` (aligned with it)."""
        return np.repeat(np.arange(self.num_clients, dtype=np.int64), self.sizes())

    def is_disjoint(self) -> bool:
        """Whether no row belongs to two clients (or twice to one)."""
        return bool(np.unique(self.indices).size == self.indices.size)

    def covers_all(self) -> bool:
        """Whether every row of the dataset belongs to some client."""
        return bool(np.unique(self.indices).size == self.num_samples)

    def summary(self, labels: npt.ArrayLike | None = None, *, num_classes: int | None = None) -> PartitionSummary:
        """Client sizes and, when ``labels`` are given, the per-client label histogram."""
        return summarise(self, labels, num_classes=num_classes)


@dataclass(frozen=True, eq=False)
class PartitionSummary:
    """Per-client sizes and label histogram of a partition.

    Attributes
    ----------
    sizes:
        ``(n,)`` number of rows of each client.
    label_counts:
        ``(n, C)`` int64 counts of each label per client, or ``None`` when no labels were given.
    name:
        The partition's name.
    """

    sizes: IntArray
    label_counts: IntArray | None
    name: str

    @property
    def num_clients(self) -> int:
        return int(self.sizes.size)

    def distinct_labels(self) -> IntArray | None:
        """Number of distinct labels held by each client."""
        return None if self.label_counts is None else (self.label_counts > 0).sum(axis=1)

    def text(self) -> str:
        """A short human-readable rendering."""
        return render_table(self.name, {"samples": self.sizes}, self.label_counts)

    def __str__(self) -> str:
        return self.text()


def summarise(
    partition: Partition, labels: npt.ArrayLike | None = None, *, num_classes: int | None = None
) -> PartitionSummary:
    """Client sizes of ``partition`` and, given the dataset's ``labels``, each client's label histogram.

    >>> part = Partition.from_lists([[0, 1], [2]], num_samples=3)
    >>> summarise(part, [0, 1, 1]).label_counts.tolist()
    [[1, 1], [0, 1]]
    """
    owner = "summarise"
    if not isinstance(partition, Partition):
        raise invalid("partition", owner, "a Partition", partition)
    if labels is None:
        return PartitionSummary(sizes=partition.sizes(), label_counts=None, name=partition.name)
    y = as_labels(labels, owner)
    if y.size != partition.num_samples:
        raise invalid("labels", owner, f"of length num_samples = {partition.num_samples}", y.size)
    classes = infer_num_classes(y, num_classes, owner)
    counts = label_histogram(partition.client_of_rows(), y[partition.indices], partition.num_clients, classes)
    return PartitionSummary(sizes=partition.sizes(), label_counts=counts, name=partition.name)


def label_histogram(clients: IntArray, labels: IntArray, num_clients: int, num_classes: int) -> IntArray:
    """``(n, C)`` counts of each (client, label) pair."""
    flat = np.bincount(clients * num_classes + labels, minlength=num_clients * num_classes)
    return flat.reshape(num_clients, num_classes).astype(np.int64)


def _describe(values: IntArray) -> str:
    if values.size == 0:
        return "-"
    median = float(np.median(values))
    return f"total {int(values.sum())}, min {int(values.min())}, median {median:g}, max {int(values.max())}"


def render_table(name: str, columns: dict[str, IntArray], label_counts: IntArray | None) -> str:
    """The text rendering shared by partition and federation summaries."""
    num_clients = next(iter(columns.values())).size
    lines = [f"{name}: {num_clients} clients"]
    lines += [f"  {key} per client: {_describe(values)}" for key, values in columns.items()]
    if label_counts is not None:
        distinct = (label_counts > 0).sum(axis=1)
        lines.append(
            f"  labels: {label_counts.shape[1]} classes; distinct per client min {int(distinct.min())}, "
            f"mean {float(distinct.mean()):.2f}, max {int(distinct.max())}"
        )
    return "\n".join(lines)
