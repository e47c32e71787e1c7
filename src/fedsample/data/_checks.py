"""Argument checks shared by the data layer, all raising :class:`~fedsample.errors.FedsampleError`."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._validation import Interval, check_param, invalid

__all__ = ["as_labels", "check_int", "frozen_view", "infer_num_classes"]


def check_int(name: str, owner: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an int when it is an integer in ``[low, high]``."""
    check_param(name, owner, value, Interval(int, low, high, closed="both"))
    return int(value)  # type: ignore[call-overload,no-any-return]


def as_labels(labels: npt.ArrayLike, owner: str, *, name: str = "labels") -> IntArray:
    """Class labels as a 1-D int64 array of non-negative whole numbers."""
    constraint = "a 1-D array of non-negative integer class labels"
    try:
        raw = np.asarray(labels)
    except (TypeError, ValueError) as exc:
        raise invalid(name, owner, constraint, labels) from exc
    if raw.ndim != 1 or raw.dtype == np.bool_ or raw.dtype.kind not in "iuf":
        raise invalid(name, owner, constraint, labels)
    if raw.dtype.kind == "f" and (not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw))):
        raise invalid(name, owner, constraint, raw)
    values = raw.astype(np.int64)
    if values.size and values.min() < 0:
        raise invalid(name, owner, constraint, raw)
    return values


def infer_num_classes(labels: IntArray, num_classes: int | None, owner: str) -> int:
    """``num_classes`` when given (checked against the labels), else ``max(labels) + 1``."""
    largest = int(labels.max()) if labels.size else -1
    if num_classes is None:
        return max(largest + 1, 1)
    count = check_int("num_classes", owner, num_classes, 1)
    if largest >= count:
        raise invalid("num_classes", owner, f"larger than the largest label ({largest})", num_classes)
    return count


def frozen_view(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A read-only view of ``array`` (no copy; the caller's array keeps its own flags)."""
    view = array.view()
    view.flags.writeable = False
    return view
