"""Tables with one row per sample and a client-id column: CSV, NPZ or Parquet, as a FederatedDataset.

Clients are the distinct values of the client column, in sorted order; a client's rows keep
their file order. Feature columns default to every numeric column other than the client and
target columns.
"""

from __future__ import annotations

import csv
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._validation import invalid
from fedsample.data._optional import require
from fedsample.data.dataset import Task
from fedsample.data.federated import FederatedDataset
from fedsample.data.loaders._files import malformed
from fedsample.errors import FedsampleError

__all__ = ["load_table", "read_columns"]

_FORMATS = {".csv": "csv", ".npz": "npz", ".parquet": "parquet", ".pq": "parquet"}
# Class ids of a classification target lie in [0, MAX_CLASS_ID): the model gets one output per
# class up to the largest id, so a stray large id (a sample count or a hash in the wrong column)
# would otherwise ask for that many outputs.
MAX_CLASS_ID = 2**16
Columns = dict[str, npt.NDArray[Any]]


def read_columns(path: str | os.PathLike[str]) -> Columns:
    """The columns of a CSV (header row), NPZ (one 1-D array per column) or Parquet file.

    Numeric CSV columns become float64 arrays (an empty cell is NaN); other columns stay strings.
    NPZ files are read with ``allow_pickle=False``. Parquet needs the ``parquet`` extra (pyarrow).
    """
    return _read_columns(path, "read_columns", "path")


