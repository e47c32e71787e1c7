"""The reader of a config's tables: each key checked against its declared constraint, errors keyed by it.

:func:`read_section` reads one table of a config over its declared parameter table
(:mod:`fedsample.experiments.config.sections`); :class:`ConfigTable` is the reader of any table (the top
level, a sampler entry); :func:`restate_error` restates a library error about a parameter as one
about the config key, from the error's fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedsample._params import Component
from fedsample._validation import Constraint, Interval, KnownNames, NoneOr, invalid, restate, show_value
from fedsample.errors import FedsampleError

__all__ = [
    "KEY_SYNONYMS",
    "TOML_INT_MAX",
    "ConfigTable",
    "coerce_float",
    "holds_in_toml",
    "key_error",
    "plain",
    "read_section",
    "restate_error",
    "wants_float",
]

# Names users bring from other tools, and the keys of fedsample's that they mean (suggested first).
KEY_SYNONYMS: dict[str, tuple[str, ...]] = {
    "lr": ("local_lr", "lr"),
    "learning_rate": ("local_lr", "lr"),
    "local_epochs": ("local_steps",),
    "epochs": ("local_steps", "rounds"),
    "clients_per_round": ("num_sampled",),
    "num_rounds": ("rounds",),
    "seed": ("seeds", "seed"),
    "sampler": ("samplers",),
    "checkpoint": ("checkpoint_every",),
}
TOML_INT_MAX = 2**63 - 1
"""The largest integer a TOML file holds (int64): resolved configs are written back as TOML."""
_MISSING: Any = object()


def key_error(key: str, source: str, constraint: object, value: object) -> FedsampleError:
    """The error of a config key whose value breaks ``constraint`` (its fields carry key, constraint and value)."""
    return invalid(key, source, constraint, value, noun="key")


def wants_float(constraint: Constraint) -> bool:
    """Whether the constraint takes floats (an int given for it is read as a float: TOML writes ``1`` for ``1.0``)."""
    if isinstance(constraint, NoneOr):
        return wants_float(constraint.inner)
    return isinstance(constraint, Interval) and constraint.kind is float


class ConfigTable:
    """Reads the keys of one table, remembering those it knows, so that the others can be rejected."""

    def __init__(self, data: object, path: str, source: str) -> None:
        if not isinstance(data, Mapping):
            if not path:
                raise FedsampleError(f"The {source} must be a table of keys. Got {show_value(data)} instead.")
            raise key_error(path, source, "a table", data)
        self.data: Mapping[str, Any] = data
        self.path = path
        self.source = source
        self.known: list[str] = []

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str, constraint: Constraint, default: Any = _MISSING) -> Any:
        self.known.append(name)
        if name not in self.data:
            if default is _MISSING:
                raise FedsampleError(
                    f"The {self.key(name)!r} key of {self.source} is required: it must be {constraint}.",
                    parameter=self.key(name),
                    owner=self.source,
                    constraint=constraint,
                )
            return default
        value = self.data[name]
        if not constraint.is_satisfied_by(value):
            raise key_error(self.key(name), self.source, constraint, value)
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value <= TOML_INT_MAX:
            # The resolved config is written back as TOML, whose integers are int64.
            raise key_error(self.key(name), self.source, f"{constraint} that TOML can hold (int64)", value)
        return float(value) if value is not None and wants_float(constraint) else value

    def read(self, table: Component) -> dict[str, Any]:
        """Every parameter of ``table``: the value given, checked against its constraint, or its default."""
        return {name: self.get(name, p.constraint, p.default) for name, p in table.parameters.items()}

    def reject_unknown(self, also_known: Sequence[str] = ()) -> None:
        """Refuse a key that is neither read nor in ``also_known``, listing the table's keys and the closest ones."""
        known = KnownNames(self.what, tuple(dict.fromkeys([*self.known, *also_known])), KEY_SYNONYMS)
        for name, value in self.data.items():
            if name not in known.names:
                closest = [self.key(key) for key in known.suggest(name)]
                raise invalid(self.key(name), self.source, known, value, noun="key", suggestions=closest)

    @property
    def what(self) -> str:
        """The table's keys in words: ``the keys of [training]``, ``the top-level keys``."""
        if not self.path:
            return "the top-level keys"
        return f"the keys of {self.path}" if "[" in self.path else f"the keys of [{self.path}]"

    def rest(self) -> dict[str, Any]:
        return {name: value for name, value in self.data.items() if name not in self.known}


def read_section(data: object, table: Component, source: str) -> dict[str, Any]:
    """The values of the config table ``table.name`` (``data``): the one reader of every declared section.

    Unknown keys are refused; each known key is checked against its constraint, and a missing one
    takes its default. Errors name the key (``training.rounds``) and ``source``.
    """
    reader = ConfigTable(data, table.name, source)
    values = reader.read(table)
    reader.reject_unknown()
    return values


def restate_error(exc: Exception, path: str, source: str, *, detail: str = "") -> FedsampleError:
    """A library error about a parameter of the ``path`` table, restated about the config key
    ``path.<parameter>`` from the error's fields (``detail`` follows the constraint)."""
    if not isinstance(exc, FedsampleError):
        message = " ".join(str(exc).split())
        return FedsampleError(f"The {path!r} table of {source} is invalid: {message}", parameter=path, owner=source)
    if exc.parameter is None:
        return restate(exc, path, source, noun="table", detail=detail)
    return restate(exc, f"{path}.{exc.parameter}", source, detail=detail)


def holds_in_toml(value: Any) -> bool:
    """Whether the plain value ``value`` can be written back as TOML: every integer in it within int64."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -(2**63) <= value <= TOML_INT_MAX
    if isinstance(value, (list, tuple)):
        return all(holds_in_toml(v) for v in value)
    if isinstance(value, Mapping):
        return all(holds_in_toml(v) for v in value.values())
    return True


def plain(value: Any) -> Any:
    """JSON/TOML-ready data: arrays and tuples as lists, NumPy scalars as Python ones."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def coerce_float(declared: object, value: Any) -> Any:
    """An int given for a float field becomes a float (TOML writes ``1`` for ``1.0``)."""
    name = declared if isinstance(declared, str) else getattr(declared, "__name__", str(declared))
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return float(value) if is_int and name in ("float", "float | None", "Optional[float]") else value
