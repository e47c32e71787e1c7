"""Local algorithms: small objects plugged into the one round loop.

In the spirit of FedJAX's ``for_each_client(client_init, client_step, client_final)``, an algorithm
supplies its clients' work and the backends (:mod:`fedsample.engine.trainers.base`) only run it:

* ``client_init``: :meth:`LocalAlgorithm.client_init` gives the round's :class:`ClientStep` for the
  slots trained (for SCAFFOLD, each slot's correction ``c - c_i``), and
  :meth:`LocalAlgorithm.num_local_steps` the number of steps;
* ``client_step``: a local step is
  ``theta_i <- theta_i - eta_l (grad L_batch(theta_i) + mu (theta_i - theta) + c_i)``, where
  :meth:`ClientStep.direction` adds the algorithm's terms to the task gradient;
* ``client_final``: the backends return each slot's update ``theta_i - theta``; from the kept
  slots' :class:`ClientFinal`, :meth:`LocalAlgorithm.after_round` moves the algorithm's state
  (SCAFFOLD's control variates, made by :meth:`LocalAlgorithm.init_state`) from round to round.

FedSampling's fixed kept subset (a data-level selection, whose clients read the same kept rows at
every local step) is the client's batch plan (:func:`fedsample.engine.batching.selection_batches`).

* :class:`FedAvg`: ``N`` steps of local SGD on the task loss.
* :class:`FedProx`: adds ``mu/2 ||theta_i - theta||^2`` to the local loss (paper 000, App. D.5).
* :class:`MiniBatchSGD`: each client returns one stochastic gradient at ``theta`` (one local step,
  so ``theta_i - theta = -eta_l g_i``): paper 001's Algorithm 3.
* :class:`Scaffold`: SCAFFOLD (Karimireddy et al. 2020); the correction is the server's control variate
  minus the client's, ``c - c_i``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Options, invalid
from fedsample.engine.paper_models import Params
from fedsample.engine.registry import ALGORITHMS as ALGORITHM_TABLES

__all__ = [
    "ALGORITHMS",
    "ClientFinal",
    "ClientStep",
    "FedAvg",
    "FedProx",
    "LocalAlgorithm",
    "MiniBatchSGD",
    "Scaffold",
    "ScaffoldState",
    "make_algorithm",
]


class ClientFinal(NamedTuple):
    """What the kept slots of a round returned (FedJAX's ``client_final``), for :meth:`LocalAlgorithm.after_round`.

    Slot ``j`` is client ``clients[j]`` of run ``run_of_slot[j]``; ``updates`` holds the stacked
    ``theta_i - theta``, ``weights`` the aggregation weights, after ``steps`` local steps at ``local_lr``.
    """

    run_of_slot: IntArray
    clients: IntArray
    updates: Params
    local_lr: float
    steps: int
    weights: torch.Tensor


@dataclass(frozen=True)
class ClientStep:
    """What one round's local step adds to each slot's task gradient: ``mu (theta_i - theta) + c_i``.

    ``proximal_mu`` is FedProx's ``mu`` (0: none); ``corrections`` the stacked ``c_i`` of the slots
    (``None``: none). A step with neither is plain SGD on the task loss, which the batched backend
    may fuse into its kernels.
    """

    proximal_mu: float = 0.0
    corrections: Params | None = None

    @property
    def is_plain(self) -> bool:
        """Whether the step is plain SGD on the task loss (nothing added to the gradient)."""
        return not self.proximal_mu and self.corrections is None

    def select(self, index: torch.Tensor) -> ClientStep:
        """The step of the slots ``index`` (in that order)."""
        if self.corrections is None:
            return self
        return ClientStep(self.proximal_mu, {n: v.index_select(0, index) for n, v in self.corrections.items()})

    def of_slot(self, slot: int) -> ClientStep:
        """The step of one slot, its tensors without the slot axis (for the sequential reference)."""
        if self.corrections is None:
            return self
        return ClientStep(self.proximal_mu, {n: v[slot] for n, v in self.corrections.items()})

    def direction(self, name: str, gradient: torch.Tensor, param: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """The step direction of parameter ``name``: the task ``gradient`` plus ``mu (param - anchor) + c``."""
        if self.proximal_mu:
            gradient = gradient.add(param - anchor, alpha=self.proximal_mu)
        return self.corrected(name, gradient)

    def objective(self, loss: torch.Tensor, params: Iterable[tuple[str, torch.Tensor]], anchor: Params) -> torch.Tensor:
        """The local objective ``loss + mu/2 ||theta_i - theta||^2`` of one slot, for a backend that
        differentiates it with autograd; :meth:`corrected` then adds ``c`` to its gradient."""
        if not self.proximal_mu:
            return loss
        return loss + 0.5 * self.proximal_mu * sum((p - anchor[n]).pow(2).sum() for n, p in params)

    def corrected(self, name: str, gradient: torch.Tensor) -> torch.Tensor:
        """``gradient + c`` for parameter ``name`` (the gradient itself without corrections)."""
        return gradient if self.corrections is None else gradient.add(self.corrections[name])


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

    def init_state(
        self, num_runs: int, num_clients: int, template: Params, *, importances: FloatArray | None = None
    ) -> Any:
        """Per-run algorithm state (for example control variates); ``None`` when there is none.

        ``template`` holds the stacked global parameters ``(R, ...)``; ``importances`` the ``p_i`` of
        the objective (``None``: unknown, taken as ``1 / n``).
        """
        return None

    def corrections(self, state: Any, run_of_slot: IntArray, clients: IntArray) -> Params | None:
        """The gradient correction ``c_i`` of each slot, stacked; ``None`` for no correction."""
        return None

    def client_init(self, state: Any, run_of_slot: IntArray, clients: IntArray) -> ClientStep:
        """The local step of the round's slots (slot ``j`` is client ``clients[j]`` of run ``run_of_slot[j]``)."""
        return ClientStep(self.proximal_mu, self.corrections(state, run_of_slot, clients))

    def after_round(self, state: Any, final: ClientFinal) -> Any:
        """The state after a round, given what its kept slots returned (``final``)."""
        return state


@dataclass(frozen=True, kw_only=True)
class FedAvg(LocalAlgorithm):
    """FedAvg's local work: ``N`` SGD steps of batch ``B`` on the local loss."""

    name: ClassVar[str] = "fedavg"


@dataclass(frozen=True, kw_only=True)
class FedProx(LocalAlgorithm):
    """FedProx: local loss plus ``mu/2 ||theta_i - theta||^2``."""

    name: ClassVar[str] = "fedprox"
    mu: float = ALGORITHM_TABLES["fedprox"].defaults["mu"]

    def __post_init__(self) -> None:
        ALGORITHM_TABLES[self.name].validate({"mu": self.mu})

    @property
    def proximal_mu(self) -> float:
        return float(self.mu)


@dataclass(frozen=True, kw_only=True)
class MiniBatchSGD(LocalAlgorithm):
    """Mini-batch SGD (paper 001, Alg. 3): one stochastic gradient per selected client and round."""

    name: ClassVar[str] = "minibatch-sgd"

    def num_local_steps(self, configured: int) -> int:
        return 1


class ScaffoldState(NamedTuple):
    """SCAFFOLD's control variates: ``server`` ``c`` with shapes ``(R, ...)``, ``clients`` ``c_i`` with
    shapes ``(R, n, ...)``, and the weights ``q_i`` of the server variate ``c = sum_i q_i c_i``."""

    server: Params
    clients: Params
    client_weights: torch.Tensor


@dataclass(frozen=True, kw_only=True)
class Scaffold(LocalAlgorithm):
    """SCAFFOLD (Karimireddy et al. 2020, Alg. 1) with option II control variates.

    Local step: ``theta_i <- theta_i - eta_l (grad L_batch(theta_i) + c - c_i)``. After the round, each
    client ``i`` of ``S_t`` that ran ``N`` steps at ``eta_l`` sets (Alg. 1 line 12, option II)
    ``c_i+ = c_i - c + (theta - theta_i) / (N eta_l)``, and the server moves its variate by the
    change: ``c <- c + sum_{i in S_t} q_i (c_i+ - c_i)``.

    ``q_i`` is the importance ``p_i`` when the loop passes it to :meth:`init_state` and ``1 / n``
    otherwise; the paper's ``1 / N`` is the case of equal importances. Either way ``c`` stays equal to
    ``sum_i q_i c_i`` over *all* clients (the variates of clients not drawn keep their last value),
    which is what puts SCAFFOLD's fixed point at the minimiser of ``sum_i q_i L_i``. Weighting by
    ``1 / |S_t|`` or by the aggregation weights ``w_i(S_t)`` would break that invariant, so ``c``
    ignores the sampler: the model update is the loop's ``sum_i w_i (theta_i - theta)`` for any
    sampler, and the sampler's weights change only the noise of the rounds, not where they lead.
    With ``p_i = n_i / M`` but ``q_i = 1 / n`` (unequal sizes), SCAFFOLD would converge to the
    minimiser of the unweighted mean ``(1 / n) sum_i L_i`` instead.

    The variates start at zero and are stored per run as float32 tensors ``(R, n, ...)``: ``R n d``
    numbers in all. :meth:`after_round` writes the new ``c_i`` of the slots into that tensor in
    place (a copy would cost ``O(R n d)`` per round), so the state passed in must not be reused.
    """

    name: ClassVar[str] = "scaffold"

    def init_state(
        self, num_runs: int, num_clients: int, template: Params, *, importances: FloatArray | None = None
    ) -> ScaffoldState:
        device = next(iter(template.values())).device
        if importances is None:
            weights = torch.full((num_clients,), 1.0 / num_clients, dtype=torch.float32, device=device)
        else:
            weights = torch.as_tensor(np.array(importances), dtype=torch.float32, device=device)
            if weights.shape != (num_clients,):
                raise invalid("importances", "Scaffold.init_state", f"of shape ({num_clients},)", tuple(weights.shape))
        return ScaffoldState(
            server={n: v.new_zeros(v.shape) for n, v in template.items()},
            clients={n: v.new_zeros((num_runs, num_clients, *v.shape[1:])) for n, v in template.items()},
            client_weights=weights,
        )

    def corrections(self, state: ScaffoldState, run_of_slot: IntArray, clients: IntArray) -> Params:
        """``c - c_i`` for each slot (the run's server variate minus the client's own)."""
        runs, ids = self._indices(state, run_of_slot, clients)
        return {n: c.index_select(0, runs) - state.clients[n][runs, ids] for n, c in state.server.items()}

    def after_round(self, state: ScaffoldState, final: ClientFinal) -> ScaffoldState:
        run_of_slot, updates, steps, local_lr = final.run_of_slot, final.updates, final.steps, final.local_lr
        runs, ids = self._indices(state, run_of_slot, final.clients)
        num_runs = next(iter(state.server.values())).shape[0]
        q = state.client_weights.index_select(0, ids)
        server = {}
        for n, c in state.server.items():
            old = state.clients[n][runs, ids]
            # Option II: c_i+ = c_i - c + (theta - theta_i) / (N eta_l), with theta_i - theta the update.
            new = old - c.index_select(0, runs) - updates[n] / (steps * local_lr)
            change = (new - old) * q.view(-1, *[1] * (new.dim() - 1))
            server[n] = c + segment_sum(change, run_of_slot, num_runs)
            state.clients[n].index_put_((runs, ids), new)
        return ScaffoldState(server=server, clients=state.clients, client_weights=state.client_weights)

    @staticmethod
    def _indices(state: ScaffoldState, run_of_slot: IntArray, clients: IntArray) -> tuple[torch.Tensor, torch.Tensor]:
        device = state.client_weights.device
        runs = torch.as_tensor(np.asarray(run_of_slot), dtype=torch.long, device=device)
        ids = torch.as_tensor(np.asarray(clients), dtype=torch.long, device=device)
        return runs, ids


ALGORITHMS: dict[str, type[LocalAlgorithm]] = {cls.name: cls for cls in (FedAvg, FedProx, MiniBatchSGD, Scaffold)}


def make_algorithm(name: str, **params: Any) -> LocalAlgorithm:
    """Build a local algorithm from its name (``fedavg``, ``fedprox``, ``minibatch-sgd``, ``scaffold``)."""
    if name not in ALGORITHMS:
        raise invalid("algorithm", "make_algorithm", Options(tuple(ALGORITHMS)), name)
    try:
        return ALGORITHMS[name](**params)
    except TypeError as exc:
        raise invalid("algorithm", "make_algorithm", f"given only the parameters of {name}", params) from exc


def segment_sum(values: torch.Tensor, segments: IntArray, num_segments: int) -> torch.Tensor:
    """Sum the rows of ``values`` that share a segment id (used to aggregate slots per run)."""
    index = torch.as_tensor(np.asarray(segments), device=values.device, dtype=torch.long)
    out = torch.zeros((num_segments, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)
