"""The column rules of a data file: which columns are the features, the target and the clients, and
how each becomes an array (described in :mod:`fedsample.data.loaders.table`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._suggestions import close_names
from fedsample._validation import invalid
from fedsample.data.dataset import Task
from fedsample.data.loaders._clients import client_ids, match_clients
from fedsample.data.loaders._columns import Columns, file_format
from fedsample.data.loaders._files import malformed
from fedsample.errors import FedsampleError

__all__ = ["MAX_CLASS_ID", "ColumnReader"]

# Class ids of a classification target lie in [0, MAX_CLASS_ID): the model gets one output per
# class up to the largest id, so a stray large id (a sample count or a hash in the wrong column)
# would otherwise ask for that many outputs.
MAX_CLASS_ID = 2**16


class ColumnReader:
    """The column rules of :func:`read_table`, with its owner and column names for error messages."""

    def __init__(self, owner: str, target_column: str, client_column: str) -> None:
        self.owner = owner
        self.target_column = target_column
        self.client_column = client_column

    def feature_names(
        self, columns: Columns, path: Path, parameter: str, feature_columns: Sequence[str] | None
    ) -> list[str]:
        if self.target_column not in columns:
            raise self.no_column("target_column", self.target_column, columns, path)
        if feature_columns is None:
            roles = (self.client_column, self.target_column)
            names = [n for n, v in columns.items() if n not in roles and v.dtype.kind in "biuf"]
            if not names:
                problem = "no numeric feature column besides the client and target"
                raise malformed(self.owner, path, problem, parameter="feature_columns")
            return names
        if (
            isinstance(feature_columns, str)
            or not isinstance(feature_columns, Sequence)
            or not all(isinstance(n, str) for n in feature_columns)
        ):
            raise invalid("feature_columns", self.owner, "a sequence of column names", feature_columns)
        names = list(feature_columns)
        if not names:
            raise invalid("feature_columns", self.owner, "a non-empty sequence of column names", feature_columns)
        for name in names:
            if name not in columns:
                raise self.no_column("feature_columns", name, columns, path)
        return names

    def no_column(self, parameter: str, name: str, columns: Columns, path: Path) -> FedsampleError:
        """A column name the file does not have: its columns, and the closest of them (a misspelled name)."""
        rule = f"a column of {path.name!r}, one of {{{', '.join(map(repr, columns))}}}"
        return invalid(parameter, self.owner, rule, name, suggestions=close_names(name, list(columns)))

    def rows(
        self, columns: Columns, path: Path, parameter: str, names: list[str], *, clients: bool = True
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any] | None]:
        """Features, raw targets and raw client ids (``None`` without a client column, or unless ``clients``)."""
        for name in (self.target_column, *names):
            if name not in columns:
                problem = f"no column {name!r} (columns: {', '.join(columns)})"
                raise malformed(self.owner, path, problem, parameter=parameter)
        blocks = [self._feature(columns, name, path, parameter, alone=len(names) == 1) for name in names]
        if len(blocks) == 1 and blocks[0].ndim >= 2:
            x = blocks[0]  # one column keeps its shape: images stay (N, C, H, W), token ids (N, L)
        else:
            x = np.concatenate([b.reshape(b.shape[0], int(np.prod(b.shape[1:]))) for b in blocks], axis=1)
        target = self._numeric(columns, self.target_column, path, "target", parameter)
        if target.ndim != 1:
            problem = f"target column {self.target_column!r} is not 1-D (shape {target.shape})"
            raise malformed(self.owner, path, problem, parameter=parameter)
        self._finite(target, self.target_column, "target", path, parameter)
        if not clients or self.client_column not in columns:
            return x, target, None
        return x, target, self._client_ids(columns[self.client_column], path, parameter)

    def test_rows(
        self, columns: Columns, path: Path, parameter: str, names: list[str], train: npt.NDArray[Any], *, clients: bool
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any] | None]:
        """The test rows' features, raw targets and client ids: features like ``train``'s, and the client
        column when the training rows have one."""
        x, y, ids = self.rows(columns, path, parameter, names, clients=clients)
        if clients and ids is None:
            problem = f"the test rows have no client column {self.client_column!r} (columns: {', '.join(columns)})"
            raise malformed(self.owner, path, problem, parameter=parameter)
        if x.shape[1:] != train.shape[1:] or x.dtype != train.dtype:
            problem = (
                f"the test rows have features of shape {x.shape[1:]} ({x.dtype}), "
                f"the training rows {train.shape[1:]} ({train.dtype})"
            )
            raise malformed(self.owner, path, problem, parameter=parameter)
        return x, y, ids

    def _feature(self, columns: Columns, name: str, path: Path, parameter: str, *, alone: bool) -> npt.NDArray[Any]:
        """One feature column converted: uint8 pixels to float32 in [0, 1], a lone integer block to int64
        token ids, everything else to float32 (checked finite)."""
        values = self._numeric(columns, name, path, "feature", parameter)
        if values.dtype == np.uint8:
            # As the IDX loader does (loaders/idx.py): pixel intensities 0..255 become float32 in [0, 1].
            return values.astype(np.float32) / np.float32(255.0)
        if alone and values.ndim >= 2 and values.dtype.kind in "iu":
            return values.astype(np.int64)
        with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf: refused below
            converted = values.astype(np.float32)
        self._finite(converted, name, "feature", path, parameter)
        return converted

    def _numeric(self, columns: Columns, name: str, path: Path, role: str, parameter: str) -> npt.NDArray[Any]:
        values = columns[name]
        if values.dtype.kind not in "biuf":
            sample = next((v for v in values.ravel().tolist() if not _is_number(v)), "")
            problem = f"{role} column {name!r} is not numeric (value {sample!r})"
            raise malformed(self.owner, path, problem, parameter=parameter)
        return values

    def _finite(self, values: npt.NDArray[Any], name: str, role: str, path: Path, parameter: str) -> None:
        if values.dtype.kind != "f":
            return
        bad = ~np.isfinite(values.reshape(values.shape[0], int(np.prod(values.shape[1:])))).all(axis=1)
        if bad.any():
            problem = f"{role} column {name!r} has a missing or non-finite value at row {int(np.argmax(bad))}"
            raise malformed(self.owner, path, problem, parameter=parameter)

    def targets(
        self, task: str, targets: list[tuple[npt.NDArray[Any], Path, str]]
    ) -> tuple[Task, list[npt.NDArray[Any]]]:
        """The task (``"auto"`` decided from every target) and the targets as int64 class ids or float32."""
        if task == "auto":
            task = "classification" if all(_class_ids(y) for y, _, _ in targets) else "regression"
        if task == "regression":
            return "regression", [y.astype(np.float32) for y, _, _ in targets]
        for y, path, parameter in targets:
            t = y.astype(np.float64)
            bad = (t != np.round(t)) | (t < 0)
            if bad.any():
                row = int(np.argmax(bad))
                problem = (
                    f"target column {self.target_column!r} must hold non-negative integer class ids "
                    f"(got {y[row].item()!r} at row {row})"
                )
                raise malformed(self.owner, path, problem, parameter=parameter)
            if t.size and t.max() >= MAX_CLASS_ID:
                problem = (
                    f"target column {self.target_column!r} must hold class ids below {MAX_CLASS_ID} "
                    f"(got {t.max():.0f} at row {int(np.argmax(t))})"
                )
                raise malformed(self.owner, path, problem, parameter=parameter)
        return "classification", [y.astype(np.int64) for y, _, _ in targets]

    def _client_ids(self, ids: npt.NDArray[Any], path: Path, parameter: str) -> npt.NDArray[Any]:
        from_text = file_format(path) == "csv"  # a CSV's client column is read as its cells' text
        return client_ids(
            ids, column=self.client_column, from_text=from_text, owner=self.owner, path=path, parameter=parameter
        )

    def clients(
        self, train: npt.NDArray[Any] | None, test: npt.NDArray[Any] | None, test_file: Path, test_parameter: str
    ) -> tuple[tuple[str, ...] | None, tuple[IntArray | None, IntArray | None]]:
        """The sorted client names and each row's client; a test row must name a client with training rows."""
        return match_clients(train, test, owner=self.owner, test_file=test_file, test_parameter=test_parameter)


def _class_ids(values: npt.NDArray[Any]) -> bool:
    """Whether every value is a whole number in ``[0, MAX_CLASS_ID)`` (integer dtype, or whole floats)."""
    if values.size == 0:
        return True
    if values.dtype.kind == "f" and np.any(values != np.round(values)):
        return False
    return bool(values.min() >= 0 and values.max() < MAX_CLASS_ID)


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True
