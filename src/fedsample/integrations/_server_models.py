"""What :class:`~fedsample.integrations.server_update.ServerUpdate` reads and writes: the models (PyTorch
state dicts, dicts or lists of numpy arrays, Flower ``ArrayRecord``), the round's weights, and the
one-line messages that refuse them.

Every model and weight is data from the user: kind, names, shapes, dtypes and non-finite values are
checked here, before any arithmetic. Flower is never imported here: an ``ArrayRecord`` is recognised
only when Flower is already loaded (it made the record).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from fedsample.errors import FedsampleError

__all__ = [
    "KINDS",
    "ReadModel",
    "describe",
    "dtype_name",
    "dtype_range",
    "layout_text",
    "names_text",
    "read_client",
    "read_model",
    "read_weights",
    "refuse",
    "shapes_text",
    "write_model",
]

KINDS = "a PyTorch state dict, a dict or list of numpy arrays, or a Flower ArrayRecord"


class ReadModel(NamedTuple):
    """A model as named tensors, and the kind it came as (``"torch"``, ``"numpy"``, ``"list"``, ``"flower"``)."""

    kind: str
    tensors: dict[str, torch.Tensor]


def read_model(model: Any, parameter: str, owner: str, *, where: str = "") -> ReadModel:
    """``model`` as named tensors (no copy for tensors; numpy arrays are copied), or the one-line error."""
    if _is_array_record(model):
        from fedsample.integrations.flower_client import arrays_to_numpy

        return ReadModel("flower", _from_numpy(arrays_to_numpy(model), parameter, owner, where))
    if isinstance(model, Mapping) and model:
        values = list(model.values())
        if not all(isinstance(key, str) for key in model):
            raise refuse(parameter, owner, f"{KINDS}, named by strings", f"{where}keys {list(model)[:5]!r:.80}")
        if all(isinstance(v, torch.Tensor) for v in values):
            tensors = {name: value.detach() for name, value in model.items()}
            return ReadModel("torch", _checked(tensors, parameter, owner, where))
        if all(isinstance(v, (np.ndarray, np.generic)) for v in values):
            return ReadModel("numpy", _from_numpy(dict(model), parameter, owner, where))
    if isinstance(model, (list, tuple)) and model and all(isinstance(v, (np.ndarray, np.generic)) for v in model):
        return ReadModel("list", _from_numpy({str(k): v for k, v in enumerate(model)}, parameter, owner, where))
    raise refuse(parameter, owner, f"{KINDS} (not empty, one kind of array)", f"{where}{describe(model)}")


def _from_numpy(arrays: dict[str, Any], parameter: str, owner: str, where: str) -> dict[str, torch.Tensor]:
    tensors = {}
    for name, value in arrays.items():
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise refuse(parameter, owner, "arrays of real numbers or integers", f"{where}{name!r} of {array.dtype}")
        # A writable copy in native byte order (torch refuses the other, and warns on read-only memory).
        tensors[name] = torch.from_numpy(np.array(array, dtype=array.dtype.newbyteorder("="), copy=True))
    return _checked(tensors, parameter, owner, where)


def _checked(tensors: dict[str, torch.Tensor], parameter: str, owner: str, where: str) -> dict[str, torch.Tensor]:
    """``tensors`` if every one is real or integer and every float is finite."""
    for name, tensor in tensors.items():
        if tensor.is_complex():
            raise refuse(parameter, owner, "tensors of real numbers or integers", f"{where}{name!r} of {tensor.dtype}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise refuse(parameter, owner, "finite values", f"{where}{name!r} holding NaN or infinity")
    return tensors


def read_client(model: Any, index: int, theta: ReadModel, owner: str) -> ReadModel:
    """Client ``index``'s model, checked against the global one: kind, names, shapes, dtypes."""
    where = f"client {index}: "
    client = read_model(model, "client_models", owner, where=where)
    rule = f"models like global_model ({KINDS.split(', ')[0] if theta.kind == 'torch' else theta.kind})"
    if client.kind != theta.kind:
        raise refuse("client_models", owner, rule, f"{where}a model of kind {client.kind!r}")
    missing = [n for n in theta.tensors if n not in client.tensors]
    extra = [n for n in client.tensors if n not in theta.tensors]
    if missing or extra:
        got = "; ".join(
            part
            for part in (
                f"missing {', '.join(map(repr, missing[:5]))}" if missing else "",
                f"unexpected {', '.join(map(repr, extra[:5]))}" if extra else "",
            )
            if part
        )
        raise refuse("client_models", owner, "models with the entries of global_model", where + got)
    for name, value in theta.tensors.items():
        mine = client.tensors[name]
        if tuple(mine.shape) != tuple(value.shape):
            got = f"{where}{name!r} of shape {tuple(mine.shape)} (global_model's: {tuple(value.shape)})"
            raise refuse("client_models", owner, "models with the shapes of global_model", got)
        if mine.dtype != value.dtype:
            got = f"{where}{name!r} of {dtype_name(mine.dtype)} (global_model's: {dtype_name(value.dtype)})"
            raise refuse("client_models", owner, "models with the dtypes of global_model", got)
    return client


