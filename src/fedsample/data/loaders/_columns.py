"""The columns of a table file (CSV, NPZ or Parquet): one array per column, nothing ever unpickled.

A CSV column is numeric (float64, an empty cell is NaN) when every cell reads as a number, else
strings; the columns named in ``text`` (the client column) stay strings as written, so that an id is
never rounded through float64. An NPZ member is a column and may be N-dimensional (``(N, ...)``;
its header is checked before it is read, :mod:`~fedsample.data.loaders._npz`); a member named
``<col>_train`` is the column ``<col>`` and ``<col>_test`` holds the test rows of ``<col>``
(:func:`split_members`), so a Keras-style ``mnist.npz`` reads as columns ``x`` and ``y`` with test rows.
No file may name a column twice (a CSV header, a Parquet schema, an NPZ's members).
"""

from __future__ import annotations

import csv
import zipfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._imports import require
from fedsample._validation import invalid
from fedsample.data.loaders._files import malformed
from fedsample.data.loaders._npz import npz_names, read_npz
from fedsample.errors import FedsampleError

__all__ = [
    "FORMATS",
    "Columns",
    "check_lengths",
    "distinct_names",
    "file_columns",
    "file_format",
    "format_suffixes",
    "header",
    "split_members",
]

FORMATS = {".npz": "npz", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
Columns = dict[str, npt.NDArray[Any]]
_SPLITS = ("_train", "_test")


def file_format(path: Path) -> str | None:
    """``"csv"``, ``"npz"`` or ``"parquet"`` from the name's suffix (any case); ``None`` for another name."""
    return FORMATS.get(path.suffix.lower())


def format_suffixes(kind: str | None) -> str:
    """The suffixes of a format, for messages: ``".parquet or .pq"``."""
    return " or ".join(suffix for suffix, name in FORMATS.items() if name == kind)


def _existing(path: Path, owner: str, parameter: str) -> str:
    kind = file_format(path)
    if kind is None:
        raise invalid(parameter, owner, "a .csv, .npz, .parquet or .pq file", str(path))
    if not path.is_file():
        raise FedsampleError(f"{owner}: file not found: {str(path)!r}.", parameter=parameter)
    if kind == "npz" and not zipfile.is_zipfile(path):
        raise malformed(
            owner, path, "not a readable NPZ archive (not a zip archive of .npy arrays)", parameter=parameter
        )
    return kind


def file_columns(path: Path, owner: str, parameter: str, *, text: Collection[str] = ()) -> Columns:
    """Every column (NPZ member) of the file at ``path``, by name in file order; lengths are not checked.

    A CSV column named in ``text`` is kept as its cells' text (stripped), never read as numbers.
    """
    kind = _existing(path, owner, parameter)
    if kind == "csv":
        return _read_csv(path, owner, parameter, text)
    if kind == "npz":
        return read_npz(path, owner, parameter)
    return _read_parquet(path, owner, parameter)


def distinct_names(names: Sequence[str], path: Path, owner: str, parameter: str, *, where: str) -> None:
    """Refuse a column name given twice (``where`` says where the names are: "the header")."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise malformed(owner, path, f"column {name!r} appears twice in {where}", parameter=parameter)
        seen.add(name)


def header(path: Path, owner: str, parameter: str) -> tuple[str, ...]:
    """The names of the file's training columns, read without its data (a CSV's first line, an NPZ's
    member list with ``_train`` suffixes dropped and ``_test`` members left out, a Parquet schema)."""
    kind = _existing(path, owner, parameter)
    if kind == "csv":
        try:
            with path.open(newline="", encoding="utf-8-sig") as handle:  # a byte-order mark is not a header
                first = next(csv.reader(handle), [])
        except (UnicodeDecodeError, csv.Error, OSError) as exc:
            raise malformed(owner, path, f"not a readable CSV file ({exc})", parameter=parameter) from exc
        distinct_names(first, path, owner, parameter, where="the header")
        return tuple(first)
    if kind == "npz":
        return tuple(_base(name) for name in npz_names(path, owner, parameter) if not name.endswith("_test"))
    return _parquet_names(path, owner, parameter)


def _parquet_names(path: Path, owner: str, parameter: str) -> tuple[str, ...]:
    """A Parquet file's column names, read from its schema; a name given twice is refused."""
    parquet = require("pyarrow.parquet", extra="parquet", package="pyarrow", owner=owner)
    try:
        names = tuple(parquet.read_schema(path).names)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise _unreadable_parquet(path, owner, parameter, exc) from exc
    distinct_names(names, path, owner, parameter, where="the schema")
    return names


