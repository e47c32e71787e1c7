"""What every trainer shares: the task of one call, the result, the trainer's interface, the slot results.

A trainer trains a round's slots (each selected client of each run) from their starting parameters on
the pooled data, under a :class:`~fedsample.engine.batching.BatchPlan` and the local algorithm's
:class:`~fedsample.engine.algorithms.ClientStep`, and returns one :class:`LocalResult`; the round loop
does not know which trainer runs, and no trainer knows which algorithm it runs. There is one trainer per
execution path, chosen once per run (:func:`fedsample.engine.trainers.choose_trainer`):

* :class:`~fedsample.engine.trainers.fused.FusedTrainer`: dense ReLU networks, ``bmm`` kernels;
* :class:`~fedsample.engine.trainers.vmap.VmapTrainer`: any other module, ``torch.func.vmap`` over its
  parameters, its buffers and its keyed dropout;
* :class:`~fedsample.engine.trainers.threads.ThreadTrainer`: on a CPU, convolutional and recurrent
  modules, the slots spread over PyTorch's threads, one thread and one module copy each;
* :class:`~fedsample.engine.trainers.sequential.SequentialTrainer`: the plain reference, one client after
  another, an ordinary ``nn.Module`` and ``torch.optim.SGD`` loop; it runs any module.

Each returns every slot's final buffers (BatchNorm's running statistics after its local steps) beside its
update, and keys each slot's dropout by its own key (:mod:`fedsample.engine.dropout`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from fedsample.engine.algorithms import ClientStep
from fedsample.engine.batching import BatchPlan
from fedsample.engine.model_binding import BoundModel, bind_model
from fedsample.engine.paper_models import ModelSpec, Params

__all__ = [
    "PLAIN",
    "LocalResult",
    "LocalTask",
    "SlotResult",
    "Trainer",
    "as_bound",
    "flat_norms",
    "stack_slots",
]


@dataclass(frozen=True)
class LocalResult:
    """What local training returns for ``k`` slots.

    ``updates``: ``theta_i - theta`` per slot (stacked); ``first_loss``: the loss of the starting
    model on each slot's first batch; ``gradient_norms``: the norm of the first step's mean
    mini-batch gradient of the task loss (the stochastic gradient at ``theta``); ``loss_means`` and
    ``loss_squares``: the mean of the per-sample task losses and of their squares over every sample
    the slot saw in the round, each at the model of the step that read it (``None``: not measured);
    ``buffers``: each slot's buffers after its local steps (empty for a model without buffers).
    """

    updates: Params
    first_loss: torch.Tensor
    gradient_norms: torch.Tensor
    loss_means: torch.Tensor | None = None
    loss_squares: torch.Tensor | None = None
    buffers: Params = field(default_factory=dict)

    def select(self, index: torch.Tensor) -> LocalResult:
        """The result of the slots ``index`` (in that order)."""

        def pick(v: torch.Tensor | None) -> torch.Tensor | None:
            return None if v is None else v.index_select(0, index)

        return LocalResult(
            updates={n: u.index_select(0, index) for n, u in self.updates.items()},
            first_loss=self.first_loss.index_select(0, index),
            gradient_norms=self.gradient_norms.index_select(0, index),
            loss_means=pick(self.loss_means),
            loss_squares=pick(self.loss_squares),
            buffers={n: b.index_select(0, index) for n, b in self.buffers.items()},
        )


# Plain SGD on the task loss (FedAvg's step), the default of every trainer.
PLAIN = ClientStep()


@dataclass(frozen=True)
class LocalTask:
    """What one trainer call trains, besides the slots' starting parameters: the pooled data on the
    device, the batch plan, ``steps`` local steps at ``local_lr``, the local algorithm's client step,
    whether every sample's loss is measured (``LocalResult.loss_means`` / ``loss_squares``), the
    slots' starting buffers (stacked) and their 31-bit random keys (``(k,)`` int64; dropout masks,
    and the sequential trainer's seed for any other random operation)."""

    features: torch.Tensor
    targets: torch.Tensor
    plan: BatchPlan
    steps: int
    local_lr: float
    step: ClientStep
    measure_losses: bool
    buffers: Params
    keys: torch.Tensor

    def select(self, index: torch.Tensor, plan: BatchPlan) -> LocalTask:
        """The task of the slots ``index`` (in that order) under their own ``plan``."""
        return replace(
            self,
            plan=plan,
            step=self.step.select(index),
            buffers={n: b.index_select(0, index) for n, b in self.buffers.items()},
            keys=self.keys.index_select(0, index),
        )


