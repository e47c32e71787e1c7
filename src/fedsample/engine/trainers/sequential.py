"""The sequential trainer: the plain reference, one slot after another on an ``nn.Module``.

:func:`train_slot` trains one slot with ``torch.optim.SGD`` and autograd on the local algorithm's
objective; the sequential trainer runs it slot by slot (any module, also one ``torch.func`` cannot batch),
the thread trainer on its worker threads.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedsample.engine.dropout import dropout_keys
from fedsample.engine.losses import PerSampleFn
from fedsample.engine.model_binding import BoundModel
from fedsample.engine.paper_models import Params
from fedsample.engine.trainers.base import LocalResult, LocalTask, SlotResult, Trainer, as_bound, stack_slots

__all__ = ["SequentialTrainer", "train_slot"]


@dataclass
class SequentialTrainer(Trainer):
    """The reference: each slot trained alone with ``torch.optim.SGD`` on an ``nn.Module``.

    It runs any module. Each slot's random operations are its own: its dropout is keyed as on the
    batched trainers, and any other random draw comes from the global generator seeded by the slot's
    key inside ``torch.random.fork_rng``, so the caller's random state is left as it was.
    """

    model: BoundModel
    name: str = "sequential"

    def __post_init__(self) -> None:
        self.model = as_bound(self.model)

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        module = copy.deepcopy(self.model.train_module).to(task.features.device)
        slots = [train_slot(module, j, start, task, self.model.loss, seeded=True) for j in range(task.plan.counts.size)]
        return stack_slots(slots, start, task)


def train_slot(
    module: nn.Module, j: int, start: Params, task: LocalTask, loss_of: PerSampleFn, *, seeded: bool
) -> SlotResult:
    """Slot ``j`` of ``task`` trained on ``module`` (its parameters and buffers overwritten first) with
    ``torch.optim.SGD`` and autograd on the local algorithm's objective.

    ``seeded``: the slot's random draws other than its keyed dropout come from the global generator,
    seeded by its key inside ``torch.random.fork_rng`` (the sequential trainer); otherwise the module
    must draw nothing from it (the thread trainer's threads share it).
    """
    features, targets, plan, steps = task.features, task.targets, task.plan, task.steps
    device = features.device
    anchor = {n: v[j] for n, v in start.items()}
    slot_step = task.step.of_slot(j)
    key = task.keys[j]
    with torch.no_grad():
        for n, p in module.named_parameters():
            p.copy_(anchor[n])
        for n, b in module.named_buffers():
            b.copy_(task.buffers[n][j])
    optimizer = torch.optim.SGD(module.parameters(), lr=task.local_lr)
    count = int(plan.counts[j])
    first_loss = torch.zeros((), device=device)
    grad_norm = torch.zeros((), device=device)
    loss_mean = torch.zeros((), dtype=torch.float64, device=device)
    loss_square = torch.zeros((), dtype=torch.float64, device=device)
    channels_last = _channels_last(module, features)
    # Every step's rows at once (one transfer), and the per-step work kept to what the step needs:
    # the sample losses are summed only when a sampler reads them, the corrections added only when
    # the algorithm has some (the same arithmetic as adding them on every step, less overhead).
    slot_rows = torch.as_tensor(np.ascontiguousarray(plan.rows[:steps, j, :count]), device=device)
    corrected = slot_step.corrections is not None
    with contextlib.ExitStack() as stack:
        if seeded:
            stack.enter_context(torch.random.fork_rng(devices=[device] if device.type == "cuda" else []))
            torch.default_generator.manual_seed(int(key))
            if device.type == "cuda":
                torch.cuda.manual_seed(int(key))
        for s in range(steps):
            rows = slot_rows[s]
            optimizer.zero_grad()
            x = features.index_select(0, rows)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with dropout_keys(key, s):
                output = module(x)
            sample_losses = loss_of(output, targets.index_select(0, rows))
            loss = sample_losses.mean()
            if task.measure_losses:
                seen = sample_losses.detach().double()
                loss_mean += seen.sum() / (count * steps)
                loss_square += seen.pow(2).sum() / (count * steps)
            # The algorithm's local objective, differentiated by autograd: the reference for the
            # stacked trainers' explicit ClientStep.direction.
            slot_step.objective(loss, module.named_parameters(), anchor).backward()  # type: ignore[no-untyped-call]
            if s == 0:  # theta_i = theta here, so the proximal term adds no gradient
                first_loss = loss.detach()
                grads = [p.grad for p in module.parameters() if p.grad is not None]
                grad_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))  # type: ignore[arg-type]
            if corrected:
                for n, p in module.named_parameters():
                    if p.grad is not None:  # a frozen parameter has none, and keeps its value
                        p.grad = slot_step.corrected(n, p.grad)
            optimizer.step()
    return SlotResult(
        update={n: p.detach() - anchor[n] for n, p in module.named_parameters()},
        buffers={n: b.detach().clone() for n, b in module.named_buffers()},
        first_loss=first_loss,
        gradient_norm=grad_norm,
        loss_mean=loss_mean,
        loss_square=loss_square,
    )


def _channels_last(module: nn.Module, features: torch.Tensor) -> bool:
    """Whether the module's copy runs in channels-last layout (set by ``ThreadTrainer._module_copies``)."""
    weight = next((m.weight for m in module.modules() if isinstance(m, nn.Conv2d)), None)
    return (
        weight is not None
        and features.dim() == 4
        and weight.is_contiguous(memory_format=torch.channels_last)
        and not weight.is_contiguous()
    )
