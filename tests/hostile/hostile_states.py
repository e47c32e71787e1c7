"""Generic edits of a saved sampler file, generated from the state's own encoding (issue 32 item 10).

:func:`edits` walks the JSON of ``sampler_to_dict`` (fedsample's encoding: ``{"__type__", "fields"}``
objects, ``{"__ndarray__", "shape", "data"|"base64"}`` arrays, tuples, dicts, encoded non-finite floats,
bare scalars) and yields, for every node it finds, the edits a careless or hostile hand makes: NaN and
the infinities into float arrays, negative, huge and fractional values, wrong shapes and dtypes, values
of the wrong JSON type, fields dropped and added, types renamed. Nothing here knows a sampler: a new
state class is covered by being saved.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Edit", "edits"]

Path = tuple[Any, ...]
NAN, INF, NINF = {"__float__": "nan"}, {"__float__": "inf"}, {"__float__": "-inf"}

# Values put in place of one element of an encoded array, or of a scalar field.
ELEMENTS: dict[str, Any] = {
    "NaN": NAN,
    "inf": INF,
    "-inf": NINF,
    "-1": -1,
    "-0.5": -0.5,
    "1e308": 1e308,
    "2**62": 2**62,
    "2**63": 2**63,
    "2**64": 2**64,
    "10**400": 10**400,
    "true": True,
    "text": "x",
    "null": None,
    "a list": [0.5],
    "an object": {"a": 1},
}
SCALARS: dict[str, Any] = {**ELEMENTS, "0": 0, "0.5": 0.5, "empty text": ""}


@dataclass(frozen=True)
class Edit:
    """One edit of a saved file: ``label`` says where and what, ``apply`` edits a copy of the file's JSON."""

    label: str
    apply: Callable[[dict[str, Any]], dict[str, Any]]


def edits(saved: dict[str, Any]) -> list[Edit]:
    """Every edit of ``saved`` (the JSON of a saved sampler), in a fixed order."""
    found = list(_top_level())
    found += [
        Edit(f"state{_show(path)} {label}", _at(("state", *path), change))
        for path, label, change in _walk(saved["state"], ())
    ]
    return found


def _top_level() -> Iterator[Edit]:
    for label, value in {"a list": [], "a number": 3, "text": "x", "null": None}.items():
        yield Edit(f"the whole file {label}", _constant(value))
        yield Edit(f"state {label}", _at(("state",), _constant(value)))
        yield Edit(f"params {label}", _at(("params",), _constant(value)))
    for key in ("format", "version", "sampler", "params", "state"):
        yield Edit(f"no {key}", _drop((), key))
    yield Edit("version 2", _at(("version",), lambda node: 2))
    yield Edit("version true", _at(("version",), lambda node: True))
    yield Edit("an extra key", _at((), lambda node: {**node, "extra": 1}))


Change = Callable[[Any], Any]


def _walk(node: Any, path: Path) -> Iterator[tuple[Path, str, Change]]:
    """(where, what, how) for every edit of ``node`` and of what it holds."""
    if isinstance(node, dict) and "__type__" in node:
        yield from _object_edits(node, path)
        for key, value in node.get("fields", {}).items():
            yield from _walk(value, (*path, "fields", key))
    elif isinstance(node, dict) and "__ndarray__" in node:
        yield from _array_edits(node, path)
    elif isinstance(node, dict) and "__tuple__" in node:
        yield path, "tuple of nothing", lambda old: {"__tuple__": []}
        for index, value in enumerate(node["__tuple__"]):
            yield from _walk(value, (*path, "__tuple__", index))
    elif isinstance(node, dict) and "__dict__" in node:
        yield path, "extra entry", lambda old: {"__dict__": {**old["__dict__"], "extra": 1}}
        for key, value in node["__dict__"].items():
            yield from _walk(value, (*path, "__dict__", key))
    elif isinstance(node, list):
        yield path, "empty list", lambda old: []
        for index, value in enumerate(node):
            yield from _walk(value, (*path, index))
    else:  # a scalar, or an encoded non-finite float
        for label, value in SCALARS.items():
            if value != node or type(value) is not type(node):
                yield path, f"= {label}", _constant(value)


