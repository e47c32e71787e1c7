"""The registry that maps CLI names to sampler classes."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from fedsample._validation import invalid
from fedsample.errors import FedsampleError
from fedsample.samplers._base import Sampler

__all__ = ["make_sampler", "register_sampler", "sampler_class", "sampler_names"]

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
    if not isinstance(name, str) or name not in _SAMPLERS:
        raise invalid("sampler", "make_sampler", "one of {" + ", ".join(map(repr, sorted(_SAMPLERS))) + "}", name)
    return _SAMPLERS[name]


def make_sampler(name: str, **params: Any) -> Sampler[Any]:
    """Build the sampler registered as ``name`` with keyword hyperparameters.

    >>> make_sampler("poisson", capped=True)
    PoissonSampler(capped=True)
    """
    cls = sampler_class(name)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in params:
        if key not in known:
            raise FedsampleError(
                f"The {key!r} parameter of {cls.__name__} is not a known parameter "
                f"(known: {', '.join(sorted(known)) or 'none'}). Got {params[key]!r} instead.",
                parameter=key,
            )
    return cls(**params)
