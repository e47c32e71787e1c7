"""Tables with one row per sample (CSV, NPZ or Parquet): features, targets and, optionally, clients.

:func:`read_table` reads a data file into a :class:`Table`; :func:`load_table` gives the clients of
a table with a client column as a :class:`~fedsample.data.FederatedDataset`.

Columns. The target is one 1-D numeric column. A client column, when the file has one, names each
row's client (integers or strings, kept exactly: :mod:`~fedsample.data.loaders._clients`); clients
are its distinct values in sorted order, and a client's rows keep their file order. No file may name
a column twice. Feature columns default to every numeric column other than the client
and target columns, in file order. An NPZ member may be N-dimensional (``(N, ...)``, a feature
block); ``<col>_train`` and ``<col>_test`` members are a column and its test rows.

Features. One feature column keeps its shape (an ``N x C x H x W`` image array stays 4-D, an
``N x L`` array of token ids stays 2-D; a 1-D column becomes ``(N, 1)``); several are each flattened
to ``(N, k)`` and concatenated to ``(N, F)``. uint8 values are pixels and become float32 in
``[0, 1]``; a single integer feature block of another integer dtype stays integer (int64 token ids
for an embedding); everything else becomes float32. Every value must be finite.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._validation import Options, check_param, invalid
from fedsample.data.dataset import ArrayDataset, Task
from fedsample.data.federated import FederatedDataset, federate
from fedsample.data.loaders._columns import (
    Columns,
    check_lengths,
    file_columns,
    file_format,
    format_suffixes,
    header,
    split_members,
)
from fedsample.data.loaders._files import malformed
from fedsample.data.loaders._rows import MAX_CLASS_ID, ColumnReader
from fedsample.data.partition import Partition

__all__ = ["MAX_CLASS_ID", "TASKS", "Table", "TableRows", "column_names", "load_table", "read_columns", "read_table"]

TASKS = ("auto", "classification", "regression")


@dataclass(frozen=True, eq=False)
class TableRows:
    """Rows of a table: features ``(N, ...)``, targets ``(N,)`` and each row's client (an index into
    :attr:`Table.client_names`; ``None`` for a table without a client column)."""

    features: npt.NDArray[Any]
    targets: npt.NDArray[Any]
    clients: IntArray | None


@dataclass(frozen=True, eq=False)
class Table:
    """A data file read: its training rows, its own test rows (``None`` when it has none), the task,
    the number of classes (``None`` for regression) and the clients (``None`` without a client column)."""

    name: str
    columns: tuple[str, ...]
    task: Task
    num_classes: int | None
    train: TableRows
    test: TableRows | None
    client_names: tuple[str, ...] | None

    def dataset(self, rows: TableRows, *, num_classes: int | None = None) -> ArrayDataset:
        """``rows`` as a centralised dataset (``num_classes`` defaults to the table's)."""
        return ArrayDataset(
            features=rows.features,
            targets=rows.targets,
            num_classes=self.num_classes if num_classes is None else num_classes,
            task=self.task,
            name=self.name,
        )

    def by_client(self, rows: TableRows) -> Partition:
        """The rows of each client (a table with a client column), in file order."""
        if rows.clients is None or self.client_names is None:
            raise ValueError(f"the table {self.name!r} has no client column")
        return Partition.from_assignment(rows.clients, num_clients=len(self.client_names), name="natural")


def read_columns(path: str | os.PathLike[str]) -> Columns:
    """The columns of a CSV (header row), NPZ (one array per member) or Parquet file, all of one length.

    Numeric CSV columns become float64 arrays (an empty cell is NaN); other columns stay strings.
    NPZ members may be N-dimensional and are read with ``allow_pickle=False``. Parquet needs the
    ``parquet`` extra (pyarrow).
    """
    file = Path(path)
    columns = file_columns(file, "read_columns", "path")
    check_lengths(columns, file, "read_columns", "path")
    return columns


def column_names(
    path: str | os.PathLike[str], *, owner: str = "column_names", parameter: str = "path"
) -> tuple[str, ...]:
    """The names of a data file's training columns, read without reading its data (see :func:`read_table`)."""
    return header(Path(path), owner, parameter)


def read_table(
    path: str | os.PathLike[str],
    *,
    target_column: str = "y",
    client_column: str = "client",
    feature_columns: Sequence[str] | None = None,
    task: str = "auto",
    test_path: str | os.PathLike[str] | None = None,
    owner: str = "read_table",
    parameter: str = "path",
) -> Table:
    """Read a data file's rows (and its test rows) into features, targets and clients.

    Parameters
    ----------
    path:
        A ``.csv`` (header row), ``.npz`` (one array per column) or ``.parquet``/``.pq`` file.
    target_column, client_column, feature_columns:
        The target column, the column naming each row's client (optional: without it the table has
        no clients) and the feature columns (default: every other numeric column, in file order).
    task:
        ``"auto"``: classification when every target is a whole number in ``[0, MAX_CLASS_ID)``
        (``2**16``), regression otherwise; or ``"classification"`` or ``"regression"``.
    test_path:
        A file of the same format with the same columns holding test rows. An NPZ's own
        ``<col>_test`` members are its test rows; a file cannot have both.
    owner, parameter:
        Who reads the file and the parameter naming it, for error messages.
    """
    check_param("task", owner, task, Options(TASKS))
    file = Path(path)
    # A CSV's client column is kept as text, so that ids are never rounded through float64 (unless it
    # is also the target or a feature, which are numbers; feature_columns is checked further down).
    listed = feature_columns if isinstance(feature_columns, Sequence) and not isinstance(feature_columns, str) else ()
    numbers = {target_column, *(name for name in listed if isinstance(name, str))}
    text = () if client_column in numbers else (client_column,)
    train, test, test_file, test_parameter = _sources(file, test_path, owner, parameter, text)
    reader = ColumnReader(owner, target_column, client_column)
    names = reader.feature_names(train, file, parameter, feature_columns)
    if train[target_column].shape[0] == 0:
        raise malformed(owner, file, "no rows", parameter=parameter)
    x, y, ids = reader.rows(train, file, parameter, names)
    test_rows = None
    if test is not None:
        test_rows = reader.test_rows(test, test_file, test_parameter, names, x, clients=ids is not None)
    targets = [(y, file, parameter)] + ([(test_rows[1], test_file, test_parameter)] if test_rows is not None else [])
    resolved, ys = reader.targets(task, targets)
    num_classes = max(int(t.max()) if t.size else 0 for t in ys) + 1 if resolved == "classification" else None
    test_ids = None if test_rows is None else test_rows[2]
    client_names, (clients, test_clients) = reader.clients(ids, test_ids, test_file, test_parameter)
    return Table(
        name=file.stem,
        columns=tuple(train),
        task=resolved,
        num_classes=num_classes,
        train=TableRows(x, ys[0], clients),
        test=None if test_rows is None else TableRows(test_rows[0], ys[1], test_clients),
        client_names=client_names,
    )


def _sources(
    file: Path, test_path: str | os.PathLike[str] | None, owner: str, parameter: str, text: tuple[str, ...]
) -> tuple[Columns, Columns | None, Path, str]:
    """The training columns, the test columns (an NPZ's ``_test`` members or ``test_path``'s; ``None``
    without test rows), and the file and parameter that hold the test rows."""
    columns = file_columns(file, owner, parameter, text=text)
    train, test = split_members(columns, file, owner, parameter) if file_format(file) == "npz" else (columns, None)
    check_lengths(train, file, owner, parameter)
    if test is not None:
        check_lengths(test, file, owner, parameter, rows="test members")
        if test_path is not None:
            constraint = f"None for {str(file)!r}, which holds its own test rows (members ending in '_test')"
            raise invalid("test_path", owner, constraint, str(test_path))
        return train, test, file, parameter
    if test_path is None:
        return train, None, file, parameter
    test_file = Path(test_path)
    if file_format(test_file) != file_format(file):
        constraint = f"a path to a {format_suffixes(file_format(file))} file like {str(file)!r}"
        raise invalid("test_path", owner, constraint, str(test_file))
    test = file_columns(test_file, owner, "test_path", text=text)
    check_lengths(test, test_file, owner, "test_path")
    return train, test, test_file, "test_path"


def load_table(
    path: str | os.PathLike[str],
    *,
    client_column: str,
    target_column: str,
    feature_columns: Sequence[str] | None = None,
    task: str = "classification",
    num_classes: int | None = None,
    test_path: str | os.PathLike[str] | None = None,
) -> FederatedDataset:
    """A naturally federated table (one row per sample, one column naming its client) as a FederatedDataset.

    Parameters
    ----------
    path:
        A ``.csv`` (header row), ``.npz`` (one array per column) or ``.parquet`` file; see
        :func:`read_table` for the columns, the features and an NPZ's ``_test`` members.
    client_column:
        Column holding each row's client id: integers of any size or strings, kept exactly (a CSV's
        is read as text); a float id must be a whole number within ``2**53``; a missing id is an error.
    target_column:
        Column holding the target: integer class ids in ``[0, MAX_CLASS_ID)`` (``2**16``) for
        ``"classification"``, numbers for ``"regression"``.
    feature_columns:
        Columns used as features, in this order; default: every numeric column except the client
        and target columns, in file order.
    task, num_classes:
        Kind of target (``"auto"`` decides from the values); ``num_classes`` defaults to the
        largest class id plus one.
    test_path:
        Optional file with the same columns holding test rows; its clients must appear in ``path``.
    """
    owner = "load_table"
    if not isinstance(client_column, str) or not isinstance(target_column, str):
        raise invalid("client_column", owner, "a column name (str)", client_column)
    table = read_table(
        path,
        target_column=target_column,
        client_column=client_column,
        feature_columns=feature_columns,
        task=task,
        test_path=test_path,
        owner=owner,
    )
    if table.client_names is None:
        problem = f"no client column {client_column!r} (columns: {', '.join(table.columns)})"
        raise malformed(owner, Path(path), problem, parameter="client_column")
    test = None if table.test is None else table.dataset(table.test, num_classes=num_classes)
    return federate(
        table.dataset(table.train, num_classes=num_classes),
        table.by_client(table.train),
        test=test,
        test_partition=None if table.test is None else table.by_client(table.test),
        name=table.name,
        client_names=table.client_names,
    )
