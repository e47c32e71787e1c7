"""Decoding fedsample's JSON back into plain data, checked as it is built.

Only frozen dataclasses registered with :func:`plain_data` are decoded by name, so decoding never
imports or runs anything chosen by the file. Each decoded field is checked against what its class
declares (booleans are booleans, numbers numbers, arrays of the declared dtype kind), the object is
built, then its own invariants are checked; any failure is one
:class:`~fedsample._invariants.FieldError` naming the field's path. :func:`from_jsonable` inverts
:func:`fedsample.serialization.to_jsonable`; the public names are those of :mod:`fedsample.serialization`.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from fedsample._arrays import readonly
from fedsample._invariants import FieldError
from fedsample._json_values import FLOAT_TAG
from fedsample.errors import FedsampleError

__all__ = ["from_jsonable", "plain_data", "registered"]

_REGISTRY: dict[str, type] = {}
T = TypeVar("T", bound=type)


def plain_data(cls: T) -> T:
    """Register a dataclass so that its instances round-trip through JSON."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to be registered as plain data")
    name = cls.__name__
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise TypeError(f"two plain-data classes are named {name}")
    _REGISTRY[name] = cls
    # Arrays held by a state are read-only; pickling drops that flag, so restore it on load.
    cls.__setstate__ = _setstate_readonly  # type: ignore[attr-defined]
    return cls


def registered(name: str) -> type | None:
    """The plain-data class registered under ``name``, if any."""
    return _REGISTRY.get(name)


def _setstate_readonly(self: object, state: dict[str, Any]) -> None:
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            value = readonly(value)
        object.__setattr__(self, key, value)


