"""The state of :class:`~fedsample.integrations.server_update.ServerUpdate`'s optimizer as plain data, and
the bounds every state it holds or loads meets.

``ServerUpdate`` keeps the engine's optimizer state (``MomentumState``, ``AdaptiveState``) in float64
with a leading axis of one run. A state is *valid* for a model when every momentum is finite and
within the model's dtype (``|m| <= 65504`` for float16: a step of that model), every second moment
(a squared step) is ``>= 0`` (Adam's, Yogi's and Adagrad's rules keep it so) with its square root
within the dtype (``v <= 65504^2``), and its round count is an int in ``[0, 2**53]``. A round whose
new state would not be valid is refused, and a loaded state
(:meth:`~fedsample.integrations.server_update.ServerUpdate.load_state_dict`) is data from outside,
checked against the same bounds: what one object saves, another loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import torch

from fedsample.engine.checkpoint import tree_map_tensors
from fedsample.integrations._server_models import describe, dtype_name, dtype_range, refuse, shapes_text

__all__ = [
    "MAX_ROUNDS",
    "fit_state",
    "is_round_count",
    "optimizer_name",
    "plain_state",
    "restore_state",
    "state_problem",
]

# The largest round count a state may hold: every int up to 2**53 is a float64 exactly (Adam's 1 - beta^t).
MAX_ROUNDS = 2**53
# The state's fields that hold second moments (never negative; squared steps).
_SECOND_MOMENTS = ("second_moment",)


def optimizer_name(optimizer: Any) -> str:
    return str(getattr(optimizer, "name", type(optimizer).__name__))


def is_round_count(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an int in ``[0, MAX_ROUNDS]`` (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ROUNDS


def plain_state(state: Any) -> Any:
    """The engine's state (a NamedTuple of dicts of ``(1, ...)`` tensors and counts, or ``None``) as plain data."""
    if state is None:
        return None
    fields = tree_map_tensors(lambda t: t.squeeze(0).detach().cpu().clone(), state._asdict())
    return {"type": type(state).__name__, **fields}


def restore_state(plain: Any, optimizer: Any, owner: str) -> Any:
    """A state from :func:`plain_state`, checked against the optimizer's own kind (its state of no
    parameters): names mapped to finite real tensors (second moments ``>= 0``), counts in ``[0, 2**53]``.
    The bounds that need the model (shapes, its dtype's range) are checked by :func:`fit_state`."""
    template = optimizer.init({})
    if template is None:
        if plain is not None:
            raise refuse("state_dict", owner, "no state for this optimizer", "a state")
        return None
    kind = type(template).__name__
    if not isinstance(plain, Mapping) or plain.get("type") != kind or set(plain) != {"type", *template._fields}:
        raise refuse("state_dict", owner, f"a state of kind {kind} ({', '.join(template._fields)})", describe(plain))
    for field in template._fields:
        value, expected = plain[field], getattr(template, field)
        if isinstance(expected, dict):
            rule = "names mapped to finite real tensors" + (" >= 0" if field in _SECOND_MOMENTS else "")
            good = isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, torch.Tensor) and _valid_values(v, field) for k, v in value.items()
            )
        else:
            rule = "an int in [0, 2**53]"
            good = is_round_count(value)
        if not good:
            raise refuse("state_dict", owner, f"a state whose {field!r} holds {rule}", describe(value))
    return plain


def _valid_values(tensor: torch.Tensor, field: str) -> bool:
    if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
        return False
    return field not in _SECOND_MOMENTS or tensor.numel() == 0 or float(tensor.min()) >= 0


def fit_state(plain: Mapping[str, Any], template: Any, dtypes: Mapping[str, torch.dtype], owner: str) -> Any:
    """The loaded state on the model's device in the template's dtype, after checking it holds the model's
    parameters (their shapes) within the range of their ``dtypes``."""
    fields = {}
    for field in template._fields:
        expected, value = getattr(template, field), plain[field]
        if isinstance(expected, dict):
            shapes = {n: tuple(t.shape[1:]) for n, t in expected.items()}
            if {n: tuple(t.shape) for n, t in value.items()} != shapes:
                rule = f"the model whose state was loaded (parameters {shapes_text(value)})"
                raise refuse("global_model", owner, rule, f"parameters {shapes_text(expected, skip=1)}")
            value = {n: t.to(device=expected[n].device, dtype=expected[n].dtype).unsqueeze(0) for n, t in value.items()}
        fields[field] = value
    state = type(template)(**fields)
    problem = state_problem(state, dtypes)
    if problem:
        rule = "a state of this model (moments within its dtype, second moments within its square)"
        raise refuse("state_dict", "ServerUpdate.load_state_dict", rule, problem)
    return state


def state_problem(state: Any, dtypes: Mapping[str, torch.dtype]) -> str:
    """Why ``state`` is not valid for parameters of ``dtypes`` (module doc), ``""`` when it is."""
    if state is None:
        return ""
    for field, value in state._asdict().items():
        if not isinstance(value, dict):
            if not is_round_count(value):
                return f"{field!r} = {value!r:.40}"
            continue
        for name, tensor in value.items():
            dtype, squared = dtypes[name], field in _SECOND_MOMENTS
            limit = dtype_range(dtype) * dtype_range(dtype) if squared else dtype_range(dtype)  # inf for float64^2
            largest = float(tensor.abs().max()) if tensor.numel() else 0.0
            if not (largest <= limit and largest < float("inf")):  # NaN fails too
                bound = f"{dtype_name(dtype)}'s {dtype_range(dtype):.6g}{'^2' if squared else ''}"
                return f"{field!r} of {name!r} reaching {largest:.3g} (beyond {bound})"
            if squared and tensor.numel() and float(tensor.min()) < 0:
                return f"{field!r} of {name!r} holding {float(tensor.min()):.3g} < 0"
    return ""
