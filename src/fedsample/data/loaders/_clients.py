"""Client ids of a table's client column, kept exactly (the rules of docs/data.md, "Client ids").

- Integers (an integer column; in a CSV, a column whose every cell is an integer in plain decimal)
  are exact integers of any size, sorted numerically; a CSV's ids are never read through float64.
- Strings are compared as written and sorted as text: ``"3.0"``, ``"3"`` and ``"007"`` are three clients.
- A float id must be a whole number no larger in magnitude than ``2**53`` (``2**24`` for float32,
  ``2**11`` for float16), the range where its type holds every integer; it is then that integer.
  A fraction or a larger float is refused: beyond that range distinct integer ids may already have
  been rounded to one float, and the file cannot say which.
- A missing id (an empty CSV cell or one reading as NaN, a Parquet null, NaN, an empty or blank
  string) is refused.

Every refusal is one line naming the file, the column and the row.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample.data.loaders._files import malformed

__all__ = ["client_ids", "match_clients"]

_PLAIN_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
_NAN_CELLS = ["nan", "+nan", "-nan"]
_INT64 = np.iinfo(np.int64)
_UINT64 = np.iinfo(np.uint64)


def client_ids(
    ids: npt.NDArray[Any], *, column: str, from_text: bool, owner: str, path: Path, parameter: str
) -> npt.NDArray[Any]:
    """The client column ``ids`` as exact keys: integers (int64, uint64, or Python ints beyond them),
    or strings. ``from_text``: the column is a CSV's cells, integers when every cell is plain decimal."""

    def refuse(problem: str) -> None:
        raise malformed(owner, path, f"client column {column!r} {problem}", parameter=parameter)

    if ids.ndim != 1:
        refuse(f"is not 1-D (shape {ids.shape})")
    if ids.dtype.kind not in "biufUS":
        refuse(f"must hold numbers or strings (dtype {ids.dtype})")
    if ids.dtype.kind in "US":
        cells = np.char.strip(ids)
        missing = np.char.str_len(cells) == 0
        if from_text:  # as in the CSV's numeric columns, a cell reading as NaN is a missing value
            missing |= np.isin(np.char.lower(cells), _NAN_CELLS)
        if missing.any():
            refuse(f"has a missing client id (an empty cell, NaN or a null) at row {int(np.argmax(missing))}")
        texts = ids.tolist()
        if from_text and all(_PLAIN_INTEGER.fullmatch(text) for text in texts):
            return _integers([int(text) for text in texts])
        return ids
    if ids.dtype.kind != "f":
        return ids
    missing = np.isnan(ids)
    if missing.any():
        refuse(f"has a missing client id (an empty cell, NaN or a null) at row {int(np.argmax(missing))}")
    bits = min(np.finfo(ids.dtype).nmant + 1, 53)  # the dtype holds every integer up to 2**bits
    bad = (ids != np.round(ids)) | (np.abs(ids) > 2.0**bits)
    if bad.any():
        row = int(np.argmax(bad))
        refuse(
            f"holds the {ids.dtype} {ids[row].item()!r} at row {row}: a float client id must be a whole number "
            f"of magnitude at most 2**{bits}, where {ids.dtype} holds every integer (store ids as integers or strings)"
        )
    return ids.astype(np.int64)


def _integers(values: list[int]) -> npt.NDArray[Any]:
    """Python ints as int64 when they all fit, else uint64 when they all fit, else an array of Python ints."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    low, high = min(values), max(values)
    if low >= _INT64.min and high <= _INT64.max:
        return np.array(values, dtype=np.int64)
    if low >= 0 and high <= _UINT64.max:
        return np.array(values, dtype=np.uint64)
    exact = np.empty(len(values), dtype=object)
    exact[:] = values
    return exact


def _common(train: npt.NDArray[Any], test: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """The training and test ids in one exact representation (numpy would compare int64 with uint64
    as float64, merging large ids)."""
    if train.dtype == test.dtype:
        return train, test
    if train.dtype.kind in "US" or test.dtype.kind in "US":
        return train.astype(str), test.astype(str)
    joined = _integers([int(v) for v in (*train.tolist(), *test.tolist())])
    return joined[: train.size], joined[train.size :]


def match_clients(
    train: npt.NDArray[Any] | None, test: npt.NDArray[Any] | None, *, owner: str, test_file: Path, test_parameter: str
) -> tuple[tuple[str, ...] | None, tuple[IntArray | None, IntArray | None]]:
    """The sorted client names and each row's client; a test row must name a client with training rows."""
    if train is None:
        return None, (None, None)
    if test is not None:
        train, test = _common(train, test)
    names, client = np.unique(train, return_inverse=True)
    position = None
    if test is not None:
        position = np.searchsorted(names, test)
        known = (position < names.size) & (names[np.minimum(position, names.size - 1)] == test)
        if not np.all(known):
            unknown = test[np.flatnonzero(~known)[0]]
            unknown = unknown.item() if isinstance(unknown, np.generic) else unknown
            problem = f"client {unknown!r} has no training rows"
            raise malformed(owner, test_file, problem, parameter=test_parameter)
        position = position.astype(np.int64)
    return tuple(str(v) for v in names.tolist()), (client.astype(np.int64), position)
