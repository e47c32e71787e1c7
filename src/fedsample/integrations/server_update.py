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
(``buffers=dict(model.named_buffers())``, or the positions of a list): they take the clients' weighted
mean with the positive weights normalised to sum one (a client of weight ``<= 0`` does not enter it),
a convex combination that keeps a running variance positive and ``num_batches_tracked`` a count;
integer entries (``num_batches_tracked``) are always buffers, their mean rounded. A round without a
positive weight keeps the buffers. Weights of either sign move the parameters as written (a control
variate's negative weights are estimators too).

**Arithmetic.** The round is computed in float64 whatever the model's dtype, and the result is cast
back to it only when every value is finite and within that dtype (float16's 65504...): weights whose
update overflows the model, or the optimizer's state, are refused instead of returning infinities.

**State.** The optimizer's state (FedAvgM's momentum, FedAdam's moments and round count) lives in
the :class:`ServerUpdate` from round to round; keep one object for the whole training.
:meth:`ServerUpdate.state_dict` gives it as plain data (tensors, numbers, strings) that
``torch.save`` writes and ``torch.load(..., weights_only=True)`` reads, and
:meth:`ServerUpdate.load_state_dict` restores it, so a resumed loop continues exactly. A loaded
state is checked as data from outside (:mod:`fedsample.integrations._server_state`): finite moments
within the model's dtype, second moments ``>= 0``, round counts in ``[0, 2**53]``.

Every input is data to check: each model kind, name, shape, dtype, non-finite value, the weights'
length and values, and an empty round are refused in one :class:`~fedsample.FedsampleError` line
naming the parameter. Importing this module imports PyTorch but not Flower: an ``ArrayRecord`` is
recognised only when Flower is already loaded (it made the record).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

import fedsample.engine  # noqa: F401  (torch-free; before PyTorch loads, it makes OpenMP's threads wait passively)
from fedsample._imports import require

require("torch", extra="torch", package="torch", owner="fedsample.integrations.server_update")

import torch  # noqa: E402  (after the check that names the extra to install)

from fedsample.engine.aggregation import combine_buffers  # noqa: E402
from fedsample.engine.algorithms import segment_sum  # noqa: E402
from fedsample.engine.server import ServerOptimizer, ServerSGD  # noqa: E402
from fedsample.integrations._server_models import (  # noqa: E402
    describe,
    dtype_name,
    dtype_range,
    layout_text,
    names_text,
    read_client,
    read_model,
    read_weights,
    refuse,
    write_model,
)
from fedsample.integrations._server_state import (  # noqa: E402
    fit_state,
    is_round_count,
    optimizer_name,
    plain_state,
    restore_state,
    state_problem,
)

__all__ = ["STATE_FORMAT", "ServerUpdate"]

ModelT = TypeVar("ModelT")

STATE_FORMAT = "fedsample-server-update"
_VERSION = 1
_OWNER = "ServerUpdate"
# The round's arithmetic: float64 whatever the model's dtype (float16's updates overflow at 65504, and lose
# their small steps), cast back after the check that the result fits the model's dtype.
_COMPUTE_DTYPE = torch.float64


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
            raise refuse("optimizer", _OWNER, "a server optimizer (make_server_optimizer)", repr(optimizer)[:120])
        rule = "a name (str), or an iterable of names (str) and list positions (int)"
        if not isinstance(buffers, (str, bytes, Iterable)):  # list(None), list(3) raised TypeError
            raise refuse("buffers", _OWNER, rule, repr(buffers)[:120])
        names = list(buffers) if not isinstance(buffers, (str, bytes)) else [buffers]
        if not all(isinstance(name, (str, int)) and not isinstance(name, bool) for name in names):
            raise refuse("buffers", _OWNER, rule, repr(buffers)[:120])
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
        theta = read_model(global_model, "global_model", owner)
        if not isinstance(client_models, (list, tuple)) or not client_models:
            got = f"an empty {type(client_models).__name__}" if isinstance(client_models, (list, tuple)) else None
            rule = "a non-empty list of the round's client models (a round with no client: skip the update)"
            raise refuse("client_models", owner, rule, got or describe(client_models))
        clients = [read_client(model, k, theta, owner) for k, model in enumerate(client_models)]
        w = read_weights(weights, len(clients), owner)
        unknown = sorted(self.buffers - set(theta.tensors))
        if unknown:
            entries = names_text(theta.tensors)
            rule = f"names of entries of the model ({entries}; a non-persistent buffer is in no state dict)"
            raise refuse("buffers", _OWNER, rule, ", ".join(map(repr, unknown[:5])))
        new = self._step(theta.tensors, [c.tensors for c in clients], w, owner)
        self.rounds += 1
        return write_model(theta.kind, new)  # type: ignore[no-any-return]

    def _step(
        self, theta: dict[str, torch.Tensor], clients: list[dict[str, torch.Tensor]], w: np.ndarray, owner: str
    ) -> dict[str, torch.Tensor]:
        """The engine's round with one run, in float64: ``delta``, the optimizer's step, the buffers'
        weighted mean; the optimizer's new state is kept only when the round is not refused."""
        device = next(iter(theta.values())).device
        is_buffer = {n: n in self.buffers or not t.is_floating_point() for n, t in theta.items()}
        dtypes = {n: t.dtype for n, t in theta.items() if not is_buffer[n]}
        params = {n: theta[n].to(_COMPUTE_DTYPE).unsqueeze(0) for n in dtypes}
        state = self._bind(params, dtypes, owner)
        run_of_slot = np.zeros(len(clients), dtype=np.int64)
        delta = {}
        for name, p in params.items():
            updates = torch.stack([c[name].to(device=device, dtype=_COMPUTE_DTYPE) for c in clients]) - p
            scale = torch.as_tensor(w, dtype=_COMPUTE_DTYPE, device=device).view(-1, *[1] * (updates.dim() - 1))
            delta[name] = segment_sum(updates * scale, run_of_slot, 1)  # the engine's sum_i w_i (theta_i - theta)
        new_params, new_state = self.optimizer.step(params, delta, state)
        problem = _params_problem(new_params, dtypes) or state_problem(new_state, dtypes)
        if problem:
            limits = ", ".join(sorted({f"{dtype_name(d)}'s {dtype_range(d):.6g}" for d in dtypes.values()}))
            rule = f"weights whose update keeps the model and the optimizer's state finite and within {limits}"
            raise refuse("weights", owner, rule, f"weights up to {np.abs(w).max():.3g} in magnitude, giving {problem}")
        buffers = {n: t.unsqueeze(0) for n, t in theta.items() if is_buffer[n]}
        slot_buffers = {n: torch.stack([c[n].to(device=device) for c in clients]) for n in buffers}
        new_buffers = combine_buffers(buffers, slot_buffers, run_of_slot, _buffer_weights(w, device), 1)
        self._state = new_state
        return {
            n: (new_params[n] if n in new_params else new_buffers[n]).squeeze(0).to(dtype=t.dtype)
            for n, t in theta.items()
        }

    def _bind(self, params: dict[str, torch.Tensor], dtypes: dict[str, torch.dtype], owner: str) -> Any:
        """The optimizer's state for this round: created at the first round (or a loaded one fitted to the
        model); later, after checking that the model is the one of the rounds before."""
        layout = {n: (tuple(p.shape[1:]), dtypes[n]) for n, p in params.items()}
        if self._layout is None:
            template = self.optimizer.init(params)
            self._state = template if self._restored is None else fit_state(self._restored, template, dtypes, owner)
            self._restored, self._layout = None, layout
        elif layout != self._layout:
            rule = f"the model of the rounds before (parameters {layout_text(self._layout)})"
            raise refuse("global_model", owner, rule, f"parameters {layout_text(layout)}")
        return self._state

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's name and state and the rounds applied, as plain data (CPU tensors, numbers,
        strings) for ``torch.save`` (read back with ``weights_only=True``) or any checkpoint of your own."""
        # A loaded state not yet fitted to a model is already plain data.
        plain = self._restored if self._restored is not None else plain_state(self._state)
        return {
            "format": STATE_FORMAT,
            "version": _VERSION,
            "optimizer": optimizer_name(self.optimizer),
            "rounds": self.rounds,
            "state": plain,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of a ``ServerUpdate`` with the same optimizer.

        The hyperparameters are this object's (change a learning rate on resume if you like); the
        state must be the optimizer's kind, and at the next :meth:`apply` it must fit the model.
        """
        owner = f"{_OWNER}.load_state_dict"
        name = optimizer_name(self.optimizer)
        if not isinstance(state_dict, Mapping) or state_dict.get("format") != STATE_FORMAT:
            raise refuse("state_dict", owner, f"a ServerUpdate.state_dict() ({STATE_FORMAT!r})", describe(state_dict))
        if state_dict.get("version") != _VERSION:
            got = f"version {state_dict.get('version')!r:.20}"
            raise refuse("state_dict", owner, f"of version {_VERSION} (this fedsample reads that one)", got)
        if state_dict.get("optimizer") != name:
            got = f"the state of {state_dict.get('optimizer')!r:.40}"
            raise refuse("state_dict", owner, f"the state of this object's optimizer, {name!r}", got)
        rounds = state_dict.get("rounds")
        if not is_round_count(rounds):
            raise refuse("state_dict", owner, "a state whose 'rounds' is an int in [0, 2**53]", repr(rounds)[:40])
        restored = restore_state(state_dict.get("state"), self.optimizer, owner) if rounds else None
        self.rounds, self._state, self._layout, self._restored = rounds, None, None, restored


def _params_problem(params: dict[str, torch.Tensor], dtypes: dict[str, torch.dtype]) -> str:
    """Which new parameter is not finite or beyond its dtype's range (``""``: none)."""
    for name, value in params.items():
        largest = float(value.abs().max()) if value.numel() else 0.0
        if not largest <= dtype_range(dtypes[name]):  # NaN fails too
            return f"{name!r} of {largest:.3g}"
    return ""


def _buffer_weights(w: np.ndarray, device: torch.device) -> torch.Tensor:
    """The buffers' weights: the positive part of ``w``, scaled by its largest (the normalised mean is the
    same, and the sum of weights near 1e308 stays finite)."""
    positive = np.maximum(w, 0.0)
    largest = float(positive.max())
    return torch.as_tensor(positive / largest if largest > 0 else positive, dtype=torch.float64, device=device)
