"""The registry that maps CLI names to sampler classes."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from fedsample._validation import KnownNames, Options, invalid
from fedsample.errors import FedsampleError
from fedsample.samplers._base import Sampler

__all__ = ["check_renamed_parameters", "make_sampler", "register_sampler", "sampler_class", "sampler_names"]

_SAMPLERS: dict[str, type[Sampler[Any]]] = {}
S = TypeVar("S", bound=type)


def register_sampler(cls: S) -> S:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    name = cls.name  # type: ignore[attr-defined]
    if name in _SAMPLERS and _SAMPLERS[name] is not cls:
        raise TypeError(f"two samplers are registered as {name!r}")
    _SAMPLERS[name] = cls
    return cls


def sampler_names() -> list[str]:
    """Registered sampler names, in registration order."""
    return list(_SAMPLERS)


def sampler_class(name: str) -> type[Sampler[Any]]:
    """The class registered as ``name``; an unknown name is refused with the closest registered names."""
    if not isinstance(name, str) or name not in _SAMPLERS:
        raise invalid("sampler", "make_sampler", Options(tuple(_SAMPLERS)), name)
    return _SAMPLERS[name]


def make_sampler(name: str, **params: Any) -> Sampler[Any]:
    """Build the sampler registered as ``name`` with keyword hyperparameters.

    >>> make_sampler("poisson", capped=True)
    PoissonSampler(capped=True)
    """
    cls = sampler_class(name)
    check_renamed_parameters(cls, params)
    known = KnownNames(f"the parameters of {cls.__name__}", tuple(f.name for f in dataclasses.fields(cls)))
    for key in params:
        if key not in known.names:
            raise invalid(key, cls.__name__, known, params[key])
    return cls(**params)


def check_renamed_parameters(cls: type[Sampler[Any]], params: dict[str, Any]) -> None:
    """Refuse a parameter of ``cls`` that was renamed or removed, in one line with its hint
    (``Sampler._renamed_parameters``)."""
    for key, hint in cls._renamed_parameters.items():
        if key in params:
            raise FedsampleError(
                f"The {key!r} parameter of {cls.__name__} no longer exists: {hint}. Got {params[key]!r} instead.",
                parameter=key,
            )
