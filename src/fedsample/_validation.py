"""Declarative parameter constraints and the single error-message template.

Every check produces ``The '<name>' parameter of <owner> must be <constraint>. Got <value> instead.``
A name that is not one of a known set (a sampler, a dataset, a flag's value) lists the set sorted and
adds the closest names: ``... must be one of {'clustered-similarity', 'clustered-size', ...}. Got
'clusterd-size' instead. Did you mean 'clustered-size'?``; a key that is not one of a table's keys
reads ``The 'training.lr' key of --set is not one of the keys of [training]: {...}. Got 0.1 instead.
Did you mean 'training.local_lr'?`` (:class:`KnownNames`). :func:`invalid` writes both; the closest
names are found by :mod:`fedsample._suggestions`.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Protocol

import numpy as np

from fedsample._redaction import redacted
from fedsample._suggestions import close_names, did_you_mean
from fedsample.errors import FedsampleError

__all__ = [
    "Boolean",
    "Constraint",
    "Interval",
    "KnownNames",
    "NoneOr",
    "Options",
    "OptionsOrPath",
    "Text",
    "check_param",
    "check_params",
    "invalid",
    "is_control",
    "one_of",
    "reowned",
    "restate",
    "show_value",
    "suggestions_for",
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


def one_of(values: Iterable[object]) -> str:
    """``one of {'a', 'b'}``: the values as a set, sorted when they are all strings (names a reader scans)."""
    items = list(values)
    if all(isinstance(v, str) for v in items):
        items = sorted(items)  # type: ignore[type-var]
    return "one of {" + ", ".join(repr(v) for v in items) + "}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (listed sorted in messages, with the closest names to a wrong one)."""

    values: tuple[object, ...]

    def is_satisfied_by(self, value: object) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def __str__(self) -> str:
        return one_of(self.values)

    def suggest(self, value: object) -> tuple[str, ...]:
        """The names closest to ``value`` (:func:`close_names`)."""
        return close_names(value, [v for v in self.values if isinstance(v, str)])


@dataclass(frozen=True)
class KnownNames:
    """The names a table or a component takes (``what``: ``"the keys of [training]"``, ``"the parameters
    of FedProx"``), for the error of a name that is none of them: ``The 'training.lr' key of config.toml
    is not one of the keys of [training]: {...}.``; ``synonyms`` point a name users guess to its own
    (``{"lr": ("local_lr",)}``)."""

    what: str
    names: tuple[str, ...]
    synonyms: Mapping[str, Sequence[str]] | None = None

    def is_satisfied_by(self, value: object) -> bool:
        return value in self.names

    def __str__(self) -> str:
        if not self.names:
            return f"{self.what} (there are none)"
        return f"{self.what}: {one_of(self.names).removeprefix('one of ')}"

    def suggest(self, value: object) -> tuple[str, ...]:
        return close_names(value, self.names, synonyms=self.synonyms)


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
        return f"{one_of(self.values)} or {path}" if self.values else path

    def suggest(self, value: object) -> tuple[str, ...]:
        return close_names(value, self.values)


@dataclass(frozen=True)
class Boolean:
    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, (bool, np.bool_))

    def __str__(self) -> str:
        return "a bool"