def read_weights(weights: Any, count: int, owner: str) -> np.ndarray:
    """The round's weights as ``count`` finite float64 numbers (of either sign), or the one-line error."""
    rule = f"{count} finite numbers, w_i(S_t) of each client model"
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    try:
        w = np.asarray(weights)
    except (TypeError, ValueError):
        raise refuse("weights", owner, rule, describe(weights)) from None
    if w.dtype.kind not in "iuf" or w.ndim != 1 or w.size != count:
        got = f"an array of shape {w.shape} and dtype {w.dtype}" if w.dtype.kind != "O" else describe(weights)
        raise refuse("weights", owner, rule, got)
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise refuse("weights", owner, rule, repr(w.tolist())[:120])
    return w


def write_model(kind: str, tensors: dict[str, torch.Tensor]) -> Any:
    """The new model, in the kind it came as."""
    if kind == "torch":
        return tensors
    arrays = {name: tensor.cpu().numpy() for name, tensor in tensors.items()}
    if kind == "list":
        return list(arrays.values())
    if kind == "flower":
        from fedsample.integrations.flower_client import to_array_record

        return to_array_record(arrays)
    return arrays


def _is_array_record(model: Any) -> bool:
    """Whether ``model`` is Flower's ``ArrayRecord``, asked only when Flower is loaded (a record comes from it)."""
    if "flwr" not in sys.modules:
        return False
    from fedsample.integrations._flwr import ArrayRecord

    return isinstance(model, ArrayRecord)


def dtype_range(dtype: torch.dtype) -> float:
    """The largest finite magnitude of a floating ``dtype`` (``65504`` for float16)."""
    return float(torch.finfo(dtype).max)


# --- messages ----------------------------------------------------------------------------------


def refuse(parameter: str, owner: str, constraint: str, got: str) -> FedsampleError:
    """The library's one-line error, with a described value (``got``) instead of a repr."""
    return FedsampleError(
        f"The {parameter!r} parameter of {owner} must be {constraint}. Got {' '.join(got.split())} instead.",
        parameter=parameter,
        owner=owner,
        constraint=constraint,
        value=got,
    )


def describe(value: Any) -> str:
    if isinstance(value, (list, tuple, dict)) and len(value) > 3:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return f"a {type(value).__name__} {text[:80]}" if len(text) <= 80 else f"a {type(value).__name__}"


def names_text(tensors: Mapping[str, Any]) -> str:
    names = list(tensors)
    return ", ".join(map(repr, names[:6])) + (", ..." if len(names) > 6 else "")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def layout_text(layout: Mapping[str, tuple[tuple[int, ...], torch.dtype]]) -> str:
    items = list(layout.items())
    parts = [f"{n!r}: {shape} {dtype_name(dtype)}" for n, (shape, dtype) in items[:4]]
    return "{" + ", ".join(parts) + (", ..." if len(items) > 4 else "") + "}"


def shapes_text(tensors: Mapping[str, Any], *, skip: int = 0) -> str:
    items = list(tensors.items())
    parts = [f"{n!r}: {tuple(t.shape[skip:])}" for n, t in items[:4]]
    return "{" + ", ".join(parts) + (", ..." if len(items) > 4 else "") + "}"
