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

import numpy as np

from fedsample._invariants import FieldError
from fedsample._validation import show_value
from fedsample.designs.exact import design_moments
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler, state_type
from fedsample.samplers._registry import make_sampler
from fedsample.samplers._state import DesignState
from fedsample.serialization import from_jsonable, read_json_file, to_jsonable

__all__ = ["MAX_SAMPLER_FILE_BYTES", "load_sampler", "sampler_from_dict", "sampler_to_dict", "save_sampler"]

_FORMAT = "fedsample-sampler"
_VERSION = 1  # the layout below; a file of another version is refused, not misread
# The largest saved states are DivFL's n x n distances as JSON text and similarity sampling's n x d
# gradients (packed, 5.3 bytes a value): tens of MB. Reading stops past this, so a wrong path
# (/dev/zero) is refused at once.
MAX_SAMPLER_FILE_BYTES = 256 * 2**20


def sampler_to_dict(sampler: Sampler[Any], state: Any) -> dict[str, Any]:
    return {
        "format": _FORMAT,
        "version": _VERSION,
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
    version = data.get("version", _VERSION)
    if type(version) is not int or version != _VERSION:
        raise FedsampleError(
            f"The 'sampler_state' parameter must be a fedsample sampler file of version {_VERSION}. "
            f"Got {source} of version {show_value(version)} instead.",
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
    # Decoding checks each state type's own invariants (check_invariants); what remains is whether
    # the state is one this sampler makes.
    state = _decode(data["state"], "state", source)
    expected = state_type(type(sampler))
    if expected is not None and not isinstance(state, expected):
        got = f"a {type(state).__name__} object it cannot use (its states are {expected.__name__}s)"
        raise _not_its_state(sampler, source, got)
    try:
        design = sampler.design(state)
        usable = int(sampler.importances(state).size) == design.num_clients
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        usable = False
    if not usable:
        raise _not_its_state(sampler, source, f"a {type(state).__name__} object it cannot use")
    if isinstance(state, DesignState):
        _check_fixed_design(sampler, state, source)
    if not sampler.biased:
        _check_unbiased(sampler, state, design, source)
    return sampler, state


def _not_its_state(sampler: Sampler[Any], source: str, got: str) -> FedsampleError:
    return FedsampleError(
        f"The 'sampler_state' parameter must hold a state of the {sampler.name!r} sampler. Got {source} holding "
        f"{got} instead.",
        parameter="sampler_state",
    )


def _design_kind(design: Any) -> str:
    """The design's type, with the base of a normalised design (``NormalizedDesign(FixedSizeDesign)``)."""
    base = getattr(design, "base", None)
    return type(design).__name__ + (f"({_design_kind(base)})" if base is not None else "")


def _check_fixed_design(sampler: Sampler[Any], state: DesignState, source: str) -> None:
    """A sampler that does not learn has one kind of design: the kind its ``init`` builds.

    An md state relabelled as uniform (a RowDesign where uniform sampling keeps a
    FixedSizeDesign) is refused here.
    """
    try:
        fresh = sampler.init(Federation.from_importances(state.importances), state.num_sampled)
    except FedsampleError as exc:
        raise _not_its_state(sampler, source, f"a state it cannot be initialised for ({exc})") from None
    saved, built = _design_kind(state.design), _design_kind(fresh.design)
    if saved != built:
        raise _not_its_state(sampler, source, f"a {saved} design (the {sampler.name!r} sampler draws from a {built})")


def _check_unbiased(sampler: Sampler[Any], state: Any, design: Any, source: str) -> None:
    """A sampler declared unbiased must have ``E[w_i] = p_i`` at the saved state (exact, when the
    design has a closed form)."""
    importances = np.asarray(sampler.importances(state), dtype=np.float64)
    try:
        # Only the mean is read: the variances of an edited file's weights (1e308) may overflow on the way.
        with np.errstate(over="ignore", invalid="ignore"):
            mean = design_moments(design, importances).mean
    except TypeError:  # no closed form (successive sampling): its weights are unbiased by construction
        return
    if not np.allclose(mean, importances, rtol=1e-6, atol=1e-12):
        worst = int(np.argmax(np.abs(mean - importances)))
        raise _not_its_state(
            sampler,
            source,
            f"weights with E[w_{worst}] = {float(mean[worst])!r} against p_{worst} = {float(importances[worst])!r} "
            "(the sampler is unbiased)",
        )


def _decode(value: Any, part: str, source: str) -> Any:
    """``from_jsonable(value)``, any failure reported as a bad sampler file."""
    try:
        return from_jsonable(value)
    except FieldError as exc:
        raise FedsampleError(
            f"The 'sampler_state' parameter must be a valid fedsample sampler file. Got {source} whose {part!r} "
            f"is invalid: {exc}",
            parameter="sampler_state",
        ) from None
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
    """The sampler and state saved at ``path`` (at most :data:`MAX_SAMPLER_FILE_BYTES` of JSON)."""
    data = read_json_file(path, parameter="sampler_state", max_bytes=MAX_SAMPLER_FILE_BYTES)
    return sampler_from_dict(data, source=repr(str(path)))
