"""Parameters declared once: each configurable component's names, defaults and constraints in one table.

A :class:`Component` is the table of one component (the training settings, a local algorithm, the
federation spec, a sampler...): the config reader, the command line and the component itself read
it, so a parameter's name, default and constraint are written in one place (scikit-learn's
``_parameter_constraints``). :func:`declared` builds the table of a dataclass that keeps its
defaults on its fields and its constraints in a ``_parameter_constraints`` class attribute.

>>> from fedsample._validation import Interval
>>> table = Component("demo", "Demo", {"rounds": Parameter(3, Interval(int, 1, None, closed="left"))})
>>> table.check({"rounds": 5})
{'rounds': 5}
>>> table.check({"rounds": 0})
Traceback (most recent call last):
...
fedsample.errors.FedsampleError: The 'rounds' parameter of Demo must be an int in the range [1, inf). Got 0 instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fedsample._validation import Constraint, KnownNames, check_params, invalid

__all__ = ["Component", "Parameter", "declared"]

T = TypeVar("T")


@dataclass(frozen=True)
class Parameter(Generic[T]):
    """One parameter: its default and the constraint every value must satisfy."""

    default: T
    constraint: Constraint


@dataclass(frozen=True)
class Component:
    """A named component (``name`` in configs, ``owner`` in error messages) and its parameters, in order."""

    name: str
    owner: str
    parameters: Mapping[str, Parameter[Any]]

    @property
    def defaults(self) -> dict[str, Any]:
        """Every parameter's default, by name."""
        return {key: parameter.default for key, parameter in self.parameters.items()}

    @property
    def constraints(self) -> dict[str, Constraint]:
        """Every parameter's constraint, by name (the table :func:`~fedsample._validation.check_params` reads)."""
        return {key: parameter.constraint for key, parameter in self.parameters.items()}

    @property
    def known_names(self) -> KnownNames:
        """The parameters' names, for the error of a name that is none of them."""
        return KnownNames(f"the parameters of {self.owner}", tuple(self.parameters))

    def validate(self, params: Mapping[str, Any]) -> None:
        """Check each value of ``params`` against its constraint, in the table's order."""
        constraints = self.constraints
        check_params(self.owner, {key: params[key] for key in constraints if key in params}, constraints)

    def check(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` completed with the defaults, after checking that every key is known and every value valid."""
        for key, value in params.items():
            if key not in self.parameters:
                raise invalid(key, self.owner, self.known_names, value)
        self.validate(params)
        return {**self.defaults, **params}

    def with_defaults(self, **defaults: Any) -> Component:
        """The same parameters and constraints with some defaults replaced (a caller's own defaults)."""
        unknown = set(defaults) - set(self.parameters)
        if unknown:
            raise invalid(min(unknown), f"{self.owner}.with_defaults", self.known_names, None)
        self.validate(defaults)
        parameters = {
            key: Parameter(defaults[key], p.constraint) if key in defaults else p for key, p in self.parameters.items()
        }
        return Component(self.name, self.owner, parameters)

    def only(self, *names: str) -> Component:
        """The table of ``names`` alone, in that order."""
        return Component(self.name, self.owner, {key: self.parameters[key] for key in names})


def declared(cls: type, name: str, owner: str | None = None) -> Component:
    """The table of the dataclass ``cls``: each field in ``cls._parameter_constraints``, with the field's default.

    The fields keep the defaults and the class attribute the constraints, so the class is still the
    one place a parameter is declared.
    """
    constraints: Mapping[str, Constraint] = getattr(cls, "_parameter_constraints", {})
    parameters: dict[str, Parameter[Any]] = {}
    for field in dataclasses.fields(cls):
        if field.name not in constraints:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            raise TypeError(f"{cls.__name__}.{field.name} has no default to declare")
        parameters[field.name] = Parameter(default, constraints[field.name])
    return Component(name, owner or cls.__name__, parameters)
