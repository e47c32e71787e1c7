"""Array aliases and the read-only helper used to keep state immutable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

__all__ = ["ArrayFields", "BoolArray", "DTypeTable", "FloatArray", "IntArray", "frozen", "readonly"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
# Array fields of a frozen dataclass and the dtype each is stored in (see ArrayFields).
DTypeTable = Mapping[str, npt.DTypeLike]


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


class ArrayFields:
    """Mixin for a frozen dataclass whose array fields are declared once, in ``_array_dtypes``.

    ``__post_init__`` stores each named field as a read-only array of its dtype (copied when the
    caller passed a writeable array, see :func:`readonly`); a field that is ``None`` stays ``None``.
    Each class declares its own array fields: a subclass's table adds to its bases'. A class with
    more to check calls ``super().__post_init__()`` first.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Counts(ArrayFields):
    ...     _array_dtypes: ClassVar[DTypeTable] = {"counts": np.int64}
    ...     counts: IntArray
    >>> Counts([1, 2]).counts.flags.writeable
    False
    """

    _array_dtypes: ClassVar[DTypeTable] = {}

    def __post_init__(self) -> None:
        for cls in type(self).__mro__:
            for name, dtype in vars(cls).get("_array_dtypes", {}).items():
                value = getattr(self, name)
                if value is not None:
                    object.__setattr__(self, name, readonly(np.asarray(value, dtype=dtype)))