def from_jsonable(data: Any, *, arrays: Sequence[np.ndarray] | None = None) -> Any:
    """Invert :func:`to_jsonable` (``arrays``: the list it filled, if any)."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [from_jsonable(v, arrays=arrays) for v in data]
    if isinstance(data, dict):
        if "__array__" in data:
            stored = _stored_array(data["__array__"], arrays)
            if stored.base is None and stored.flags.owndata:  # the reader's own array: no copy needed
                stored.flags.writeable = False
                return stored
            return readonly(stored)
        if FLOAT_TAG in data:
            return float(data[FLOAT_TAG])
        if "__ndarray__" in data:
            return _decode_array(data)
        if "__tuple__" in data:
            return tuple(from_jsonable(v, arrays=arrays) for v in data["__tuple__"])
        if "__dict__" in data:
            return {k: from_jsonable(v, arrays=arrays) for k, v in data["__dict__"].items()}
        if "__type__" in data:
            cls = _REGISTRY.get(data["__type__"])
            if cls is None:
                raise FedsampleError(
                    f"The 'state' parameter of from_jsonable must name a known plain-data type. "
                    f"Got {data['__type__']!r} instead.",
                    parameter="state",
                )
            return _decode_object(cls, data.get("fields"), arrays)
    raise FedsampleError(
        f"The 'state' parameter of from_jsonable must be fedsample's JSON encoding. Got {data!r:.80} instead.",
        parameter="state",
    )


def _stored_array(index: Any, arrays: Sequence[np.ndarray] | None) -> np.ndarray:
    """The array that ``{"__array__": index}`` refers to."""
    count = 0 if arrays is None else len(arrays)
    if arrays is None or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise FedsampleError(
            f"The 'state' parameter of from_jsonable must refer to one of its {count} stored arrays. "
            f"Got {index!r:.40} instead.",
            parameter="state",
        )
    return arrays[index]


def _decode_array(data: dict[str, Any]) -> np.ndarray:
    """An ``{"__ndarray__": dtype, "shape": [...], "data": [...]}`` entry: numeric dtypes only, as written."""
    try:
        dtype = np.dtype(data["__ndarray__"])
    except (TypeError, ValueError):
        dtype = np.dtype(object)
    if dtype.kind not in "biuf":
        got = f"{data['__ndarray__']!r:.40}"
        raise FieldError("an encoded array", "", "of a numeric dtype (bool, int or float)", got)
    if "base64" in data and "data" not in data:
        return _decode_packed(data, dtype)
    values, shape = data.get("data"), data.get("shape")
    if (
        not isinstance(values, list)
        or not isinstance(shape, list)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        or math.prod(shape) != len(values)
    ):
        got = f"shape {shape!r:.40} with {len(values) if isinstance(values, list) else 'no'} values"
        raise FieldError("an encoded array", "", "a list of values matching its shape", got)
    decoded = [from_jsonable(v) if isinstance(v, dict) else v for v in values]
    takes = _ELEMENT_TYPES[dtype.kind]
    for position, value in enumerate(decoded):
        # JSON's true is not a number, a number not a bool: np.array would turn "x", NaN or 1e30 into True.
        if isinstance(value, bool) is not (dtype.kind == "b") or not isinstance(value, takes):
            got = f"{value!r:.40} at position {position}"
            raise FieldError("an encoded array", "", f"values of dtype {dtype} ({_KIND_WORDS[dtype.kind]})", got)
    try:
        with np.errstate(over="raise", invalid="raise"):  # 1e308 in a float32 array: refused, not made inf
            return readonly(np.array(decoded, dtype=dtype).reshape(shape))
    except (TypeError, ValueError, OverflowError, FloatingPointError) as exc:
        raise FieldError("an encoded array", "", f"values of dtype {dtype}", f"{type(exc).__name__}: {exc}") from None


def _decode_packed(data: dict[str, Any], dtype: np.dtype[Any]) -> np.ndarray:
    """A ``{"__ndarray__": dtype, "shape": [...], "base64": "..."}`` entry: the raw bytes of a numeric
    array (not of booleans, whose bytes could hold values other than 0 and 1)."""
    text, shape = data.get("base64"), data.get("shape")
    if (
        dtype.kind not in "iuf"
        or not isinstance(text, str)
        or not isinstance(shape, list)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        got = f"dtype {dtype}, shape {shape!r:.40} and base64 of type {type(text).__name__}"
        raise FieldError("an encoded array", "", "packed numbers: a shape and its values' bytes in base64", got)
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as exc:  # binascii.Error is a ValueError
        raise FieldError("an encoded array", "", "bytes in base64", f"{type(exc).__name__}: {exc}") from None
    if len(raw) != math.prod(shape) * dtype.itemsize:
        got = f"{len(raw)} bytes for shape {shape}"
        raise FieldError("an encoded array", "", f"{dtype.itemsize} bytes per value of its shape", got)
    return readonly(np.frombuffer(raw, dtype=dtype).reshape(shape))


# The JSON values each kind of array holds: booleans for a bool array, integers for an int array,
# numbers (or the encoding of a non-finite float) for a float array.
_ELEMENT_TYPES: dict[str, type | tuple[type, ...]] = {"b": bool, "i": int, "u": int, "f": (int, float)}
_KIND_WORDS = {"b": "true or false", "i": "integers", "u": "integers", "f": "numbers"}


def _decode_object(cls: type, encoded: Any, arrays: Sequence[np.ndarray] | None) -> Any:
    """A registered plain-data object: its fields decoded, the object built, then its invariants checked.

    Any failure is a :class:`~fedsample._invariants.FieldError` naming the field's path inside ``cls``.
    """
    owner = cls.__name__
    if not isinstance(encoded, dict):
        raise FieldError(owner, "fields", "a mapping of field names to values", f"{type(encoded).__name__}")
    fields = {}
    rules = _field_rules(cls)
    # Fields that earlier versions saved and the class now derives on construction: read past.
    formerly_saved = getattr(cls, "_formerly_saved", ())
    for key, value in encoded.items():
        if key in formerly_saved:
            continue
        try:
            fields[key] = from_jsonable(value, arrays=arrays)
        except FieldError as exc:
            raise exc.within(owner, key) from None
        except FedsampleError as exc:
            raise FieldError(owner, key, "fedsample's JSON encoding", str(exc)) from None
        if key in rules:
            _check_field(owner, key, fields[key], *rules[key])
    try:
        # The fields are unchecked until check_invariants below: the values it refuses (inf, NaN) may
        # warn while the constructor derives its own fields from them (a BernoulliDesign's buckets).
        with np.errstate(all="ignore"):
            obj = cls(**fields)
    except FieldError:
        raise
    except FedsampleError as exc:
        raise FieldError(owner, exc.parameter or "fields", "valid", str(exc)) from None
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise FieldError(owner, "fields", f"the fields of a {owner}", f"{type(exc).__name__}: {exc}") from None
    check = getattr(cls, "check_invariants", None)
    if check is not None:
        check(obj)
    return obj


# A field's annotation (as written, under ``from __future__ import annotations``) -> what it holds:
# a scalar of these Python types, or an array of these dtype kinds.
_SCALAR_FIELDS: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}
_ARRAY_FIELDS = {
    "FloatArray": "iuf",
    "Float32Array": "iuf",
    "IntArray": "iu",
    "BoolArray": "b",
    "npt.NDArray[np.signedinteger[Any]]": "iu",
}
_DTYPE_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


@functools.cache
def _field_rules(cls: type) -> dict[str, tuple[str, str, bool]]:
    """For each field of the plain-data class ``cls`` whose type is known: ``(what, kinds, optional)``,
    ``what`` being ``"scalar"`` (``kinds`` the annotation) or ``"array"`` (``kinds`` the dtype kinds)."""
    dtypes: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        dtypes.update(vars(klass).get("_array_dtypes", {}))
    rules: dict[str, tuple[str, str, bool]] = {}
    for field in dataclasses.fields(cls):
        annotation = str(field.type)
        optional = annotation.endswith(" | None")
        base = annotation.removesuffix(" | None")
        if field.name in dtypes:
            rules[field.name] = ("array", _DTYPE_KINDS[np.dtype(dtypes[field.name]).kind], optional)
        elif base in _ARRAY_FIELDS:
            rules[field.name] = ("array", _ARRAY_FIELDS[base], optional)
        elif base in _SCALAR_FIELDS:
            rules[field.name] = ("scalar", base, optional)
    return rules


def _check_field(owner: str, name: str, value: Any, what: str, kinds: str, optional: bool) -> None:
    """Refuse a decoded field that is not what its class declares: booleans are booleans, numbers are
    numbers (``true`` is not 1, ``"0.5"`` is not 0.5), arrays are encoded arrays of the declared kind."""
    if value is None and optional:
        return
    if what == "scalar":
        takes = _SCALAR_FIELDS[kinds]
        if isinstance(value, bool) is not (kinds == "bool") or not isinstance(value, takes):
            rule = f"{'an' if kinds == 'int' else 'a'} {kinds}{' or None' if optional else ''}"
            raise FieldError(owner, name, rule, f"{value!r:.60} of type {type(value).__name__}")
        return
    words = {"b": "booleans", "iu": "integers", "iuf": "numbers"}[kinds]
    if not isinstance(value, np.ndarray):
        raise FieldError(owner, name, f"an encoded array of {words}", f"{value!r:.60} of type {type(value).__name__}")
    if value.dtype.kind not in kinds:
        raise FieldError(owner, name, f"an encoded array of {words}", f"an array of dtype {value.dtype}")
