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

This module is the public face of all of it: encoding lives here, the checked decoding in
:mod:`fedsample._decoding`, the untyped JSON of reports in :mod:`fedsample._json_values`, and the
bounded reading of JSON files in :mod:`fedsample._reading`.

>>> import numpy as np
>>> loads(dumps({"a": np.arange(3)}))["a"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import numpy as np

from fedsample._decoding import from_jsonable, plain_data, registered
from fedsample._json_values import decode_floats, dump_json, encode_float, json_value, load_json
from fedsample._reading import MAX_JSON_DEPTH, json_depth, read_json_file
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
        if registered(name) is not type(obj):
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
    """A numeric array as its raw bytes in base64 (``_packed_arrays``; :func:`from_jsonable` reads it);
    anything else as :func:`to_jsonable` writes it."""
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "iuf":
        return to_jsonable(array)
    raw = np.ascontiguousarray(array).tobytes()
    return {"__ndarray__": array.dtype.str, "shape": list(array.shape), "base64": base64.b64encode(raw).decode("ascii")}


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