def _unreadable_parquet(path: Path, owner: str, parameter: str, exc: BaseException) -> FedsampleError:
    detail = " ".join(str(exc).split())  # pyarrow's messages may span lines; ours is one
    return malformed(owner, path, f"not a readable Parquet file ({detail})", parameter=parameter)


def _base(name: str) -> str:
    return name.removesuffix("_train")


def split_members(columns: Columns, path: Path, owner: str, parameter: str) -> tuple[Columns, Columns | None]:
    """NPZ members as training columns and test columns: ``<col>_train`` is ``<col>``, ``<col>_test`` a
    test column of ``<col>``; ``None`` for the test columns when no member ends in ``_test``."""
    train: Columns = {}
    test: Columns = {}
    for name, values in columns.items():
        target = test if name.endswith("_test") else train
        column = name.removesuffix("_test") if name.endswith("_test") else _base(name)
        if not column or column in target:
            problem = "an empty column name" if not column else f"both {column!r} and {column + '_train'!r}"
            raise malformed(owner, path, f"members name {problem}", parameter=parameter)
        target[column] = values
    return train, (test if test else None)


def check_lengths(columns: Columns, path: Path, owner: str, parameter: str, *, rows: str = "columns") -> None:
    """Every column of ``columns`` has the same number of rows (``rows`` names them in the error)."""
    lengths = {name: values.shape[0] for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise malformed(owner, path, f"{rows} of different lengths {lengths}", parameter=parameter)


def _read_csv(path: Path, owner: str, parameter: str, text: Collection[str]) -> Columns:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a byte-order mark is not a header
            rows = list(csv.reader(handle))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise malformed(owner, path, f"not a readable CSV file ({exc})", parameter=parameter) from exc
    if not rows or not rows[0]:
        raise malformed(owner, path, "no header row", parameter=parameter)
    names, body = rows[0], [r for r in rows[1:] if r]
    distinct_names(names, path, owner, parameter, where="the header")
    for number, row in enumerate(body, start=2):
        if len(row) != len(names):
            raise malformed(
                owner, path, f"line {number} has {len(row)} fields, the header has {len(names)}", parameter=parameter
            )
    columns: Columns = {}
    for k, name in enumerate(names):
        cells = np.array([row[k].strip() for row in body], dtype=str)
        if name in text:
            columns[name] = cells
            continue
        try:
            # An empty cell in a numeric column is a missing value (NaN), reported when the column is used.
            columns[name] = np.where(cells == "", "nan", cells).astype(np.float64)
        except ValueError:
            columns[name] = cells
    return columns


def _read_parquet(path: Path, owner: str, parameter: str) -> Columns:
    _parquet_names(path, owner, parameter)  # pyarrow reads a repeated name as a many-line error
    parquet = require("pyarrow.parquet", extra="parquet", package="pyarrow", owner=owner)
    compute = require("pyarrow.compute", extra="parquet", package="pyarrow", owner=owner)
    try:
        table = parquet.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise _unreadable_parquet(path, owner, parameter, exc) from exc
    columns: Columns = {}
    for name in table.column_names:
        column = table.column(name)
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype == object:
            if column.null_count:  # a null is a missing value: the empty string, never the text 'None'
                values = np.where(compute.is_null(column).to_numpy(zero_copy_only=False), "", values)
            values = values.astype(str)
        columns[name] = values
    return columns
