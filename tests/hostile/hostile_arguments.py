"""Hostile values for a Python argument, derived from its annotation (issue 32 item 10, part 5).

:func:`arguments` reads the annotation's text (the library writes ``from __future__ import annotations``,
so ``inspect.signature`` gives strings such as ``"int"``, ``"npt.ArrayLike | None"``,
``"np.random.Generator"``) and returns the values a careless caller hands over: the wrong kinds, the
ends of an integer, the non-finite floats, arrays that are empty, ragged, of text, of NaN or of huge
values. Every argument also gets a pool that fits no annotation (an object, a function). A new
parameter of an entry point is covered by being annotated.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from hostile_values import Probe

__all__ = ["arguments"]


def _nested(depth: int) -> dict[str, Any]:
    """``{"a": {"a": ...}}``, ``depth`` levels."""
    table: dict[str, Any] = {}
    for _ in range(depth):
        table = {"a": table}
    return table


_GENERIC: dict[str, Any] = {
    "None": None,
    "an object": object(),
    "a function": len,
    "text": "x",
    "a table": {"nosuch": 1},
    "a list of None": [None],
    "NaN": math.nan,
}
_BY_KIND: dict[str, dict[str, Any]] = {
    "int": {
        "0": 0,
        "-1": -1,
        "2**63": 2**63,
        "10**400": 10**400,
        "true": True,
        "2.5": 2.5,
        "'3'": "3",
        "numpy int64 -1": np.int64(-1),
    },
    "float": {
        "inf": math.inf,
        "-inf": -math.inf,
        "-1.0": -1.0,
        "1e308": 1e308,
        "true": True,
        "'0.5'": "0.5",
        "10**400": 10**400,
    },
    "bool": {"1": 1, "'yes'": "yes", "numpy array of one true": np.array([True])},
    "str": {"empty": "", "two lines": "a\nb", "NUL": "a\x00b", "an int": 3, "unknown name": "nosuch"},
    "array": {
        "empty array": np.array([]),
        "array with NaN": np.array([1.0, math.nan, 2.0]),
        "array with inf": np.array([1.0, math.inf, 2.0]),
        "negative array": np.array([-1.0, 2.0, 3.0]),
        "2-D array": np.ones((2, 3)),
        "array of text": np.array(["a", "b", "c"]),
        "array of objects": np.array([1, None, 2], dtype=object),
        "array of 1e308": np.full(3, 1e308),
        "array of int64 max": np.full(3, 2**63 - 1),
        "list of 10**400": [10**400, 1, 1],
        "ragged list": [[1.0], [1.0, 2.0]],
        "bool array": np.array([True, False, True]),
        "complex array": np.array([1 + 1j, 2, 3]),
    },
    "generator": {
        "RandomState": np.random.RandomState(0),
        "an int seed": 0,
        "a SeedSequence": np.random.SeedSequence(0),
    },
    "sequence": {"empty list": [], "a string": "md", "a tuple of None": (None,), "a set": {1, 2}},
    "mapping": {"empty": {}, "int keys": {1: 2}, "a list": [("a", 1)], "nested 200 deep": _nested(200)},
}

# Annotation words -> kinds of value.
_WORDS: dict[str, str] = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "ArrayLike": "array",
    "FloatArray": "array",
    "IntArray": "array",
    "NDArray": "array",
    "Generator": "generator",
    "Sequence": "sequence",
    "Iterable": "sequence",
    "list": "sequence",
    "tuple": "sequence",
    "Mapping": "mapping",
    "dict": "mapping",
}


def arguments(annotation: object) -> list[Probe]:
    """The hostile values for an argument annotated ``annotation`` (its text), each once."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    words = set(re.findall(r"[A-Za-z_]+", text))
    kinds = sorted({kind for word, kind in _WORDS.items() if word in words})
    pool = dict(_GENERIC)
    for kind in kinds:
        pool |= {f"{label} ({kind})": value for label, value in _BY_KIND[kind].items()}
    return [Probe(label, value, None) for label, value in pool.items()]
