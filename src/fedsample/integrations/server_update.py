"""The server update in your own training loop: PyTorch state dicts, numpy arrays, Flower ``ArrayRecord``.

A fedsample sampler gives each client of a round its aggregation weight ``w_i(S_t)``; the server then
moves the global model by paper 003's eq. 3,

    ``theta <- theta + eta_g * sum_i w_i (theta_i - theta)``.

:class:`ServerUpdate` applies it to the models your loop holds, with any of the engine's server
optimizers (:func:`~fedsample.engine.server.make_server_optimizer`: ``sgd`` is the line above with
``eta_g = lr``; ``fedavgm``, ``fedadam``, ``fedyogi`` and ``fedadagrad`` step along the same
``delta = sum_i w_i (theta_i - theta)`` with momentum or adaptive scales). It runs the engine's own
code on a single run: the weighted sum of the updates (:func:`~fedsample.engine.algorithms.segment_sum`),
the optimizer's ``init`` and ``step``, and the buffers' weighted mean
(:func:`~fedsample.engine.aggregation.combine_buffers`), so a loop and ``fedsample.engine.simulate``
move a model alike.

**Why not** ``sum_i w_i theta_i``. Most loops average the client models. That is the update above
only when the weights sum to one, since

    ``sum_i w_i theta_i = theta + sum_i w_i (theta_i - theta) - (1 - sum_i w_i) theta``:

the average also multiplies the model by ``sum_i w_i``. An unbiased sampler promises
``E[w_i(S_t)] = p_i``, not weights summing to one in every round: OSMD's weights ``p_i / (K q_i)``
summed to 0.667 in a round of issue 26, and the average shrank every parameter (and every weight of
a network) by a third, a step toward zero that no client took. Poisson, inverse-probability and
Des Raj weights miss one too, in both directions. The update written as a step from ``theta``
leaves what no client moved where it was::

    update = ServerUpdate()                                   # sgd, eta_g = 1
    theta = update.apply(theta, [theta_1, theta_2], weights)  # not sum(w * t for w, t in ...)

**Buffers** (BatchNorm's running statistics) are not parameters: no optimizer moves them. Name them
(``buffers=dict(model.named_buffers())``, or the positions of a list): they take the clients'
weighted mean with the weights normalised to sum one, as the engine's do, which keeps a running
variance positive; integer entries (``num_batches_tracked``) are always buffers, their mean rounded.
A round whose weights sum to zero or less keeps the buffers.

**State.** The optimizer's state (FedAvgM's momentum, FedAdam's moments and round count) lives in
the :class:`ServerUpdate` from round to round; keep one object for the whole training.
:meth:`ServerUpdate.state_dict` gives it as plain data (tensors, numbers, strings) that
``torch.save`` writes and ``torch.load(..., weights_only=True)`` reads, and
:meth:`ServerUpdate.load_state_dict` restores it, so a resumed loop continues exactly.

Every input is data to check: each model kind, name, shape, dtype, non-finite value, the weights'
length and values, and an empty round are refused in one :class:`~fedsample.FedsampleError` line
naming the parameter. Importing this module imports PyTorch but not Flower: an ``ArrayRecord`` is
recognised only when Flower is already loaded (it made the record).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

import fedsample.engine  # noqa: F401  (torch-free; before PyTorch loads, it makes OpenMP's threads wait passively)
from fedsample.data._optional import require

require("torch", extra="torch", package="torch", owner="fedsample.integrations.server_update")

import torch  # noqa: E402  (after the check that names the extra to install)

from fedsample.engine.aggregation import combine_buffers  # noqa: E402
from fedsample.engine.algorithms import segment_sum  # noqa: E402
from fedsample.engine.checkpoint import tree_map_tensors  # noqa: E402
from fedsample.engine.server import ServerOptimizer, ServerSGD  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402

__all__ = ["STATE_FORMAT", "ServerUpdate"]

ModelT = TypeVar("ModelT")

STATE_FORMAT = "fedsample-server-update"
_VERSION = 1
_OWNER = "ServerUpdate"
_KINDS = "a PyTorch state dict, a dict or list of numpy arrays, or a Flower ArrayRecord"
# The optimizers' arithmetic runs in float32 at least (a float16 model's update in float16 loses its small steps).
_COMPUTE_DTYPES = (torch.float32, torch.float64)


class _Read(NamedTuple):
    """A model as named tensors, and the kind it came as (``"torch"``, ``"numpy"``, ``"list"``, ``"flower"``)."""

    kind: str
    tensors: dict[str, torch.Tensor]


class ServerUpdate:
    """``theta <- theta + eta_g * sum_i w_i (theta_i - theta)`` by a server optimizer, its state kept across rounds.

    Parameters
    ----------
    optimizer:
        One of the engine's server optimizers, ``make_server_optimizer("fedadam", lr=0.01)`` say;
        default ``ServerSGD(lr=1.0)``, the plain update (FedAvg's with weights that sum to one).
    buffers:
        The names of the entries that are buffers, not parameters (``dict(model.named_buffers())``
        gives them for a module; for a list of arrays, their positions): the clients' weighted mean,
        weights normalised to sum one. Integer entries are buffers whether named or not.

    One object serves one model's training: the first :meth:`apply` fixes the parameters' names,
    shapes and dtypes, and later rounds must bring the same.

    >>> import numpy as np
    >>> update = ServerUpdate()
    >>> theta = {"w": np.array([1.0, 2.0])}
    >>> update.apply(theta, [{"w": np.array([2.0, 2.0])}, {"w": np.array([1.0, 4.0])}], [0.5, 0.25])
    {'w': array([1.5, 2.5])}
    """

    def __init__(self, optimizer: ServerOptimizer | None = None, *, buffers: Iterable[str | int] = ()) -> None:
        if optimizer is None:
            optimizer = ServerSGD()
        if not all(callable(getattr(optimizer, method, None)) for method in ("init", "step")):
            raise _refuse("optimizer", _OWNER, "a server optimizer (make_server_optimizer)", repr(optimizer)[:120])
        names = list(buffers) if not isinstance(buffers, (str, bytes)) else [buffers]
        if not all(isinstance(name, (str, int)) and not isinstance(name, bool) for name in names):
            raise _refuse("buffers", _OWNER, "names (str) or list positions (int)", repr(buffers)[:120])
        self.optimizer = optimizer
        self.buffers = frozenset(str(name) for name in names)
        self.rounds = 0
        self._state: Any = None
        # The parameters' (shape, dtype) the state was built for; None until the first apply.
        self._layout: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None
        self._restored: Any = None  # a loaded state, fitted to the model at the next apply

    def __repr__(self) -> str:
        return f"ServerUpdate({self.optimizer!r}, buffers={sorted(self.buffers)!r}, rounds={self.rounds})"

    @property
    def state(self) -> Any:
        """The optimizer's state (the engine's ``MomentumState``/``AdaptiveState`` with a leading axis of
        one run, ``None`` for ``sgd`` and before the first round)."""
        return self._state

    def apply(self, global_model: ModelT, client_models: Sequence[ModelT], weights: npt.ArrayLike) -> ModelT:
        """The new global model, of the same kind as ``global_model`` (inputs are left as they are).

        ``client_models[i]`` is client ``i``'s model after its local training (``theta_i``), of the
        same kind, names, shapes and dtypes as ``global_model``; ``weights[i]`` its ``w_i(S_t)``
        (a client drawn twice: one model, its weights summed, as ``Selection.distinct()`` gives
        them). A round with no client has nothing to apply: skip the call.
        """
        owner = f"{_OWNER}.apply"
        theta = _read(global_model, "global_model", owner)
        if not isinstance(client_models, (list, tuple)) or not client_models:
            got = f"an empty {type(client_models).__name__}" if isinstance(client_models, (list, tuple)) else None
            rule = "a non-empty list of the round's client models (a round with no client: skip the update)"
            raise _refuse("client_models", owner, rule, got or _describe(client_models))
        clients = [_read_client(model, k, theta, owner) for k, model in enumerate(client_models)]
        w = _read_weights(weights, len(clients), owner)
        unknown = sorted(self.buffers - set(theta.tensors))
        if unknown:
            rule = (
                f"names of entries of the model ({_names(theta.tensors)}; a non-persistent buffer is in no state dict)"
            )
            raise _refuse("buffers", _OWNER, rule, ", ".join(map(repr, unknown[:5])))
        new = self._step(theta.tensors, [c.tensors for c in clients], w, owner)
        self.rounds += 1
        return _write(theta.kind, new)  # type: ignore[no-any-return]

    def _step(
        self, theta: dict[str, torch.Tensor], clients: list[dict[str, torch.Tensor]], w: np.ndarray, owner: str
    ) -> dict[str, torch.Tensor]:
        """The engine's round with one run: ``delta``, the optimizer's step, the buffers' weighted mean."""
        device = next(iter(theta.values())).device
        is_buffer = {n: n in self.buffers or not t.is_floating_point() for n, t in theta.items()}
        params = {n: t.to(_compute_dtype(t)).unsqueeze(0) for n, t in theta.items() if not is_buffer[n]}
        self._bind(params, owner)
        run_of_slot = np.zeros(len(clients), dtype=np.int64)
        delta = {}
        for name, p in params.items():
            updates = torch.stack([c[name].to(device=device, dtype=p.dtype) for c in clients]) - p
            scale = torch.as_tensor(w, dtype=p.dtype, device=device).view(-1, *[1] * (updates.dim() - 1))
            delta[name] = segment_sum(updates * scale, run_of_slot, 1)  # the engine's sum_i w_i (theta_i - theta)
        new_params, self._state = self.optimizer.step(params, delta, self._state)
        buffers = {n: t.unsqueeze(0) for n, t in theta.items() if is_buffer[n]}
        slot_buffers = {n: torch.stack([c[n].to(device=device) for c in clients]) for n in buffers}
        weights = torch.as_tensor(w, dtype=torch.float64, device=device)
        new_buffers = combine_buffers(buffers, slot_buffers, run_of_slot, weights, 1)
        return {
            n: (new_params[n] if n in new_params else new_buffers[n]).squeeze(0).to(dtype=t.dtype)
            for n, t in theta.items()
        }

    def _bind(self, params: dict[str, torch.Tensor], owner: str) -> None:
        """Create the optimizer's state at the first round (or fit a loaded one); later, check the model."""
        layout = {n: (tuple(p.shape[1:]), p.dtype) for n, p in params.items()}
        if self._layout is None:
            template = self.optimizer.init(params)
            self._state = template if self._restored is None else _fit_state(self._restored, template, owner)
            self._restored, self._layout = None, layout
        elif layout != self._layout:
            rule = f"the model of the rounds before (parameters {_layout_text(self._layout)})"
            raise _refuse("global_model", owner, rule, f"parameters {_layout_text(layout)}")

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's name and state and the rounds applied, as plain data (CPU tensors, numbers,
        strings) for ``torch.save`` (read back with ``weights_only=True``) or any checkpoint of your own."""
        # A loaded state not yet fitted to a model is already plain data.
        plain = self._restored if self._restored is not None else _plain_state(self._state)
        return {
            "format": STATE_FORMAT,
            "version": _VERSION,
            "optimizer": _optimizer_name(self.optimizer),
            "rounds": self.rounds,
            "state": plain,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of a ``ServerUpdate`` with the same optimizer.

        The hyperparameters are this object's (change a learning rate on resume if you like); the
        state must be the optimizer's kind, and at the next :meth:`apply` it must fit the model.
        """
        owner = f"{_OWNER}.load_state_dict"
        name = _optimizer_name(self.optimizer)
        if not isinstance(state_dict, Mapping) or state_dict.get("format") != STATE_FORMAT:
            raise _refuse("state_dict", owner, f"a ServerUpdate.state_dict() ({STATE_FORMAT!r})", _describe(state_dict))
        if state_dict.get("version") != _VERSION:
            got = f"version {state_dict.get('version')!r:.20}"
            raise _refuse("state_dict", owner, f"of version {_VERSION} (this fedsample reads that one)", got)
        if state_dict.get("optimizer") != name:
            got = f"the state of {state_dict.get('optimizer')!r:.40}"
            raise _refuse("state_dict", owner, f"the state of this object's optimizer, {name!r}", got)
        rounds = state_dict.get("rounds")
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
            raise _refuse("state_dict", owner, "a state whose 'rounds' is an int >= 0", repr(rounds)[:40])
        restored = _restore_state(state_dict.get("state"), self.optimizer, owner) if rounds else None
        self.rounds, self._state, self._layout, self._restored = rounds, None, None, restored


