"""Hostile values derived from a declared constraint (issue 32 item 10): the values at and around its
bounds, of the wrong type, and the non-finite and huge ones, each with what the declaration says of it.

:func:`probes` reads the constraint objects of :mod:`fedsample._validation` (``Interval``, ``Options``,
``Boolean``, ``NoneOr``, ``Text``, ``OptionsOrPath``); any other constraint (a component's own class)
gets a generic pool of values, and the constraint itself says which of them it takes. So a parameter
added to a table, with any constraint, is probed without an edit here.

>>> from fedsample._validation import Interval
>>> [(p.label, p.value, p.inside) for p in probes(Interval(int, 1, 3, closed="both"))][:4]
[('left', 1, True), ('left-1', 0, False), ('left+1', 2, True), ('right', 3, True)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from fedsample._validation import Boolean, Interval, NoneOr, Options, OptionsOrPath, Text
from fedsample.errors import FedsampleError

__all__ = ["Probe", "assert_one_line", "declared_inside", "inside_strategy", "probes"]

HUGE_INTS = {"2**63-1": 2**63 - 1, "2**63": 2**63, "2**64": 2**64, "10**40": 10**40, "10**400": 10**400}


@dataclass(frozen=True)
class Probe:
    """A value for a parameter: ``label`` says how it was derived, ``inside`` whether the declaration
    takes it (``None``: the constraint is the only judge, for constraints this module does not read)."""

    label: str
    value: Any
    inside: bool | None


def probes(constraint: object) -> list[Probe]:
    """The hostile values of ``constraint``, each once (by type and value), in a fixed order."""
    found: list[Probe] = []
    seen: set[tuple[str, str]] = set()
    for probe in _derive(constraint):
        key = (type(probe.value).__name__, repr(probe.value))
        if key not in seen:
            seen.add(key)
            found.append(probe)
    return found


def declared_inside(constraint: Any, probe: Probe) -> bool:
    """Whether the declaration takes ``probe``: its own judgement where it has one, else the constraint's."""
    if probe.inside is not None:
        return probe.inside
    return bool(constraint.is_satisfied_by(probe.value))


def _derive(constraint: object) -> Iterator[Probe]:
    if isinstance(constraint, NoneOr):
        yield Probe("None", None, True)
        yield from (p for p in _derive(constraint.inner) if p.value is not None)
    elif isinstance(constraint, Interval):
        yield from (_int_probes if constraint.kind is int else _float_probes)(constraint)
    elif isinstance(constraint, Options):
        yield from _option_probes(constraint.values)
    elif isinstance(constraint, OptionsOrPath):
        yield from _option_probes(constraint.values)
        for suffix in constraint.suffixes:
            yield Probe(f"a missing {suffix} file", f"nowhere{suffix}", None)
        yield Probe("a bare suffix", constraint.suffixes[0], None)
    elif isinstance(constraint, Boolean):
        yield from (Probe("true", True, True), Probe("false", False, True), Probe("numpy true", np.True_, True))
        yield from (Probe("1", 1, False), Probe("0", 0, False), Probe("'true'", "true", False))
        yield Probe("None", None, False)
    elif isinstance(constraint, Text):
        yield from (Probe(f"name {name!r}", name, None) for name in constraint.names)
        yield from _generic_probes()
    else:
        yield from _generic_probes()


