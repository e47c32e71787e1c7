"""Server updates: how the aggregated update moves the global model.

The loop computes, per run, the aggregate ``delta = sum_i w_i(S_t) (theta_i - theta)`` and hands it
to a server optimizer. :class:`ServerSGD` is paper 003's eq. 3, ``theta <- theta + eta_g delta``
(FedAvg is ``eta_g = 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fedsample._validation import Interval, check_param
from fedsample.engine.models import Params

__all__ = ["ServerOptimizer", "ServerSGD"]


class ServerOptimizer(Protocol):
    """``init`` creates the optimizer state for stacked global parameters; ``step`` applies ``delta``."""

    @property
    def name(self) -> str: ...

    def init(self, params: Params) -> Any: ...

    def step(self, params: Params, delta: Params, state: Any) -> tuple[Params, Any]: ...


@dataclass(frozen=True)
class ServerSGD:
    """``theta <- theta + lr * delta`` with ``lr = eta_g`` (003, eq. 3)."""

    lr: float = 1.0
    name: str = "sgd"

    def __post_init__(self) -> None:
        check_param("lr", "ServerSGD", self.lr, Interval(float, 0, None, closed="neither"))

    def init(self, params: Params) -> None:
        return None

    def step(self, params: Params, delta: Params, state: None) -> tuple[Params, None]:
        return {n: p.add(delta[n], alpha=self.lr) for n, p in params.items()}, None
