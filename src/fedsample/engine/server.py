"""Server updates: how the aggregated update moves the global model.

The loop computes, per run, the aggregate ``delta = sum_i w_i(S_t) (theta_i - theta)`` and hands it
to a server optimizer, which treats ``-delta`` as a pseudo-gradient (Reddi et al. 2021, "Adaptive
Federated Optimization"):

* :class:`ServerSGD`: paper 003's eq. 3, ``theta <- theta + eta_g delta`` (FedAvg is ``eta_g = 1``);
* :class:`ServerMomentum`: FedAvgM (Hsu et al. 2019), heavy-ball or Nesterov momentum on ``delta``;
* :class:`FedAdam`, :class:`FedYogi`, :class:`FedAdagrad`: Reddi et al.'s adaptive server optimizers
  (Algorithm 2), described below.

An optimizer is a frozen dataclass of hyperparameters; ``init`` creates its state and ``step``
returns new parameters and a new state. Parameters, ``delta`` and every state tensor carry a leading
run axis ``R`` and the rules are elementwise, so runs batched together stay independent.

The adaptive optimizers (Reddi et al. 2021, Algorithm 2) treat ``-delta`` as the pseudo-gradient of
round ``t``:

* ``m_t = beta1 m_{t-1} + (1 - beta1) delta``, the same for all three;
* the second moment ``v_t``, which is where they differ:

  - FedAdam: ``v_t = beta2 v_{t-1} + (1 - beta2) delta^2``;
  - FedYogi: ``v_t = v_{t-1} - (1 - beta2) delta^2 sign(v_{t-1} - delta^2)``;
  - FedAdagrad: ``v_t = v_{t-1} + delta^2``;
* ``theta <- theta + lr m_t / (sqrt(v_t) + tau)``.

``m`` starts at zero and ``v`` at ``tau^2`` (Algorithm 2's ``v_{-1} >= tau^2``). Reddi et al. apply no
bias correction; ``bias_correction=True`` divides ``m_t`` by ``1 - beta1^t`` and, for Adam and Yogi,
``v_t`` by ``1 - beta2^t``, as Adam does. ``adaptive=False`` drops the denominator:
``theta <- theta + lr m_t``, so that ``adaptive=False, beta1=0`` is ``ServerSGD(lr)`` exactly.
Their round counter ``t`` is shared by the runs, because every run steps every round.

>>> make_server_optimizer("fedavgm", beta=0.9)
ServerMomentum(lr=1.0, beta=0.9, nesterov=False)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import torch

from fedsample._validation import Options, invalid
from fedsample.engine.paper_models import Params
from fedsample.engine.registry import SERVER_OPTIMIZERS as SERVER_TABLES

__all__ = [
    "SERVER_OPTIMIZERS",
    "AdaptiveState",
    "FedAdagrad",
    "FedAdam",
    "FedYogi",
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


# FedAdam, FedYogi and FedAdagrad share their defaults (the registry declares them once, in one helper).
_ADAM = SERVER_TABLES["fedadam"]


class AdaptiveState(NamedTuple):
    """``steps``: rounds applied so far (``t``); ``momentum``: ``m``; ``second_moment``: ``v``
    (empty when the optimizer is not adaptive)."""

    steps: int
    momentum: Params
    second_moment: Params


@dataclass(frozen=True, kw_only=True)
class _AdaptiveServer(ABC):
    """The shared rule; subclasses say how the second moment ``v`` moves."""

    name: ClassVar[str]
    lr: float = _ADAM.defaults["lr"]
    beta1: float = _ADAM.defaults["beta1"]
    tau: float = _ADAM.defaults["tau"]
    bias_correction: bool = _ADAM.defaults["bias_correction"]
    adaptive: bool = _ADAM.defaults["adaptive"]

    def __post_init__(self) -> None:
        table = SERVER_TABLES[self.name]
        table.validate({key: getattr(self, key) for key in table.parameters})

    @abstractmethod
    def _second_moment(self, v: torch.Tensor, delta_squared: torch.Tensor) -> torch.Tensor:
        """``v_t`` from ``v_{t-1}`` and the squared pseudo-gradient (each optimizer's own rule)."""

    def _second_moment_correction(self, count: int) -> float:
        """The bias-correction divisor of ``v_t`` (1: none)."""
        return 1.0

    def init(self, params: Params) -> AdaptiveState:
        momentum = {n: p.new_zeros(p.shape) for n, p in params.items()}
        v0 = float(self.tau) ** 2
        second = {n: p.new_full(p.shape, v0) for n, p in params.items()} if self.adaptive else {}
        return AdaptiveState(steps=0, momentum=momentum, second_moment=second)

    def step(self, params: Params, delta: Params, state: AdaptiveState) -> tuple[Params, AdaptiveState]:
        count = state.steps + 1
        beta1 = float(self.beta1)
        momentum = {n: m.mul(beta1).add_(delta[n], alpha=1.0 - beta1) for n, m in state.momentum.items()}
        direction = momentum
        if self.bias_correction:
            direction = {n: m.div(1.0 - beta1**count) for n, m in momentum.items()}
        second = state.second_moment
        if self.adaptive:
            second = {n: self._second_moment(v, delta[n].square()) for n, v in second.items()}
            v_scale = self._second_moment_correction(count) if self.bias_correction else 1.0
            direction = {n: d.div(second[n].div(v_scale).sqrt().add_(self.tau)) for n, d in direction.items()}
        new_params = {n: p.add(direction[n], alpha=self.lr) for n, p in params.items()}
        return new_params, AdaptiveState(steps=count, momentum=momentum, second_moment=second)


@dataclass(frozen=True, kw_only=True)
class _DecayingSecondMoment(_AdaptiveServer):
    """Adam and Yogi: a second moment with decay ``beta2``, bias-corrected by ``1 - beta2^t`` if asked."""

    beta2: float = _ADAM.defaults["beta2"]

    def _second_moment_correction(self, count: int) -> float:
        return 1.0 - float(self.beta2) ** count


@dataclass(frozen=True, kw_only=True)
class FedAdam(_DecayingSecondMoment):
    """FedAdam: ``v_t = beta2 v_{t-1} + (1 - beta2) delta^2``; ``theta += lr m_t / (sqrt(v_t) + tau)``.

    Defaults ``beta1 = 0.9``, ``beta2 = 0.99`` are Reddi et al.'s; ``lr`` and ``tau`` need tuning
    (they search ``tau`` over ``1e-5 .. 1e-1``).

    >>> FedAdam(lr=0.01)
    FedAdam(lr=0.01, beta1=0.9, tau=0.001, bias_correction=False, adaptive=True, beta2=0.99)
    """

    name: ClassVar[str] = "fedadam"

    def _second_moment(self, v: torch.Tensor, delta_squared: torch.Tensor) -> torch.Tensor:
        beta2 = float(self.beta2)
        return v.mul(beta2).add_(delta_squared, alpha=1.0 - beta2)


@dataclass(frozen=True, kw_only=True)
class FedYogi(_DecayingSecondMoment):
    """FedYogi: ``v_t = v_{t-1} - (1 - beta2) delta^2 sign(v_{t-1} - delta^2)``; otherwise as FedAdam.

    ``v`` moves additively toward ``delta^2``, so it grows no faster than Adam's and shrinks slower.
    """

    name: ClassVar[str] = "fedyogi"

    def _second_moment(self, v: torch.Tensor, delta_squared: torch.Tensor) -> torch.Tensor:
        return v - (1.0 - float(self.beta2)) * delta_squared * torch.sign(v - delta_squared)


@dataclass(frozen=True, kw_only=True)
class FedAdagrad(_AdaptiveServer):
    """FedAdagrad: ``v_t = v_{t-1} + delta^2`` (no ``beta2``; bias correction touches only ``m``)."""

    name: ClassVar[str] = "fedadagrad"

    def _second_moment(self, v: torch.Tensor, delta_squared: torch.Tensor) -> torch.Tensor:
        return v.add(delta_squared)


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
        raise invalid("server", "make_server_optimizer", Options(tuple(SERVER_OPTIMIZERS)), name)
    try:
        optimizer: ServerOptimizer = SERVER_OPTIMIZERS[name](**params)
    except TypeError as exc:
        raise invalid("server", "make_server_optimizer", f"given only the parameters of {name}", params) from exc
    return optimizer
