"""JSON in fedsample: the round-trip of plain-data objects (sampler states, designs, selections) and
the one encoding of non-finite floats that every JSON file and output of fedsample uses.

A non-finite float is written ``{"__float__": "nan"}`` (or ``"inf"``, ``"-inf"``), never as the
bare ``NaN``/``Infinity`` tokens that strict JSON readers refuse (:func:`encode_float`). The
untyped JSON of reports (``runs.json``, ``quadratic.json``, ``fedsample stats --json``, a run
directory's manifest) goes through :func:`dump_json` and :func:`load_json`; :func:`load_json` also
reads the bare tokens that earlier versions wrote into such files.

Only frozen dataclasses registered with :func:`plain_data` are encoded by name and decoded back,
so decoding never imports or runs anything chosen by the file. Arrays keep their dtype and shape;
floats survive exactly (Python writes the shortest repr that round-trips). A plain-data class may
name bulky numeric array fields in ``_packed_arrays``: each is written as its raw bytes in base64
(``{"__ndarray__": "<f4", "shape": [...], "base64": "..."}``), 5.3 characters per float32 where
its decimals take about 20, and read back bit for bit. A field that an earlier version saved and
the class now derives is named in its ``_formerly_saved`` and ignored when read. Given an ``arrays``
list, arrays are not written into the JSON but appended to it and referred to by position, for
files that store them in binary beside the JSON (checkpoints, :mod:`fedsample.engine.checkpoint`).

>>> import numpy as np
>>> loads(dumps({"a": np.arange(3)}))["a"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
import os
import re
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from fedsample._arrays import readonly
from fedsample._invariants import FieldError
from fedsample._reading import open_input
from fedsample.errors import FedsampleError

__all__ = [
    "MAX_JSON_DEPTH",
    "decode_floats",
    "dump_json",
    "dumps",
    "encode_float",
    "from_jsonable",
    "json_depth",
    "json_value",
    "load_json",
    "loads",
    "plain_data",
    "read_json_file",
    "to_jsonable",
]

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


def _setstate_readonly(self: object, state: dict[str, Any]) -> None:
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            value = readonly(value)
        object.__setattr__(self, key, value)


def encode_float(x: float) -> float | dict[str, str]:
    """``x`` as JSON: itself when finite, else ``{"__float__": "nan" | "inf" | "-inf"}``.

    >>> encode_float(0.5), encode_float(float("-inf"))
    (0.5, {'__float__': '-inf'})
    """
    if math.isfinite(x):
        return x
    return {_FLOAT_TAG: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


_FLOAT_TAG = "__float__"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def json_value(value: Any) -> Any:
    """``value`` as untyped JSON for a report: mappings (keys as strings), sequences and arrays as
    lists, numpy scalars as Python numbers, non-finite floats by :func:`encode_float`; anything
    else is written as its ``repr`` (a description, not a value to read back).

    >>> json_value({"eta": np.float64("inf"), "rows": np.arange(2)})
    {'eta': {'__float__': 'inf'}, 'rows': [0, 1]}
    """
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_value(value.tolist())
    if isinstance(value, np.generic):
        return json_value(value.item())
    if isinstance(value, float):
        return encode_float(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return repr(value)


def decode_floats(value: Any) -> Any:
    """Invert :func:`json_value`'s float encoding in parsed JSON: every ``{"__float__": ...}`` becomes its float."""
    if isinstance(value, dict):
        tag = value.get(_FLOAT_TAG)
        if len(value) == 1 and isinstance(tag, str) and tag in _NON_FINITE:
            return _NON_FINITE[tag]
        return {k: decode_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_floats(v) for v in value]
    return value


def dump_json(value: Any, *, indent: int | None = None) -> str:
    """``value`` (through :func:`json_value`) as strict JSON text."""
    return json.dumps(json_value(value), indent=indent, allow_nan=False)


def load_json(text: str | bytes) -> Any:
    """Parse JSON written by :func:`dump_json`, non-finite floats decoded; the bare ``NaN`` and
    ``Infinity`` tokens of files written before are read as the floats they meant."""
    return decode_floats(json.loads(text))


