"""Server updates: how the aggregated update moves the global model.

The loop computes, per run, the aggregate ``delta = sum_i w_i(S_t) (theta_i - theta)`` and hands it
to a server optimizer, which treats ``-delta`` as a pseudo-gradient (Reddi et al. 2021, "Adaptive
Federated Optimization"):

* :class:`ServerSGD`: paper 003's eq. 3, ``theta <- theta + eta_g delta`` (FedAvg is ``eta_g = 1``);
* :class:`ServerMomentum`: FedAvgM (Hsu et al. 2019), heavy-ball or Nesterov momentum on ``delta``;
* :class:`~fedsample.engine.server_adaptive.FedAdam`, ``FedYogi``, ``FedAdagrad``: Reddi et al.'s
  adaptive server optimizers (in :mod:`fedsample.engine.server_adaptive`).

An optimizer is a frozen dataclass of hyperparameters; ``init`` creates its state and ``step``
returns new parameters and a new state. Parameters, ``delta`` and every state tensor carry a leading
run axis ``R`` and the rules are elementwise, so runs batched together stay independent.

>>> make_server_optimizer("fedavgm", beta=0.9)
ServerMomentum(lr=1.0, beta=0.9, nesterov=False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

from fedsample._validation import invalid
from fedsample.engine.models import Params
from fedsample.engine.registry import SERVER_OPTIMIZERS as SERVER_TABLES
from fedsample.engine.server_adaptive import FedAdagrad, FedAdam, FedYogi

__all__ = [
    "SERVER_OPTIMIZERS",
    "MomentumState",
    "ServerMomentum",
    "ServerOptimizer",
    "ServerSGD",
    "make_server_optimizer",
]


class ServerOptimizer(Protocol):
    """``init`` creates the optimizer state for stacked global parameters; ``step`` applies ``delta``."""

    @property
    def name(self) -> str: ...

    def init(self, params: Params) -> Any: ...

    def step(self, params: Params, delta: Params, state: Any) -> tuple[Params, Any]: ...


@dataclass(frozen=True)
class ServerSGD:
    """``theta <- theta + lr * delta`` with ``lr = eta_g`` (003, eq. 3)."""

    lr: float = SERVER_TABLES["sgd"].defaults["lr"]
    name: str = "sgd"

    def __post_init__(self) -> None:
        SERVER_TABLES["sgd"].validate({"lr": self.lr})

    def init(self, params: Params) -> None:
        return None

    def step(self, params: Params, delta: Params, state: None) -> tuple[Params, None]:
        return {n: p.add(delta[n], alpha=self.lr) for n, p in params.items()}, None


class MomentumState(NamedTuple):
    """The momentum buffer ``m`` of :class:`ServerMomentum` (same shapes as the parameters)."""

    momentum: Params


@dataclass(frozen=True, kw_only=True)
class ServerMomentum:
    """FedAvgM: ``m <- beta m + delta``, then ``theta <- theta + lr m``.

    With ``nesterov`` the step is ``theta <- theta + lr (delta + beta m)`` (PyTorch's Nesterov rule on
    the pseudo-gradient ``-delta``). ``beta = 0`` is :class:`ServerSGD` exactly, with or without Nesterov.
    ``m`` starts at zero.
    """

    name: ClassVar[str] = "fedavgm"
    lr: float = SERVER_TABLES["fedavgm"].defaults["lr"]
    beta: float = SERVER_TABLES["fedavgm"].defaults["beta"]
    nesterov: bool = SERVER_TABLES["fedavgm"].defaults["nesterov"]

    def __post_init__(self) -> None:
        table = SERVER_TABLES[self.name]
        table.validate({key: getattr(self, key) for key in table.parameters})

    def init(self, params: Params) -> MomentumState:
        return MomentumState(momentum={n: p.new_zeros(p.shape) for n, p in params.items()})

    def step(self, params: Params, delta: Params, state: MomentumState) -> tuple[Params, MomentumState]:
        momentum = {n: m.mul(self.beta).add_(delta[n]) for n, m in state.momentum.items()}
        direction = momentum
        if self.nesterov:
            direction = {n: d.add(momentum[n], alpha=self.beta) for n, d in delta.items()}
        new_params = {n: p.add(direction[n], alpha=self.lr) for n, p in params.items()}
        return new_params, MomentumState(momentum=momentum)


SERVER_OPTIMIZERS: dict[str, type[Any]] = {
    "sgd": ServerSGD,
    "fedavgm": ServerMomentum,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
    "fedadagrad": FedAdagrad,
}


def make_server_optimizer(name: str, **params: Any) -> ServerOptimizer:
    """Build a server optimizer from its name (``sgd``, ``fedavgm``, ``fedadam``, ``fedyogi``, ``fedadagrad``).

    >>> make_server_optimizer("fedadam", lr=0.01, tau=1e-3).name
    'fedadam'
    """
    if name not in SERVER_OPTIMIZERS:
        names = "one of {" + ", ".join(map(repr, SERVER_OPTIMIZERS)) + "}"
        raise invalid("server", "make_server_optimizer", names, name)
    try:
        optimizer: ServerOptimizer = SERVER_OPTIMIZERS[name](**params)
    except TypeError as exc:
        raise invalid("server", "make_server_optimizer", f"given only the parameters of {name}", params) from exc
    return optimizer