def as_bound(model: BoundModel | ModelSpec) -> BoundModel:
    """A trainer's model: a :class:`BoundModel`, or a ModelSpec bound to its own task (no data check)."""
    if isinstance(model, BoundModel):
        return model
    return bind_model(model, task=model.task, owner="Backend")


class Trainer(ABC):
    """Local training of a round's slots on one execution path; subclasses implement :meth:`run`."""

    name: str
    model: BoundModel

    def train(
        self,
        start: Params,
        *,
        features: torch.Tensor,
        targets: torch.Tensor,
        plan: BatchPlan,
        steps: int,
        local_lr: float,
        step: ClientStep = PLAIN,
        measure_losses: bool = False,
        buffers: Params | None = None,
        keys: torch.Tensor | None = None,
    ) -> LocalResult:
        """Train every slot of ``plan`` from its row of ``start`` (stacked) and return the slots' results.

        ``buffers`` (stacked, default: the model's own buffers for every slot) and ``keys`` (default:
        0 for every slot) are the slots' starting buffers and random keys.
        """
        k = plan.counts.size
        device = features.device
        if buffers is None:
            own = dict(self.model.train_module.named_buffers())
            buffers = {n: own[n].detach().to(device).unsqueeze(0).repeat(k, *[1] * own[n].dim()) for n in own}
        if keys is None:
            keys = torch.zeros(k, dtype=torch.int64, device=device)
        task = LocalTask(features, targets, plan, steps, local_lr, step, measure_losses, buffers, keys)
        return self.run(start, task)

    @abstractmethod
    def run(self, start: Params, task: LocalTask) -> LocalResult:
        """:meth:`train` with its inputs in one :class:`LocalTask`."""


def flat_norms(tensors: Params) -> torch.Tensor:
    """Per-slot Euclidean norm over all stacked tensors."""
    total = sum(t.reshape(t.shape[0], -1).pow(2).sum(1) for t in tensors.values())
    return torch.sqrt(total)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SlotResult:
    """One slot's local training: its update and final buffers, the first batch's loss and gradient
    norm, and the mean of its sample losses and of their squares over the round."""

    update: Params
    buffers: Params
    first_loss: torch.Tensor
    gradient_norm: torch.Tensor
    loss_mean: torch.Tensor
    loss_square: torch.Tensor


def stack_slots(slots: list[SlotResult], start: Params, task: LocalTask) -> LocalResult:
    """The slots' results as one :class:`LocalResult` (stacked in slot order, on the data's device)."""
    # Losses are float32 whatever the inputs (integer tokens included).
    device, dtype = task.features.device, torch.float32
    measured = task.measure_losses

    def column(pick: Callable[[SlotResult], torch.Tensor]) -> torch.Tensor:
        return torch.stack([pick(slot).cpu() for slot in slots]) if slots else torch.zeros(0)

    return LocalResult(
        updates={n: torch.stack([slot.update[n].contiguous() for slot in slots]) for n in start},
        first_loss=column(lambda r: r.first_loss).to(device),
        gradient_norms=column(lambda r: r.gradient_norm).to(device),
        loss_means=column(lambda r: r.loss_mean).to(device=device, dtype=dtype) if measured else None,
        loss_squares=column(lambda r: r.loss_square).to(device=device, dtype=dtype) if measured else None,
        buffers={n: torch.stack([slot.buffers[n] for slot in slots]) for n in task.buffers},
    )
