"""Local algorithms: small objects plugged into the one round loop.

Every algorithm runs the same local step on each selected client,
``theta_i <- theta_i - eta_l (grad L_batch(theta_i) + mu (theta_i - theta) + c_i)``, and differs only
in the number of steps, the proximal weight ``mu`` and the correction ``c_i`` (zero except for
control-variate methods such as SCAFFOLD, whose state the hooks :meth:`LocalAlgorithm.init_state`
and :meth:`LocalAlgorithm.after_round` carry from round to round).

* :class:`FedAvg`: ``N`` steps of local SGD on the task loss.
* :class:`FedProx`: adds ``mu/2 ||theta_i - theta||^2`` to the local loss (paper 000, App. D.5).
* :class:`MiniBatchSGD`: each client returns one stochastic gradient at ``theta`` (one local step,
  so ``theta_i - theta = -eta_l g_i``): paper 001's Algorithm 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from fedsample._arrays import IntArray
from fedsample._validation import Interval, check_param, invalid
from fedsample.engine.models import Params

__all__ = ["ALGORITHMS", "FedAvg", "FedProx", "LocalAlgorithm", "MiniBatchSGD", "make_algorithm"]


@dataclass(frozen=True, kw_only=True)
class LocalAlgorithm:
    """Plain local SGD on the task loss; subclasses override the hooks they need."""

    name: ClassVar[str] = "fedavg"

    def num_local_steps(self, configured: int) -> int:
        """Local steps per round given the configured ``N``."""
        return configured

    @property
    def proximal_mu(self) -> float:
        return 0.0

    def init_state(self, num_runs: int, num_clients: int, template: Params) -> Any:
        """Per-run algorithm state (for example control variates); ``None`` when there is none."""
        return None

    def corrections(self, state: Any, run_of_slot: IntArray, clients: IntArray) -> Params | None:
        """The gradient correction ``c_i`` of each slot, stacked; ``None`` for no correction."""
        return None

    def after_round(
        self,
        state: Any,
        *,
        run_of_slot: IntArray,
        clients: IntArray,
        updates: Params,
        local_lr: float,
        steps: int,
        weights: torch.Tensor,
    ) -> Any:
        """The state after a round, given each slot's update ``theta_i - theta``."""
        return state


@dataclass(frozen=True, kw_only=True)
class FedAvg(LocalAlgorithm):
    """FedAvg's local work: ``N`` SGD steps of batch ``B`` on the local loss."""

    name: ClassVar[str] = "fedavg"


@dataclass(frozen=True, kw_only=True)
class FedProx(LocalAlgorithm):
    """FedProx: local loss plus ``mu/2 ||theta_i - theta||^2``."""

    name: ClassVar[str] = "fedprox"
    mu: float = 0.01

    def __post_init__(self) -> None:
        check_param("mu", "FedProx", self.mu, Interval(float, 0, None, closed="left"))

    @property
    def proximal_mu(self) -> float:
        return float(self.mu)


@dataclass(frozen=True, kw_only=True)
class MiniBatchSGD(LocalAlgorithm):
    """Mini-batch SGD (paper 001, Alg. 3): one stochastic gradient per selected client and round."""

    name: ClassVar[str] = "minibatch-sgd"

    def num_local_steps(self, configured: int) -> int:
        return 1


ALGORITHMS: dict[str, type[LocalAlgorithm]] = {cls.name: cls for cls in (FedAvg, FedProx, MiniBatchSGD)}


def make_algorithm(name: str, **params: Any) -> LocalAlgorithm:
    """Build a local algorithm from its name (``fedavg``, ``fedprox``, ``minibatch-sgd``)."""
    if name not in ALGORITHMS:
        raise invalid("algorithm", "make_algorithm", "one of {" + ", ".join(map(repr, ALGORITHMS)) + "}", name)
    try:
        return ALGORITHMS[name](**params)
    except TypeError as exc:
        raise invalid("algorithm", "make_algorithm", f"given only the parameters of {name}", params) from exc


def segment_sum(values: torch.Tensor, segments: IntArray, num_segments: int) -> torch.Tensor:
    """Sum the rows of ``values`` that share a segment id (used to aggregate slots per run)."""
    index = torch.as_tensor(np.asarray(segments), device=values.device, dtype=torch.long)
    out = torch.zeros((num_segments, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)