def _object_edits(node: dict[str, Any], path: Path) -> Iterator[tuple[Path, str, Change]]:
    yield path, "renamed to an unknown type", lambda old: {**old, "__type__": "NoSuchState"}
    yield path, "renamed to Selection", lambda old: {**old, "__type__": "Selection"}
    yield path, "fields a list", lambda old: {**old, "fields": []}
    yield path, "no fields", lambda old: {"__type__": old["__type__"]}
    yield path, "an extra field", lambda old: {**old, "fields": {**old["fields"], "extra": 1}}
    for key in node.get("fields", {}):
        yield path, f"without {key}", _without(key)


def _array_edits(node: dict[str, Any], path: Path) -> Iterator[tuple[Path, str, Change]]:
    shape = list(node.get("shape", []))
    if node.get("data"):
        for label, value in ELEMENTS.items():
            yield path, f"[0] = {label}", _first_element(value)
        yield path, "one value short", lambda old: {**old, "data": old["data"][:-1]}
        yield path, "every value negated", lambda old: {**old, "data": [_negate(v) for v in old["data"]]}
        yield (
            path,
            "every value zero",
            lambda old: {**old, "data": [False if v is True or v is False else 0 for v in old["data"]]},
        )
    if "base64" in node:
        yield path, "base64 garbage", lambda old: {**old, "base64": "!!not base64!!"}
        yield path, "base64 one byte short", lambda old: {**old, "base64": old["base64"][:-4]}
    for dtype in ("<f8", "<i8", "|b1", "<c16", "|O", "<U3", "<f2", "|u1"):
        if dtype != node["__ndarray__"]:
            yield path, f"dtype {dtype}", _dtype(dtype)
    if shape:
        yield path, "one row more in its shape", lambda old: {**old, "shape": [old["shape"][0] + 1, *old["shape"][1:]]}
        yield path, "shape flattened and doubled", lambda old: {**old, "shape": [2, *old["shape"]]}
    yield path, "shape 2**40", lambda old: {**old, "shape": [2**40]}
    yield path, "shape -1", lambda old: {**old, "shape": [-1]}
    yield (
        path,
        "empty",
        lambda old: {**old, "shape": [0], "data": []} if "data" in old else {**old, "shape": [0], "base64": ""},
    )
    yield path, "a bare list", lambda old: old.get("data", [0.5])


def _constant(value: Any) -> Change:
    return lambda old: copy.deepcopy(value)


def _first_element(value: Any) -> Change:
    return lambda old: {**old, "data": [copy.deepcopy(value), *old["data"][1:]]}


def _dtype(dtype: str) -> Change:
    return lambda old: {**old, "__ndarray__": dtype}


def _without(key: str) -> Change:
    return lambda old: {**old, "fields": {k: v for k, v in old["fields"].items() if k != key}}


def _negate(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return -value if value else -1


def _at(path: Path, change: Change) -> Callable[[dict[str, Any]], Any]:
    def apply(data: dict[str, Any]) -> Any:
        data = copy.deepcopy(data)
        if not path:
            return change(data)
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = change(node[path[-1]])
        return data

    return apply


def _drop(path: Path, key: str) -> Callable[[dict[str, Any]], Any]:
    def apply(data: dict[str, Any]) -> Any:
        data = copy.deepcopy(data)
        node = data
        for step in path:
            node = node[step]
        node.pop(key, None)
        return data

    return apply


def _show(path: Path) -> str:
    return "".join(
        f".{key}"
        if isinstance(key, str) and key != "fields" and not key.startswith("__")
        else f"[{key}]"
        if isinstance(key, int)
        else ""
        for key in path
    )
