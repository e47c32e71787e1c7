"""The metrics table on disk: ``metrics.parquet`` (when pyarrow is installed) and ``metrics.csv``, each read
back and checked as :func:`~fedsample.experiments.results.metrics.check_metrics_table` checks a table."""

from __future__ import annotations

import csv
import importlib.util
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedsample._io import atomic_path, write_text_atomic
from fedsample.errors import FedsampleError
from fedsample.experiments.results.metrics import (
    CSV_NAME,
    INT_COLUMNS,
    PARQUET_NAME,
    STRING_COLUMNS,
    MetricsTable,
    check_metrics_table,
    is_float_column,
    table_columns,
)

__all__ = ["read_metrics", "write_metrics"]


def write_metrics(table: Mapping[str, Any], run_dir: str | Path) -> list[Path]:
    """Write ``metrics.parquet`` (when pyarrow is installed) and ``metrics.csv`` into ``run_dir``, atomically.

    Returns the paths written. ``run_dir`` is created if needed (by the first write: inside an open run
    directory, a removed one is never made again). Without pyarrow, an earlier
    ``metrics.parquet`` is removed so that both readers see this table.
    """
    checked = check_metrics_table(table, subject="The 'table' parameter of write_metrics")
    directory = Path(run_dir)
    written = []
    if _has_pyarrow():
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrow = pa.table({name: pa.array(checked[name].tolist(), type=_arrow_type(pa, name)) for name in checked})
        with atomic_path(directory / PARQUET_NAME) as temporary:
            pq.write_table(arrow, temporary)
        written.append(directory / PARQUET_NAME)
    else:  # a Parquet file of an earlier write would be read in place of this table
        (directory / PARQUET_NAME).unlink(missing_ok=True)
    write_text_atomic(directory / CSV_NAME, _to_csv(checked))
    written.append(directory / CSV_NAME)
    return written


def read_metrics(run_dir: str | Path) -> MetricsTable:
    """Read the metrics table of ``run_dir``: ``metrics.parquet`` if present and pyarrow is installed, else CSV."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise FedsampleError(f"The run directory {str(directory)!r} does not exist (or is not a directory).")
    parquet, text = directory / PARQUET_NAME, directory / CSV_NAME
    if parquet.is_file() and _has_pyarrow():
        return _read_parquet(parquet)
    if text.is_file():
        return _read_csv(text)
    raise FedsampleError(f"The run directory {str(directory)!r} has no {PARQUET_NAME} or {CSV_NAME}.")


def _has_pyarrow() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def _arrow_type(pa: Any, name: str) -> Any:
    if name in STRING_COLUMNS:
        return pa.string()
    return pa.int64() if name in INT_COLUMNS else pa.float64()


def _format(name: str, value: Any) -> str:
    # repr of a Python float is the shortest string that parses back to the same double.
    return repr(float(value)) if is_float_column(name) else str(value)


def _to_csv(table: MetricsTable) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(list(table))
    columns = [[_format(name, v) for v in table[name].tolist()] for name in table]
    writer.writerows(zip(*columns, strict=True))
    return buffer.getvalue()


def _read_csv(path: Path) -> MetricsTable:
    subject = f"The metrics file {str(path)!r}"
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise FedsampleError(f"{subject} could not be read: {exc}.") from exc
    if not rows:
        raise FedsampleError(f"{subject} must start with a header line. Got an empty file instead.")
    header, body = rows[0], rows[1:]
    missing = [name for name in table_columns(header) if name not in header]
    if missing:
        raise FedsampleError(f"{subject} must have the column {missing[0]!r}. Got the columns {header} instead.")
    positions = {name: header.index(name) for name in table_columns(header)}
    parsed: dict[str, list[Any]] = {name: [] for name in positions}
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise FedsampleError(f"{subject} must have {len(header)} fields per line. Got {len(row)} on line {line}.")
        for name, position in positions.items():
            parsed[name].append(_parse(row[position], name, line, subject))
    table = {
        name: np.array(
            values,
            dtype=object if name in STRING_COLUMNS else np.int64 if name in INT_COLUMNS else np.float64,
        )
        for name, values in parsed.items()
    }
    return check_metrics_table(table, subject=subject)


def _parse(text: str, name: str, line: int, subject: str) -> Any:
    if name in STRING_COLUMNS:
        return text
    kind = "an int" if name in INT_COLUMNS else "a float"
    try:
        value = int(text) if name in INT_COLUMNS else float(text) if text else float("nan")
    except ValueError:  # also an int of more than 4300 digits, which Python does not read
        raise FedsampleError(
            f"{subject} must hold {kind} in the column {name!r}. Got {text[:40]!r} on line {line}."
        ) from None
    if name in INT_COLUMNS and not -(2**63) <= value < 2**63:  # np.array(dtype=int64) would raise OverflowError
        raise FedsampleError(f"{subject} must hold an int64 in the column {name!r}. Got {text[:40]!r} on line {line}.")
    return value


def _read_parquet(path: Path) -> MetricsTable:
    import pyarrow as pa
    import pyarrow.parquet as pq

    subject = f"The metrics file {str(path)!r}"
    try:
        arrow = pq.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise FedsampleError(f"{subject} could not be read as Parquet: {' '.join(str(exc).split())}") from exc
    missing = [name for name in table_columns(arrow.column_names) if name not in arrow.column_names]
    if missing:
        raise FedsampleError(
            f"{subject} must have the column {missing[0]!r}. Got the columns {arrow.column_names} instead."
        )
    table: dict[str, Any] = {}
    for name in table_columns(arrow.column_names):
        column = arrow.column(name)
        kind = column.type
        numeric = pa.types.is_integer(kind) or (is_float_column(name) and pa.types.is_floating(kind))
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        if (name in STRING_COLUMNS and not text) or (name not in STRING_COLUMNS and not numeric):
            raise FedsampleError(f"{subject} holds the column {name!r} with the wrong type {kind}.")
        if column.null_count and not is_float_column(name):
            raise FedsampleError(f"{subject} must hold no nulls in the column {name!r}. Got {column.null_count}.")
        values = column.to_numpy(zero_copy_only=False)
        table[name] = values.astype(object) if name in STRING_COLUMNS else values
    return check_metrics_table(table, subject=subject)