# --- models in, models out ---------------------------------------------------------------------


def _read(model: Any, parameter: str, owner: str, *, where: str = "") -> _Read:
    """``model`` as named tensors (no copy for tensors; numpy arrays are copied), or the one-line error."""
    if _is_array_record(model):
        from fedsample.integrations.flower_client import arrays_to_numpy

        return _Read("flower", _from_numpy(arrays_to_numpy(model), parameter, owner, where))
    if isinstance(model, Mapping) and model:
        values = list(model.values())
        if not all(isinstance(key, str) for key in model):
            raise _refuse(parameter, owner, f"{_KINDS}, named by strings", f"{where}keys {list(model)[:5]!r:.80}")
        if all(isinstance(v, torch.Tensor) for v in values):
            tensors = {name: value.detach() for name, value in model.items()}
            return _Read("torch", _checked(tensors, parameter, owner, where))
        if all(isinstance(v, (np.ndarray, np.generic)) for v in values):
            return _Read("numpy", _from_numpy(dict(model), parameter, owner, where))
    if isinstance(model, (list, tuple)) and model and all(isinstance(v, (np.ndarray, np.generic)) for v in model):
        return _Read("list", _from_numpy({str(k): v for k, v in enumerate(model)}, parameter, owner, where))
    raise _refuse(parameter, owner, f"{_KINDS} (not empty, one kind of array)", f"{where}{_describe(model)}")


