"""The stacked trainers' common part: every slot of a round trained together, one stacked step at a time.

:class:`StackedTrainer` groups the slots by padded batch width (:func:`padded_widths`), runs the local
steps of each group as one stacked computation and puts the slots back in order; a subclass supplies one
step's gradients (:class:`~fedsample.engine.trainers.fused.FusedTrainer`,
:class:`~fedsample.engine.trainers.vmap.VmapTrainer`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from fedsample.engine.batching import BatchPlan
from fedsample.engine.paper_models import Params
from fedsample.engine.trainers.base import LocalResult, LocalTask, Trainer, flat_norms

__all__ = ["StackedStep", "StackedTrainer", "padded_widths", "size_buckets", "width_groups"]


class StackedStep(NamedTuple):
    """Local step ``s`` of a stacked call: the slots' ``params`` and ``buffers`` (updated in place), the
    stacked batches ``x`` and ``y`` (``(k, B, ...)``), their weights (``mask``: 1 for a real row; ``counts``:
    the real rows per slot; ``scale``: ``mask / counts``, each row's weight in its slot's mean), and the task."""

    s: int
    params: Params
    buffers: Params
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    counts: torch.Tensor
    scale: torch.Tensor
    task: LocalTask


def padded_widths(counts: np.ndarray, batch_size: int) -> np.ndarray:
    """The batch width each slot is padded to, from its own count ``c`` alone: the power of two
    ``2^ceil(log2 c)``, capped at ``B`` when ``c <= B`` (a full batch is never padded).

    Depending on nothing but the slot keeps a run's arithmetic the same whichever runs share its
    round (a kernel summing over a wider padded batch rounds differently), and wastes at most half
    of a slot's rows on padding.
    """
    counts = np.maximum(np.asarray(counts, dtype=np.int64), 1)
    powers = np.left_shift(1, np.ceil(np.log2(counts)).astype(np.int64))
    out: np.ndarray = np.where(counts <= batch_size, np.minimum(powers, batch_size), powers)
    return out


def size_buckets(counts: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Slots grouped by :func:`padded_widths` (narrowest first): each group is one batched call."""
    return width_groups(padded_widths(counts, batch_size))


def width_groups(widths: np.ndarray) -> list[np.ndarray]:
    """The slots of each width (narrowest first)."""
    return [np.flatnonzero(widths == width) for width in np.unique(widths)]


class StackedTrainer(Trainer):
    """Trains all slots of a round as one stacked computation per local step.

    A model whose forward pass mixes the samples of a batch (``BoundModel.batch_dependent``:
    BatchNorm) is never padded: its slots are grouped by their exact batch count instead, so that
    padding rows never enter the batch statistics.
    """

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        plan = task.plan
        nominal = plan.batch_size if plan.batch_size is not None else plan.rows.shape[2]
        counts = np.maximum(np.asarray(plan.counts, dtype=np.int64), 1)
        widths = counts if self.model.batch_dependent else padded_widths(counts, nominal)
        buckets = width_groups(widths)
        if len(buckets) == 1 and int(widths[0]) == plan.rows.shape[2]:
            return self._train(start, task)
        # Train each group of equal padded width on its own (FedSampling's kept counts differ
        # widely), so padding stays under half of the rows, and put the slots back in order.
        parts: list[tuple[torch.Tensor, LocalResult]] = []
        for slots in buckets:
            width = int(widths[slots[0]])
            rows = plan.rows[:, slots, :width]
            if rows.shape[2] < width:  # pad with the slot's first row, at zero weight
                rows = np.concatenate([rows, np.repeat(rows[:, :, :1], width - rows.shape[2], axis=2)], axis=2)
            index = torch.as_tensor(slots, device=task.features.device)
            sub_plan = BatchPlan(rows=rows, counts=plan.counts[slots])
            sub_start = {n: v.index_select(0, index) for n, v in start.items()}
            parts.append((index, self._train(sub_start, task.select(index, sub_plan))))
        k = plan.counts.size

        def gather(pick: Callable[[LocalResult], torch.Tensor]) -> torch.Tensor:
            first = pick(parts[0][1])
            out = first.new_empty((k, *first.shape[1:]))
            for index, part in parts:
                out.index_copy_(0, index, pick(part))
            return out

        return LocalResult(
            updates={n: gather(lambda r, n=n: r.updates[n]) for n in start},  # type: ignore[misc]
            first_loss=gather(lambda r: r.first_loss),
            gradient_norms=gather(lambda r: r.gradient_norms),
            loss_means=gather(lambda r: r.loss_means) if task.measure_losses else None,  # type: ignore[arg-type,return-value]
            loss_squares=gather(lambda r: r.loss_squares) if task.measure_losses else None,  # type: ignore[arg-type,return-value]
            buffers={n: gather(lambda r, n=n: r.buffers[n]) for n in task.buffers},  # type: ignore[misc]
        )

    def _train(self, start: Params, task: LocalTask) -> LocalResult:
        features, targets, plan, steps, step = task.features, task.targets, task.plan, task.steps, task.step
        local_lr, measure_losses = task.local_lr, task.measure_losses
        device = features.device
        rows = torch.as_tensor(plan.rows, device=device)
        counts = torch.as_tensor(plan.counts, device=device, dtype=torch.float32)
        mask = torch.as_tensor(plan.mask, device=device)
        params = {n: v.clone() for n, v in start.items()}
        buffers = {n: v.clone() for n, v in task.buffers.items()}
        first_loss = torch.zeros(0)
        grad_norms = torch.zeros(0)
        k, batch = rows.shape[1], rows.shape[2]
        sample_shape = features.shape[1:]
        scale = mask / counts.unsqueeze(1)
        loss_sum = torch.zeros(k, device=device)
        square_sum = torch.zeros(k, device=device)
        for s in range(steps):
            # index_select on flat rows is several times faster than advanced indexing here.
            flat = rows[s].reshape(-1)
            x = features.index_select(0, flat).view(k, batch, *sample_shape)
            y = targets.index_select(0, flat).view(k, batch)
            loss, grads, seen = self.gradients(StackedStep(s, params, buffers, x, y, mask, counts, scale, task))
            loss_sum, square_sum = _add_seen(loss_sum, square_sum, seen)
            if grads is None:  # the step was taken in place
                continue
            if s == 0:
                assert loss is not None
                first_loss, grad_norms = loss.detach(), flat_norms(grads)
            for n, g in grads.items():  # the trainable parameters (a frozen one keeps its value)
                p = params[n]
                p.sub_(step.direction(n, g, p, start[n]), alpha=local_lr)
        seen_count = counts * steps
        return LocalResult(
            updates={n: params[n] - start[n] for n in params},
            first_loss=first_loss,
            gradient_norms=grad_norms,
            loss_means=loss_sum / seen_count if measure_losses else None,
            loss_squares=square_sum / seen_count if measure_losses else None,
            buffers=buffers,
        )

    @abstractmethod
    def gradients(self, step: StackedStep) -> tuple[torch.Tensor | None, Params | None, torch.Tensor | None]:
        """One local step: the mean loss per slot, the gradients of the trainable parameters (``None`` when the
        step was taken in place on ``step.params``), and each sample's loss at the model the step reads,
        masked (``None`` unless ``step.task.measure_losses``)."""


def _add_seen(
    loss_sum: torch.Tensor, square_sum: torch.Tensor, seen: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The running sums of the measured sample losses and of their squares, plus a step's ``seen`` (k, B)."""
    if seen is None:
        return loss_sum, square_sum
    return loss_sum + seen.sum(1), square_sum + (seen * seen).sum(1)
