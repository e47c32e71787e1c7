"""JSON round-trip for fedsample's plain-data objects (sampler states, designs, selections).

Only frozen dataclasses registered with :func:`plain_data` are encoded by name and decoded back,
so decoding never imports or runs anything chosen by the file. Arrays keep their dtype and shape;
floats survive exactly (Python writes the shortest repr that round-trips). Given an ``arrays``
list, arrays are not written into the JSON but appended to it and referred to by position, for
files that store them in binary beside the JSON (checkpoints, :mod:`fedsample.engine.checkpoint`).

>>> import numpy as np
>>> loads(dumps({"a": np.arange(3)}))["a"].tolist()
[0, 1, 2]
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from fedsample._arrays import readonly
from fedsample.errors import FedsampleError

__all__ = ["dumps", "from_jsonable", "loads", "plain_data", "to_jsonable"]

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


def _encode_float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {"__float__": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


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
        return _encode_float(float(obj))
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"cannot encode an array of dtype {obj.dtype}")
        if arrays is not None:
            arrays.append(obj)
            return {"__array__": len(arrays) - 1}
        data: list[Any] = obj.ravel().tolist()
        if obj.dtype.kind == "f" and not np.all(np.isfinite(obj)):
            data = [_encode_float(x) for x in data]
        return {"__ndarray__": obj.dtype.str, "shape": list(obj.shape), "data": data}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = type(obj).__name__
        if _REGISTRY.get(name) is not type(obj):
            raise TypeError(f"{name} is not registered as plain data")
        # Derived fields (init=False) are rebuilt by the constructor on load.
        fields = {f.name: to_jsonable(getattr(obj, f.name), arrays=arrays) for f in dataclasses.fields(obj) if f.init}
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
        if "__float__" in data:
            return float(data["__float__"])
        if "__ndarray__" in data:
            dtype = np.dtype(data["__ndarray__"])
            values = [from_jsonable(v) if isinstance(v, dict) else v for v in data["data"]]
            return readonly(np.array(values, dtype=dtype).reshape(data["shape"]))
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
            fields = {k: from_jsonable(v, arrays=arrays) for k, v in data["fields"].items()}
            return cls(**fields)
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


def dumps(obj: Any) -> str:
    """Encode ``obj`` as a JSON string."""
    return json.dumps(to_jsonable(obj), allow_nan=False)


def loads(text: str) -> Any:
    """Decode a string written by :func:`dumps`."""
    return from_jsonable(json.loads(text))