def _from_numpy(arrays: dict[str, Any], parameter: str, owner: str, where: str) -> dict[str, torch.Tensor]:
    tensors = {}
    for name, value in arrays.items():
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise _refuse(parameter, owner, "arrays of real numbers or integers", f"{where}{name!r} of {array.dtype}")
        # A writable copy in native byte order (torch refuses the other, and warns on read-only memory).
        tensors[name] = torch.from_numpy(np.array(array, dtype=array.dtype.newbyteorder("="), copy=True))
    return _checked(tensors, parameter, owner, where)


def _checked(tensors: dict[str, torch.Tensor], parameter: str, owner: str, where: str) -> dict[str, torch.Tensor]:
    """``tensors`` if every one is real or integer and every float is finite."""
    for name, tensor in tensors.items():
        if tensor.is_complex():
            raise _refuse(parameter, owner, "tensors of real numbers or integers", f"{where}{name!r} of {tensor.dtype}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise _refuse(parameter, owner, "finite values", f"{where}{name!r} holding NaN or infinity")
    return tensors


def _read_client(model: Any, index: int, theta: _Read, owner: str) -> _Read:
    """Client ``index``'s model, checked against the global one: kind, names, shapes, dtypes."""
    where = f"client {index}: "
    client = _read(model, "client_models", owner, where=where)
    rule = f"models like global_model ({_KINDS.split(', ')[0] if theta.kind == 'torch' else theta.kind})"
    if client.kind != theta.kind:
        raise _refuse("client_models", owner, rule, f"{where}a model of kind {client.kind!r}")
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
        raise _refuse("client_models", owner, "models with the entries of global_model", where + got)
    for name, value in theta.tensors.items():
        mine = client.tensors[name]
        if tuple(mine.shape) != tuple(value.shape):
            got = f"{where}{name!r} of shape {tuple(mine.shape)} (global_model's: {tuple(value.shape)})"
            raise _refuse("client_models", owner, "models with the shapes of global_model", got)
        if mine.dtype != value.dtype:
            got = f"{where}{name!r} of {_dtype_name(mine.dtype)} (global_model's: {_dtype_name(value.dtype)})"
            raise _refuse("client_models", owner, "models with the dtypes of global_model", got)
    return client


def _read_weights(weights: Any, count: int, owner: str) -> np.ndarray:
    rule = f"{count} finite numbers, w_i(S_t) of each client model"
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    try:
        w = np.asarray(weights)
    except (TypeError, ValueError):
        raise _refuse("weights", owner, rule, _describe(weights)) from None
    if w.dtype.kind not in "iuf" or w.ndim != 1 or w.size != count:
        got = f"an array of shape {w.shape} and dtype {w.dtype}" if w.dtype.kind != "O" else _describe(weights)
        raise _refuse("weights", owner, rule, got)
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise _refuse("weights", owner, rule, repr(w.tolist())[:120])
    return w


def _write(kind: str, tensors: dict[str, torch.Tensor]) -> Any:
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


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    return tensor.dtype if tensor.dtype in _COMPUTE_DTYPES else torch.float32


# --- the optimizer's state as plain data ---------------------------------------------------------


def _optimizer_name(optimizer: Any) -> str:
    return str(getattr(optimizer, "name", type(optimizer).__name__))


def _plain_state(state: Any) -> Any:
    """The engine's state (a NamedTuple of dicts of ``(1, ...)`` tensors and counts, or ``None``) as plain data."""
    if state is None:
        return None
    fields = tree_map_tensors(lambda t: t.squeeze(0).detach().cpu().clone(), state._asdict())
    return {"type": type(state).__name__, **fields}


def _restore_state(plain: Any, optimizer: Any, owner: str) -> Any:
    """A state from :func:`_plain_state`, checked against the optimizer's own kind (its state of no parameters)."""
    template = optimizer.init({})
    if template is None:
        if plain is not None:
            raise _refuse("state_dict", owner, "no state for this optimizer", "a state")
        return None
    kind = type(template).__name__
    if not isinstance(plain, Mapping) or plain.get("type") != kind or set(plain) != {"type", *template._fields}:
        raise _refuse("state_dict", owner, f"a state of kind {kind} ({', '.join(template._fields)})", _describe(plain))
    for field in template._fields:
        value, expected = plain[field], getattr(template, field)
        if isinstance(expected, dict):
            rule = "names mapped to finite tensors"
            good = isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, torch.Tensor) and bool(torch.isfinite(v).all())
                for k, v in value.items()
            )
        else:
            rule = "an int >= 0"
            good = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if not good:
            raise _refuse("state_dict", owner, f"a state whose {field!r} holds {rule}", _describe(value))
    return plain


