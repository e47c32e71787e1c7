"""Array aliases and the read-only helper used to keep state immutable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fedsample._validation import invalid

__all__ = ["ArrayFields", "BoolArray", "DTypeTable", "FloatArray", "IntArray", "as_field_array", "frozen", "readonly"]

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
    A value is converted only when nothing is lost (:func:`as_field_array`): booleans stay booleans,
    client ids are whole numbers (``4.7`` is refused, not truncated), numbers are never strings.
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
                    object.__setattr__(self, name, readonly(as_field_array(value, dtype, name, type(self).__name__)))


# The kinds of input each kind of field takes: a bool field only booleans; an int field integers, or
# floats that are whole numbers; a float field any real number. Never a bool as a number, a number as
# a bool, or text.
_ACCEPTED_KINDS = {"b": "b", "i": "iuf", "u": "iuf", "f": "iuf"}
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "non-negative integers", "f": "real numbers"}


def as_field_array(value: object, dtype: npt.DTypeLike, name: str, owner: str) -> npt.NDArray[Any]:
    """``value`` as an array of ``dtype``, refused (the library's error naming ``name`` of ``owner``)
    when the conversion would change it: a bool from a number or a string, an int from a fraction."""
    target = np.dtype(dtype)
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise invalid(name, owner, f"an array of {_KIND_NAMES.get(target.kind, target.name)}", value) from exc
    if raw.dtype.kind not in _ACCEPTED_KINDS.get(target.kind, raw.dtype.kind):
        raise invalid(name, owner, f"an array of {_KIND_NAMES.get(target.kind, target.name)}", raw)
    if target.kind in "iu" and raw.dtype.kind == "f" and raw.size:
        whole = np.isfinite(raw) & (raw == np.trunc(raw))
        if not whole.all():
            raise invalid(name, owner, f"an array of {_KIND_NAMES[target.kind]} (whole numbers)", raw)
    return np.asarray(raw, dtype=target)