def _read_columns(path: str | os.PathLike[str], owner: str, parameter: str) -> Columns:
    file = Path(path)
    kind = _FORMATS.get(file.suffix.lower())
    if kind is None:
        raise invalid(parameter, owner, "a .csv, .npz, .parquet or .pq file", str(file))
    if not file.is_file():
        raise FedsampleError(f"{owner}: file not found: {str(file)!r}.", parameter=parameter)
    reader = {"csv": _read_csv, "npz": _read_npz, "parquet": _read_parquet}[kind]
    columns = reader(file, parameter)
    lengths = {name: values.shape[0] for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise malformed("load_table", file, f"columns of different lengths {lengths}", parameter=parameter)
    return columns


def _read_csv(path: Path, parameter: str) -> Columns:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise malformed("load_table", path, f"not a readable CSV file ({exc})", parameter=parameter) from exc
    if not rows or not rows[0]:
        raise malformed("load_table", path, "no header row", parameter=parameter)
    header, body = rows[0], [r for r in rows[1:] if r]
    for number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise malformed(
                "load_table",
                path,
                f"line {number} has {len(row)} fields, the header has {len(header)}",
                parameter=parameter,
            )
    columns: Columns = {}
    for k, name in enumerate(header):
        text = np.array([row[k].strip() for row in body], dtype=str)
        try:
            # An empty cell in a numeric column is a missing value (NaN), reported when the column is used.
            columns[name] = np.where(text == "", "nan", text).astype(np.float64)
        except ValueError:
            columns[name] = text
    return columns


def _read_npz(path: Path, parameter: str) -> Columns:
    try:
        with np.load(path, allow_pickle=False) as archive:
            columns = {name: archive[name] for name in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise malformed(
            "load_table", path, f"not a readable NPZ archive of plain arrays ({exc})", parameter=parameter
        ) from exc
    for name, values in columns.items():
        if not isinstance(values, np.ndarray):  # np.load returns the raw bytes of a member that is not .npy
            raise malformed("load_table", path, f"member {name!r} is not a .npy array", parameter=parameter)
        if values.ndim != 1:
            raise malformed(
                "load_table", path, f"array {name!r} is not 1-D (shape {values.shape})", parameter=parameter
            )
    return columns


def _read_parquet(path: Path, parameter: str) -> Columns:
    parquet = require("pyarrow.parquet", extra="parquet", package="pyarrow", owner="load_table")
    try:
        table = parquet.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise malformed("load_table", path, f"not a readable Parquet file ({exc})", parameter=parameter) from exc
    columns: Columns = {}
    for name in table.column_names:
        values = table.column(name).to_numpy(zero_copy_only=False)
        columns[name] = values.astype(str) if values.dtype == object else values
    return columns


def _numeric(columns: Columns, name: str, path: Path, role: str, parameter: str) -> npt.NDArray[Any]:
    values = columns[name]
    if values.dtype.kind not in "biuf":
        sample = next((v for v in values.tolist() if not _is_number(v)), "")
        raise malformed(
            "load_table", path, f"{role} column {name!r} is not numeric (value {sample!r})", parameter=parameter
        )
    return values


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def load_table(
    path: str | os.PathLike[str],
    *,
    client_column: str,
    target_column: str,
    feature_columns: Sequence[str] | None = None,
    task: Task = "classification",
    num_classes: int | None = None,
    test_path: str | os.PathLike[str] | None = None,
) -> FederatedDataset:
    """A naturally federated table (one row per sample, one column naming its client) as a FederatedDataset.

    Parameters
    ----------
    path:
        A ``.csv`` (header row), ``.npz`` (one 1-D array per column) or ``.parquet`` file.
    client_column:
        Column holding each row's client id (numbers or strings).
    target_column:
        Column holding the target: integer class ids in ``[0, MAX_CLASS_ID)`` (``2**16``) for
        ``"classification"``, numbers for ``"regression"``.
    feature_columns:
        Columns used as features, in this order; default: every numeric column except the client
        and target columns, in file order.
    task, num_classes:
        Kind of target; ``num_classes`` defaults to the largest class id plus one.
    test_path:
        Optional file with the same columns holding test rows; its clients must appear in ``path``.
    """
    owner = "load_table"
    if not isinstance(client_column, str) or not isinstance(target_column, str):
        raise invalid("client_column", owner, "a column name (str)", client_column)
    train = _read_columns(path, owner, "path")
    file = Path(path)
    features_in = _feature_names(train, file, client_column, target_column, feature_columns)
    x, y, ids = _extract(train, file, client_column, target_column, features_in, task, "path")
    names, client = np.unique(ids, return_inverse=True)
    order = np.argsort(client, kind="stable")
    if test_path is None:
        tx, ty, t_client = x[:0], y[:0], np.zeros(0, dtype=np.int64)
    else:
        test_file = Path(test_path)
        test = _read_columns(test_file, owner, "test_path")
        tx, ty, t_ids = _extract(test, test_file, client_column, target_column, features_in, task, "test_path")
        position = np.searchsorted(names, t_ids)
        known = (position < names.size) & (names[np.minimum(position, names.size - 1)] == t_ids)
        if not np.all(known):
            unknown = t_ids[np.flatnonzero(~known)[0]].item()
            raise malformed(owner, test_file, f"client {unknown!r} has no training rows", parameter="test_path")
        t_client = position.astype(np.int64)
    t_order = np.argsort(t_client, kind="stable")
    return FederatedDataset(
        train_features=x[order],
        train_targets=y[order],
        train_indptr=_offsets(client, names.size),
        test_features=tx[t_order],
        test_targets=ty[t_order],
        test_indptr=_offsets(t_client, names.size),
        num_classes=num_classes,
        task=task,
        name=file.stem,
        client_names=tuple(str(v) for v in names.tolist()),
    )


def _offsets(client: IntArray, num_clients: int) -> IntArray:
    counts = np.bincount(client, minlength=num_clients)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _feature_names(
    columns: Columns, path: Path, client_column: str, target_column: str, feature_columns: Sequence[str] | None
) -> list[str]:
    for name, role in ((client_column, "client"), (target_column, "target")):
        if name not in columns:
            raise malformed(
                "load_table", path, f"no {role} column {name!r} (columns: {', '.join(columns)})", parameter="path"
            )
    if feature_columns is None:
        names = [n for n, v in columns.items() if n not in (client_column, target_column) and v.dtype.kind in "biuf"]
        if not names:
            raise malformed(
                "load_table", path, "no numeric feature column besides the client and target", parameter="path"
            )
        return names
    if isinstance(feature_columns, str) or not all(isinstance(n, str) for n in feature_columns):
        raise invalid("feature_columns", "load_table", "a sequence of column names", feature_columns)
    names = list(feature_columns)
    if not names:
        raise invalid("feature_columns", "load_table", "a non-empty sequence of column names", feature_columns)
    return names


def _extract(
    columns: Columns,
    path: Path,
    client_column: str,
    target_column: str,
    feature_names: list[str],
    task: str,
    parameter: str,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    for name in (client_column, target_column, *feature_names):
        if name not in columns:
            raise malformed(
                "load_table", path, f"no column {name!r} (columns: {', '.join(columns)})", parameter=parameter
            )
    parts = [_numeric(columns, n, path, "feature", parameter).astype(np.float64) for n in feature_names]
    x = np.stack(parts, axis=1) if parts else np.zeros((0, 0))
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        raise malformed(
            "load_table",
            path,
            f"feature column {feature_names[col]!r} has a missing or non-finite value at row {row}",
            parameter=parameter,
        )
    target = _numeric(columns, target_column, path, "target", parameter)
    if task == "classification":
        t = target.astype(np.float64)
        if not np.all(np.isfinite(t)) or np.any(t != np.round(t)) or (t.size and t.min() < 0):
            raise malformed(
                "load_table",
                path,
                f"target column {target_column!r} must hold non-negative integer class ids",
                parameter=parameter,
            )
        if t.size and t.max() >= MAX_CLASS_ID:
            raise malformed(
                "load_table",
                path,
                f"target column {target_column!r} must hold class ids below {MAX_CLASS_ID} "
                f"(got {t.max():.0f} at row {int(np.argmax(t))})",
                parameter=parameter,
            )
        y: npt.NDArray[Any] = t.astype(np.int64)
    else:
        y = target.astype(np.float32)
        if not np.all(np.isfinite(y)):
            raise malformed(
                "load_table", path, f"target column {target_column!r} has missing values", parameter=parameter
            )
    ids = columns[client_column]
    if ids.dtype.kind == "f" and np.all(np.isfinite(ids)) and np.all(ids == np.round(ids)):
        ids = ids.astype(np.int64)  # CSV ids read as floats: 3.0 -> 3
    return x.astype(np.float32), y, ids