def _fit_state(plain: Mapping[str, Any], template: Any, owner: str) -> Any:
    """The loaded state on the model's device and dtypes, after checking it holds the model's parameters."""
    fields = {}
    for field in template._fields:
        expected, value = getattr(template, field), plain[field]
        if isinstance(expected, dict):
            shapes = {n: tuple(t.shape[1:]) for n, t in expected.items()}
            if {n: tuple(t.shape) for n, t in value.items()} != shapes:
                rule = f"the model whose state was loaded (parameters {_shapes_text(value)})"
                raise _refuse("global_model", owner, rule, f"parameters {_shapes_text(expected, skip=1)}")
            value = {n: t.to(device=expected[n].device, dtype=expected[n].dtype).unsqueeze(0) for n, t in value.items()}
        fields[field] = value
    return type(template)(**fields)


# --- messages ----------------------------------------------------------------------------------


def _refuse(parameter: str, owner: str, constraint: str, got: str) -> FedsampleError:
    """The library's one-line error, with a described value (``got``) instead of a repr."""
    return FedsampleError(
        f"The {parameter!r} parameter of {owner} must be {constraint}. Got {' '.join(got.split())} instead.",
        parameter=parameter,
        owner=owner,
        constraint=constraint,
        value=got,
    )


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple, dict)) and len(value) > 3:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return f"a {type(value).__name__} {text[:80]}" if len(text) <= 80 else f"a {type(value).__name__}"


def _names(tensors: Mapping[str, Any]) -> str:
    names = list(tensors)
    return ", ".join(map(repr, names[:6])) + (", ..." if len(names) > 6 else "")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _layout_text(layout: Mapping[str, tuple[tuple[int, ...], torch.dtype]]) -> str:
    items = list(layout.items())
    parts = [f"{n!r}: {shape} {_dtype_name(dtype)}" for n, (shape, dtype) in items[:4]]
    return "{" + ", ".join(parts) + (", ..." if len(items) > 4 else "") + "}"


def _shapes_text(tensors: Mapping[str, Any], *, skip: int = 0) -> str:
    items = list(tensors.items())
    parts = [f"{n!r}: {tuple(t.shape[skip:])}" for n, t in items[:4]]
    return "{" + ", ".join(parts) + (", ..." if len(items) > 4 else "") + "}"