def to_jsonable(obj: Any, *, arrays: list[np.ndarray] | None = None) -> Any:
    """Convert ``obj`` into values that :func:`json.dumps` accepts, keeping enough type tags to invert.

    With ``arrays``, each array is appended to that list and encoded as its position there;
    :func:`from_jsonable` makes the arrays it takes from that list read-only.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return encode_float(float(obj))
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"cannot encode an array of dtype {obj.dtype}")
        if arrays is not None:
            arrays.append(obj)
            return {"__array__": len(arrays) - 1}
        data: list[Any] = obj.ravel().tolist()
        if obj.dtype.kind == "f" and not np.all(np.isfinite(obj)):
            data = [encode_float(x) for x in data]
        return {"__ndarray__": obj.dtype.str, "shape": list(obj.shape), "data": data}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = type(obj).__name__
        if _REGISTRY.get(name) is not type(obj):
            raise TypeError(f"{name} is not registered as plain data")
        # Derived fields (init=False) are rebuilt by the constructor on load.
        # Packed fields only in JSON text: with ``arrays`` (a checkpoint) every array is stored in binary.
        packed = getattr(type(obj), "_packed_arrays", ()) if arrays is None else ()
        fields = {
            f.name: _packed_array(getattr(obj, f.name))
            if f.name in packed
            else to_jsonable(getattr(obj, f.name), arrays=arrays)
            for f in dataclasses.fields(obj)
            if f.init
        }
        return {"__type__": name, "fields": fields}
    if isinstance(obj, tuple):
        return {"__tuple__": [to_jsonable(v, arrays=arrays) for v in obj]}
    if isinstance(obj, list):
        return [to_jsonable(v, arrays=arrays) for v in obj]
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("only dicts with string keys can be encoded")
        return {"__dict__": {k: to_jsonable(v, arrays=arrays) for k, v in obj.items()}}
    raise TypeError(f"cannot encode an object of type {type(obj).__name__}")


def _packed_array(array: Any) -> Any:
    """A numeric array as its raw bytes in base64 (``_packed_arrays``; :func:`_decode_array` reads it);
    anything else as :func:`to_jsonable` writes it."""
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "iuf":
        return to_jsonable(array)
    raw = np.ascontiguousarray(array).tobytes()
    return {"__ndarray__": array.dtype.str, "shape": list(array.shape), "base64": base64.b64encode(raw).decode("ascii")}


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
        if _FLOAT_TAG in data:
            return float(data[_FLOAT_TAG])
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


# A fedsample JSON file nests a few levels (an object, its fields, a nested design, an array
# entry): refusing anything deeper before parsing keeps a crafted file from exhausting the stack.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPENERS = np.zeros(256, dtype=np.int8)
_OPENERS[[ord("["), ord("{")]] = 1
_OPENERS[[ord("]"), ord("}")]] = -1


def json_depth(data: bytes) -> int:
    """How deeply the arrays and objects of the JSON text ``data`` nest (0 for a bare value)."""
    body = _JSON_STRING.sub(b'""', data) if b'"' in data else data
    codes = np.frombuffer(body, dtype=np.uint8)
    steps = _OPENERS[codes[np.flatnonzero(_OPENERS[codes])]].astype(np.int32)
    return int(np.cumsum(steps).max()) if steps.size else 0


def read_json_file(path: str | os.PathLike[str], *, parameter: str, max_bytes: int) -> Any:
    """The JSON value in the file at ``path``, read with bounds: at most ``max_bytes`` bytes of UTF-8
    text nested at most :data:`MAX_JSON_DEPTH` deep. Every failure is one :class:`FedsampleError`."""
    name = str(path)
    try:
        with open_input(path) as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise FedsampleError(
            f"The {parameter!r} parameter must name a readable file. Got {name!r} ({exc.strerror or exc}) instead.",
            parameter=parameter,
        ) from None
    problem = ""
    if len(data) > max_bytes:
        problem = f"more than {max_bytes} bytes"
    else:
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark (an editor's) is not part of the JSON
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 text (byte {exc.start})"
        else:
            depth = json_depth(data)
            if depth > MAX_JSON_DEPTH:
                problem = f"JSON nested {depth} deep, beyond {MAX_JSON_DEPTH}"
            else:
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    problem = f"not JSON (line {exc.lineno}: {exc.msg})"
                except ValueError:  # Python reads no int of more than 4300 digits (int_max_str_digits)
                    problem = "an int of more than 4300 digits"
    raise FedsampleError(
        f"The {parameter!r} parameter must name a JSON file of at most {max_bytes} bytes. Got {name!r} "
        f"({problem}) instead.",
        parameter=parameter,
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


def dumps(obj: Any) -> str:
    """Encode ``obj`` as a JSON string (plain data: registered dataclasses, numeric arrays, numbers,
    strings, lists, tuples and dicts with string keys; anything else is the library's error)."""
    try:
        return json.dumps(to_jsonable(obj), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        message = " ".join(str(exc).split())
        raise FedsampleError(
            f"The 'obj' parameter of dumps must be plain data that fedsample encodes. Got "
            f"{type(obj).__name__} ({type(exc).__name__}: {message[:120]}) instead.",
            parameter="obj",
        ) from None


def loads(text: str | bytes) -> Any:
    """Decode a string written by :func:`dumps`; text that is not such a string (not JSON, nested
    beyond :data:`MAX_JSON_DEPTH`, or not fedsample's encoding) is the library's error."""
    if not isinstance(text, (str, bytes)):
        raise FedsampleError(
            f"The 'text' parameter of loads must be a JSON string written by dumps. Got {type(text).__name__} instead.",
            parameter="text",
        )
    data = text.encode("utf-8", errors="surrogatepass") if isinstance(text, str) else text
    depth = json_depth(data)
    problem = f"JSON nested {depth} deep, beyond {MAX_JSON_DEPTH}" if depth > MAX_JSON_DEPTH else ""
    if not problem:
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            problem = f"not JSON (line {exc.lineno}: {exc.msg})"
        except (ValueError, RecursionError) as exc:  # an int of more than 4300 digits; bytes not UTF-8
            problem = f"not readable JSON ({type(exc).__name__}: {' '.join(str(exc).split())[:80]})"
    if problem:
        raise FedsampleError(
            f"The 'text' parameter of loads must be a JSON string written by dumps. Got text that is {problem} "
            "instead.",
            parameter="text",
        )
    try:
        return from_jsonable(parsed)
    except FedsampleError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        raise FedsampleError(
            f"The 'text' parameter of loads must be fedsample's JSON encoding. Got JSON that cannot be decoded "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]}) instead.",
            parameter="text",
        ) from None
