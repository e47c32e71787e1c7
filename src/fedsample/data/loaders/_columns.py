"""The columns of a table file (CSV, NPZ or Parquet): one array per column, nothing ever unpickled.

A CSV column is numeric (float64, an empty cell is NaN) when every cell reads as a number, else
strings. An NPZ member is a column and may be N-dimensional (``(N, ...)``); a member named
``<col>_train`` is the column ``<col>`` and ``<col>_test`` holds the test rows of ``<col>``
(:func:`split_members`), so a Keras-style ``mnist.npz`` reads as columns ``x`` and ``y`` with test rows.
"""

from __future__ import annotations

import csv
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._validation import invalid
from fedsample.data._optional import require
from fedsample.data.loaders._files import malformed
from fedsample.errors import FedsampleError

__all__ = [
    "FORMATS",
    "Columns",
    "check_lengths",
    "file_columns",
    "file_format",
    "format_suffixes",
    "header",
    "split_members",
]

FORMATS = {".npz": "npz", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
Columns = dict[str, npt.NDArray[Any]]
_SPLITS = ("_train", "_test")
_NPZ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)


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
    if kind == "npz" and not zipfile.is_zipfile(path):  # np.load would try a pickle or a .npy instead
        raise malformed(
            owner, path, "not a readable NPZ archive (not a zip archive of .npy arrays)", parameter=parameter
        )
    return kind


def file_columns(path: Path, owner: str, parameter: str) -> Columns:
    """Every column (NPZ member) of the file at ``path``, by name in file order; lengths are not checked."""
    kind = _existing(path, owner, parameter)
    reader = {"csv": _read_csv, "npz": _read_npz, "parquet": _read_parquet}[kind]
    return reader(path, owner, parameter)


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
        return tuple(first)
    if kind == "npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                names = list(archive.files)
        except _NPZ_ERRORS as exc:
            raise malformed(
                owner, path, f"not a readable NPZ archive of plain arrays ({exc})", parameter=parameter
            ) from exc
        return tuple(_base(name) for name in names if not name.endswith("_test"))
    parquet = require("pyarrow.parquet", extra="parquet", package="pyarrow", owner=owner)
    try:
        return tuple(parquet.read_schema(path).names)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise malformed(owner, path, f"not a readable Parquet file ({exc})", parameter=parameter) from exc


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


def _read_csv(path: Path, owner: str, parameter: str) -> Columns:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a byte-order mark is not a header
            rows = list(csv.reader(handle))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise malformed(owner, path, f"not a readable CSV file ({exc})", parameter=parameter) from exc
    if not rows or not rows[0]:
        raise malformed(owner, path, "no header row", parameter=parameter)
    names, body = rows[0], [r for r in rows[1:] if r]
    for number, row in enumerate(body, start=2):
        if len(row) != len(names):
            raise malformed(
                owner, path, f"line {number} has {len(row)} fields, the header has {len(names)}", parameter=parameter
            )
    columns: Columns = {}
    for k, name in enumerate(names):
        text = np.array([row[k].strip() for row in body], dtype=str)
        try:
            # An empty cell in a numeric column is a missing value (NaN), reported when the column is used.
            columns[name] = np.where(text == "", "nan", text).astype(np.float64)
        except ValueError:
            columns[name] = text
    return columns


def _read_npz(path: Path, owner: str, parameter: str) -> Columns:
    columns: Columns = {}
    try:
        with np.load(path, allow_pickle=False) as archive:
            for name in archive.files:
                columns[name] = _member(archive, name, path, owner, parameter)
    except FedsampleError:
        raise
    except _NPZ_ERRORS as exc:
        raise malformed(
            owner, path, f"not a readable NPZ archive of plain arrays ({exc})", parameter=parameter
        ) from exc
    return columns


def _member(archive: Any, name: str, path: Path, owner: str, parameter: str) -> npt.NDArray[Any]:
    try:
        values = archive[name]
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise
        # allow_pickle=False: an array of Python objects would be unpickled to be read, which can run code.
        raise malformed(
            owner,
            path,
            f"not a readable NPZ archive of plain arrays (member {name!r} holds Python objects, never unpickled)",
            parameter=parameter,
        ) from exc
    if not isinstance(values, np.ndarray):  # np.load returns the raw bytes of a member that is not .npy
        raise malformed(owner, path, f"member {name!r} is not a .npy array", parameter=parameter)
    if values.ndim == 0:
        raise malformed(owner, path, f"member {name!r} is a scalar, not a column", parameter=parameter)
    return values


def _read_parquet(path: Path, owner: str, parameter: str) -> Columns:
    parquet = require("pyarrow.parquet", extra="parquet", package="pyarrow", owner=owner)
    try:
        table = parquet.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise malformed(owner, path, f"not a readable Parquet file ({exc})", parameter=parameter) from exc
    columns: Columns = {}
    for name in table.column_names:
        values = table.column(name).to_numpy(zero_copy_only=False)
        columns[name] = values.astype(str) if values.dtype == object else values
    return columns
