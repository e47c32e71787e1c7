"""Declarative parameter constraints and the single error-message template.

Every check produces ``The '<name>' parameter of <owner> must be <constraint>. Got <value> instead.``
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Protocol

import numpy as np

from fedsample.errors import FedsampleError

__all__ = [
    "Boolean",
    "Constraint",
    "Interval",
    "NoneOr",
    "Options",
    "OptionsOrPath",
    "Text",
    "check_param",
    "check_params",
    "invalid",
    "is_control",
    "restate",
    "show_value",
]


class Constraint(Protocol):
    def is_satisfied_by(self, value: object) -> bool: ...

    def __str__(self) -> str: ...


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Interval:
    """A number of the given kind (``int`` or ``float``) in a range; ``None`` bounds are infinite."""

    kind: type
    left: float | None
    right: float | None
    closed: str = "both"  # "both", "left", "right" or "neither"

    def is_satisfied_by(self, value: object) -> bool:
        x: float
        if self.kind is int:
            if not _is_int(value):
                return False
            # Integers compare exactly: float() would round 2**63 - 1 up past an int64 bound.
            x = int(value)  # type: ignore[call-overload]
        else:
            if not _is_real(value):
                return False
            try:
                x = float(value)  # type: ignore[arg-type]
            except OverflowError:  # an integer beyond the largest float (10**400 in a config file)
                return False
            if math.isnan(x):
                return False
        left_open = self.closed in ("right", "neither")
        right_open = self.closed in ("left", "neither")
        too_small = self.left is not None and (x < self.left or (x == self.left and left_open))
        too_large = self.right is not None and (x > self.right or (x == self.right and right_open))
        return not (too_small or too_large)

    def __str__(self) -> str:
        kind = "an int" if self.kind is int else "a float"
        left_closed = self.closed in ("both", "left") and self.left is not None
        right_closed = self.closed in ("both", "right") and self.right is not None
        left = "-inf" if self.left is None else _fmt(self.left, self.kind)
        right = "inf" if self.right is None else _fmt(self.right, self.kind)
        return f"{kind} in the range {'[' if left_closed else '('}{left}, {right}{']' if right_closed else ')'}"


def _fmt(x: float, kind: type) -> str:
    # A float bound of 17 digits or more reads better in exponent form (3.4028234663852886e+38).
    whole = float(x).is_integer() and (kind is int or abs(x) < 1e16)
    return str(int(x)) if whole else repr(float(x))


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values."""

    values: tuple[object, ...]

    def is_satisfied_by(self, value: object) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def __str__(self) -> str:
        return "one of {" + ", ".join(repr(v) for v in self.values) + "}"


@dataclass(frozen=True)
class OptionsOrPath:
    """One of a fixed set of names, or a path to a file whose name ends in one of ``suffixes`` (any case).

    ``OptionsOrPath(("digits",), (".npz", ".csv"))`` takes ``"digits"`` and ``"data/mine.NPZ"``; the
    file itself is read where the value is used. A path is a single line with a name before its suffix.
    """

    values: tuple[str, ...]
    suffixes: tuple[str, ...]

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, str) and (value in self.values or self.is_path(value))

    def is_path(self, value: object) -> bool:
        """Whether ``value`` is a path this constraint takes (not one of its names)."""
        if not isinstance(value, str) or value in self.values or any(is_control(c) for c in value):
            return False
        name = PurePath(value)
        return name.suffix.lower() in self.suffixes and name.stem != ""

    def __str__(self) -> str:
        *rest, last = self.suffixes
        files = f"{', '.join(rest)} or {last}" if rest else last
        path = f"a path to a {files} file"
        return "one of {" + ", ".join(repr(v) for v in self.values) + "} or " + path if self.values else path


@dataclass(frozen=True)
class Boolean:
    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, (bool, np.bool_))

    def __str__(self) -> str:
        return "a bool"


@dataclass(frozen=True)
class Text:
    """A string; ``pattern`` (if given) must match it whole; ``single_line`` forbids blank or control characters."""

    description: str
    pattern: str | None = None
    single_line: bool = False

    def is_satisfied_by(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            return False
        return not self.single_line or (value.strip() != "" and not any(is_control(c) for c in value))

    def __str__(self) -> str:
        return self.description


def is_control(char: str) -> bool:
    """Whether ``char`` is an ASCII control character (a line break, a tab, DEL...)."""
    return ord(char) < 0x20 or ord(char) == 0x7F


@dataclass(frozen=True)
class NoneOr:
    inner: Constraint

    def is_satisfied_by(self, value: object) -> bool:
        return value is None or self.inner.is_satisfied_by(value)

    def __str__(self) -> str:
        return f"None or {self.inner}"


def invalid(name: str, owner: str, constraint: object, value: object, *, noun: str = "parameter") -> FedsampleError:
    """Build the library's error for a parameter that breaks ``constraint`` (its fields carry all four).

    ``noun`` names what ``name`` is (``"key"`` for a config key); an empty ``owner`` is left out
    (a command-line flag: ``The '--dropout' parameter must be ...``).
    """
    of = f" of {owner}" if owner else ""
    return FedsampleError(
        f"The {name!r} {noun}{of} must be {constraint}. Got {show_value(value)} instead.",
        parameter=name,
        owner=owner,
        constraint=constraint,
        value=value,
    )


def restate(error: FedsampleError, name: str, owner: str, *, noun: str = "key", detail: str = "") -> FedsampleError:
    """``error`` about ``name`` of ``owner`` instead (a config key, a flag), built from its fields.

    ``detail`` follows the constraint (``" for samplers[0] ('md')"``). An error that states no
    constraint keeps its own message after the new name.
    """
    if error.constraint is None:
        of = f" of {owner}" if owner else ""
        message = " ".join(str(error).split())
        return FedsampleError(f"The {name!r} {noun}{of} is invalid: {message}", parameter=name, owner=owner)
    return invalid(name, owner, f"{error.constraint}{detail}", error.value, noun=noun)


def show_value(value: object) -> str:
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        head = ", ".join(repr(v.item()) for v in flat[:6])
        return f"array([{head}{', ...' if flat.size > 6 else ''}])"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def check_param(name: str, owner: str, value: object, constraint: Constraint) -> None:
    if not constraint.is_satisfied_by(value):
        raise invalid(name, owner, constraint, value)


def check_params(owner: str, params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> None:
    """Check every parameter in ``params`` against its entry of the constraint table."""
    for name, value in params.items():
        if name in constraints:
            check_param(name, owner, value, constraints[name])
