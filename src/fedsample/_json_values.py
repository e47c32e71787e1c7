"""JSON values in fedsample: the one encoding of non-finite floats, and the untyped JSON of reports.

A non-finite float is written ``{"__float__": "nan"}`` (or ``"inf"``, ``"-inf"``), never as the
bare ``NaN``/``Infinity`` tokens that strict JSON readers refuse (:func:`encode_float`); the typed
encoding of plain data (:mod:`fedsample.serialization`) writes it the same way. The untyped JSON of
reports (``runs.json``, ``quadratic.json``, ``fedsample stats --json``, a run directory's manifest)
goes through :func:`dump_json` and :func:`load_json`; :func:`load_json` also reads the bare tokens
that earlier versions wrote into such files. The public names are those of
:mod:`fedsample.serialization`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

__all__ = ["FLOAT_TAG", "NON_FINITE", "decode_floats", "dump_json", "encode_float", "json_value", "load_json"]

# The key of an encoded non-finite float, and the floats its values stand for.
FLOAT_TAG = "__float__"
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_float(x: float) -> float | dict[str, str]:
    """``x`` as JSON: itself when finite, else ``{"__float__": "nan" | "inf" | "-inf"}``.

    >>> encode_float(0.5), encode_float(float("-inf"))
    (0.5, {'__float__': '-inf'})
    """
    if math.isfinite(x):
        return x
    return {FLOAT_TAG: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


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
        tag = value.get(FLOAT_TAG)
        if len(value) == 1 and isinstance(tag, str) and tag in NON_FINITE:
            return NON_FINITE[tag]
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