@dataclass(frozen=True)
class Text:
    """A string; ``pattern`` (if given) must match it whole; ``single_line`` forbids blank or control characters.

    ``names`` are the fixed names among the strings it takes (a loss: ``'cross-entropy'``, or a
    reference to code), offered to a wrong value as the closest names.
    """

    description: str
    pattern: str | None = None
    single_line: bool = False
    names: tuple[str, ...] = ()

    def is_satisfied_by(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            return False
        return not self.single_line or (value.strip() != "" and not any(is_control(c) for c in value))

    def __str__(self) -> str:
        return self.description

    def suggest(self, value: object) -> tuple[str, ...]:
        return close_names(value, self.names)


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

    def suggest(self, value: object) -> tuple[str, ...]:
        return suggestions_for(self.inner, value)


def suggestions_for(constraint: object, value: object) -> tuple[str, ...]:
    """The names closest to ``value`` that ``constraint`` takes (none for a constraint without names)."""
    suggest = getattr(constraint, "suggest", None)
    return tuple(suggest(value)) if callable(suggest) else ()


def invalid(
    name: str,
    owner: str,
    constraint: object,
    value: object,
    *,
    noun: str = "parameter",
    suggestions: Sequence[str] | None = None,
) -> FedsampleError:
    """Build the library's error for a parameter that breaks ``constraint`` (its fields carry them all).

    ``noun`` names what ``name`` is (``"key"`` for a config key); an empty ``owner`` is left out
    (a command-line flag: ``The '--dropout' parameter must be ...``). ``suggestions`` (default: the
    constraint's names closest to ``value``) end the message as ``Did you mean 'x'?``. A
    :class:`KnownNames` constraint is about ``name`` itself (an unknown key or parameter):

    >>> print(invalid("--sampler", "", Options(("uniform", "md", "clustered-size")), "clusterd-size"))
    The '--sampler' parameter must be one of {'clustered-size', 'md', 'uniform'}. Got 'clusterd-size' instead. \
Did you mean 'clustered-size'?
    >>> print(invalid("training.lr", "--set", KnownNames("the keys of [training]", ("rounds", "local_lr")), 0.1,
    ...       noun="key", suggestions=["training.local_lr"]))
    The 'training.lr' key of --set is not one of the keys of [training]: {'local_lr', 'rounds'}. Got 0.1 instead. \
Did you mean 'training.local_lr'?
    """
    of = f" of {owner}" if owner else ""
    if suggestions is None:
        key = name.rpartition(".")[2] if isinstance(constraint, KnownNames) else value
        suggestions = suggestions_for(constraint, key)
    hint = did_you_mean(suggestions)
    if isinstance(constraint, KnownNames):
        got = f" Got {show_value(value)} instead." if value is not None else ""
        message = f"The {name!r} {noun}{of} is not one of {constraint}.{got}{hint}"
    else:
        message = f"The {name!r} {noun}{of} must be {constraint}. Got {show_value(value)} instead.{hint}"
    return FedsampleError(
        message,
        parameter=name,
        owner=owner,
        constraint=constraint,
        value=value,
        suggestions=tuple(suggestions),
        noun=noun,
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
    constraint = error.constraint if not detail else f"{error.constraint}{detail}"
    return invalid(name, owner, constraint, error.value, noun=noun, suggestions=error.suggestions)


def reowned(error: FedsampleError, owner: str) -> FedsampleError:
    """``error`` said of ``owner`` (where the value came from: ``--set`` rather than the config file), built
    from its fields; an error without a parameter and a constraint is returned as it is."""
    if error.parameter is None or error.constraint is None:
        return error
    return invalid(
        error.parameter, owner, error.constraint, error.value, noun=error.noun, suggestions=error.suggestions
    )


def show_value(value: object) -> str:
    """``value`` as an error message shows it, on one line (a repr may span several, numpy's SeedSequence's
    does): an array by its first six values (of any dtype, objects included), anything else in at most 120
    characters."""
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        head = ", ".join(_one_line(repr(v.item() if isinstance(v, np.generic) else v)) for v in flat[:6])
        return f"array([{head}{', ...' if flat.size > 6 else ''}])"
    text = redacted(_one_line(repr(value)))  # one line; a store's URI with its password, a token: never shown
    return text if len(text) <= 120 else text[:117] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


def check_param(name: str, owner: str, value: object, constraint: Constraint) -> None:
    if not constraint.is_satisfied_by(value):
        raise invalid(name, owner, constraint, value)


def check_params(owner: str, params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> None:
    """Check every parameter in ``params`` against its entry of the constraint table."""
    for name, value in params.items():
        if name in constraints:
            check_param(name, owner, value, constraints[name])
