"""Array aliases and the read-only helper used to keep state immutable."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "FloatArray", "IntArray", "frozen", "readonly"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def readonly(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return ``array`` (copied if it is a view of something writeable) with writes disabled."""
    if array.flags.writeable or array.base is not None:
        array = np.array(array, copy=True)
    array.flags.writeable = False
    return array


def frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Disable writes to ``array``, an array just built by the caller, without copying it.

    Only for arrays nobody else holds (the result of an arithmetic expression, not an argument):
    :func:`readonly` copies writeable inputs so a caller's later writes cannot reach the state;
    a fresh array has no other owner, so the copy would only cost time.
    """
    array.flags.writeable = False
    return array
