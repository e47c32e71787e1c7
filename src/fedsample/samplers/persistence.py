"""Saving and loading a sampler with its state (for ``fedsample stats --sampler-state`` and checkpoints).

The file is one JSON object: ``{"format": "fedsample-sampler", "version": 1, "sampler": NAME,
"params": {...}, "state": <fedsample.serialization encoding>}``. Loading rebuilds the sampler
from the registry and the state from registered plain-data types only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fedsample.errors import FedsampleError
from fedsample.samplers._base import Sampler
from fedsample.samplers._registry import make_sampler
from fedsample.serialization import from_jsonable, to_jsonable

__all__ = ["load_sampler", "sampler_from_dict", "sampler_to_dict", "save_sampler"]

_FORMAT = "fedsample-sampler"


def sampler_to_dict(sampler: Sampler[Any], state: Any) -> dict[str, Any]:
    return {
        "format": _FORMAT,
        "version": 1,
        "sampler": sampler.name,
        "params": to_jsonable(sampler.get_params()),
        "state": to_jsonable(state),
    }


def sampler_from_dict(data: Any, *, source: str = "sampler state") -> tuple[Sampler[Any], Any]:
    if not isinstance(data, dict) or data.get("format") != _FORMAT or "sampler" not in data or "state" not in data:
        raise FedsampleError(
            f"The 'sampler_state' parameter must be a fedsample sampler file (format {_FORMAT!r}). "
            f"Got {source} without that format instead.",
            parameter="sampler_state",
        )
    params = _decode(data.get("params", {"__dict__": {}}), "params", source)
    if not isinstance(params, dict):
        raise FedsampleError(
            f"The 'sampler_state' parameter must be a fedsample sampler file whose 'params' are a mapping. "
            f"Got {source} with {type(params).__name__} params instead.",
            parameter="sampler_state",
        )
    sampler = make_sampler(str(data["sampler"]), **params)
    state = _decode(data["state"], "state", source)
    # A state of another sampler, or with arrays of mismatched sizes, would only fail later, with a
    # traceback: check now that the sampler can build its design from it.
    try:
        usable = int(sampler.importances(state).size) == sampler.design(state).num_clients
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        usable = False
    if not usable:
        raise FedsampleError(
            f"The 'sampler_state' parameter must hold a state of the {sampler.name!r} sampler. "
            f"Got {source} holding a {type(state).__name__!r} object it cannot use instead.",
            parameter="sampler_state",
        )
    return sampler, state


def _decode(value: Any, part: str, source: str) -> Any:
    """``from_jsonable(value)``, any failure reported as a bad sampler file."""
    try:
        return from_jsonable(value)
    except (KeyError, TypeError, ValueError) as exc:  # FedsampleError is a ValueError
        raise FedsampleError(
            f"The 'sampler_state' parameter must be a fedsample sampler file. Got {source} whose {part!r} "
            f"cannot be decoded ({type(exc).__name__}: {exc}) instead.",
            parameter="sampler_state",
        ) from None


def save_sampler(path: str | os.PathLike[str], sampler: Sampler[Any], state: Any) -> None:
    """Write the sampler and its state to ``path`` (atomically: a temporary file renamed over it)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(sampler_to_dict(sampler, state), allow_nan=False))
    os.replace(tmp, target)


def load_sampler(path: str | os.PathLike[str]) -> tuple[Sampler[Any], Any]:
    """The sampler and state saved at ``path``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FedsampleError(
            f"The 'sampler_state' parameter must name a readable file. Got {str(path)!r} ({exc.strerror}) instead.",
            parameter="sampler_state",
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FedsampleError(
            f"The 'sampler_state' parameter must name a JSON file. Got {str(path)!r} (line {exc.lineno}: {exc.msg}) "
            "instead.",
            parameter="sampler_state",
        ) from None
    return sampler_from_dict(data, source=repr(str(path)))