def _int_probes(interval: Interval) -> Iterator[Probe]:
    left_open = interval.closed in ("right", "neither")
    right_open = interval.closed in ("left", "neither")
    first = last = None
    if interval.left is not None:
        left = math.ceil(interval.left)
        first = left + 1 if left_open and left == interval.left else left
        yield Probe("left", left, not (left_open and left == interval.left))
        yield Probe("left-1", left - 1, False)
        yield Probe("left+1", left + 1, interval.right is None or left + 1 <= interval.right)
    if interval.right is not None:
        right = math.floor(interval.right)
        last = right - 1 if right_open and right == interval.right else right
        yield Probe("right", right, not (right_open and right == interval.right))
        yield Probe("right+1", right + 1, False)
        yield Probe("right-1", right - 1, interval.left is None or right - 1 >= interval.left)
    some = first if first is not None else last if last is not None else 0
    if first is not None and last is not None and last >= first:
        yield Probe("middle", (first + last) // 2, True)
    yield Probe("numpy int64", np.int64(some), True)
    yield Probe("float", float(some), False)
    yield Probe("true", True, False)
    yield Probe("text", str(some), False)
    yield Probe("None", None, False)
    yield Probe("NaN", math.nan, False)
    for label, huge in HUGE_INTS.items():
        yield Probe(label, huge, interval.right is None or huge <= interval.right)
    yield Probe("-2**63", -(2**63), interval.left is None)


def _float_probes(interval: Interval) -> Iterator[Probe]:
    left_open = interval.closed in ("right", "neither")
    right_open = interval.closed in ("left", "neither")
    low = -math.inf if interval.left is None else float(interval.left)
    high = math.inf if interval.right is None else float(interval.right)
    if interval.left is not None:
        yield Probe("left", low, not left_open)
        yield Probe("below left", math.nextafter(low, -math.inf), False)
        yield Probe("above left", math.nextafter(low, math.inf), math.nextafter(low, math.inf) <= high)
    if interval.right is not None:
        yield Probe("right", high, not right_open)
        yield Probe("above right", math.nextafter(high, math.inf), False)
        yield Probe("below right", math.nextafter(high, -math.inf), math.nextafter(high, -math.inf) >= low)
    middle = _middle(low, high)
    yield Probe("middle", middle, True)
    if abs(middle) < 1e38:
        single = np.float32(middle)
        yield Probe("numpy float32", single, low < float(single) < high)
    if float(round(middle)) > low and float(round(middle)) < high:
        yield Probe("an int", round(middle), True)
    # A bound of None is infinite and taken: Interval(float, 0, None) takes inf (a budget of inf is no privacy).
    yield Probe("inf", math.inf, interval.right is None)
    yield Probe("-inf", -math.inf, interval.left is None)
    yield Probe("NaN", math.nan, False)
    yield Probe("5e-324", 5e-324, low < 5e-324 < high or (low == 5e-324 and not left_open))
    yield Probe("1e308", 1e308, low < 1e308 < high or (high == 1e308 and not right_open))
    yield Probe("10**400", 10**400, False)
    yield Probe("true", True, False)
    yield Probe("text", repr(middle), False)
    yield Probe("None", None, False)


def _middle(low: float, high: float) -> float:
    if math.isinf(low) and math.isinf(high):
        return 0.5
    if math.isinf(high):
        return low + 0.5 if low + 0.5 > low else low * 2
    if math.isinf(low):
        return high - 0.5
    return low / 2 + high / 2


def _option_probes(values: tuple[object, ...]) -> Iterator[Probe]:
    for value in values:
        yield Probe(f"option {value!r}", value, True)
        if isinstance(value, str) and value.upper() != value:
            yield Probe(f"upper {value!r}", value.upper(), False)
    yield from (Probe("unknown name", "nosuch", False), Probe("empty", "", False), Probe("None", None, False))
    yield Probe("an int", 1, False)


def _generic_probes() -> Iterator[Probe]:
    """Values of every JSON and Python kind, for a constraint that says itself which it takes."""
    pool: dict[str, Any] = {
        "None": None,
        "true": True,
        "0": 0,
        "1": 1,
        "-1": -1,
        "0.5": 0.5,
        "NaN": math.nan,
        "inf": math.inf,
        "empty text": "",
        "blank text": " ",
        "text": "x",
        "two lines": "a\nb",
        "NUL": "a\x00b",
        "empty list": [],
        "list of a half": [0.5],
        "tuple of floats": (1.0, 0.5),
        "tuple with NaN": (0.5, math.nan),
        "tuple with 10**400": (0.5, 10**400),
        "list of text": ["a", "b"],
        "list of one text twice": ["a", "a"],
        "empty table": {},
        "table": {"a": 1},
        "2**64": 2**64,
        "10**400": 10**400,
    }
    yield from (Probe(label, value, None) for label, value in pool.items())


def inside_strategy(constraint: Any, extra: Callable[[Any], bool] | None = None) -> st.SearchStrategy[Any]:
    """Values the declaration takes: its inside probes, and for a bounded interval any number between."""
    inside = [p.value for p in probes(constraint) if _takes(constraint, p) and (extra is None or extra(p.value))]
    strategy: st.SearchStrategy[Any] = st.sampled_from(inside)
    interval = constraint.inner if isinstance(constraint, NoneOr) else constraint
    if isinstance(interval, Interval) and interval.left is not None and interval.right is not None:
        if interval.kind is int:
            # Near each end: an int in the middle of [1, 2**40] sizes arrays (a sketch of 10^7 columns)
            # and asks for work, not for care; the ends themselves are among the probes.
            low, high = math.ceil(interval.left), math.floor(interval.right)
            numbers: st.SearchStrategy[Any] = st.integers(low, min(high, low + 64)) | st.integers(
                max(low, high - 64), high
            )
        else:
            numbers = st.floats(interval.left, interval.right, allow_nan=False)
        strategy = strategy | numbers.filter(interval.is_satisfied_by)
    return strategy


def _takes(constraint: Any, probe: Probe) -> bool:
    try:
        return declared_inside(constraint, probe)
    except Exception:  # a constraint that cannot judge a value refuses it (test_declared_checks says so)
        return False


def assert_one_line(error: BaseException, *, naming: str | None = None) -> None:
    """``error`` is the library's error, of one line, naming ``naming`` (a parameter) when given."""
    assert isinstance(error, FedsampleError), f"{type(error).__name__}: {error}"
    message = str(error)
    assert message, type(error).__name__
    assert "\n" not in message, message
    if naming is not None:
        assert error.parameter == naming or f"'{naming}'" in message, message
