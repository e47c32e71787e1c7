"""Local-training backends: all selected clients at once, or one after another.

Both backends take the same inputs (each slot's starting parameters, the pooled data on the
device, the :class:`~fedsample.engine.batching.BatchPlan`, and the local algorithm's
:class:`~fedsample.engine.algorithms.ClientStep`) and return the same :class:`LocalResult`, so the
round loop does not know which one runs, and neither backend knows which algorithm it runs.

* :class:`BatchedBackend` trains every slot of the round together: one stacked forward and
  backward pass per local step (``bmm`` kernels for dense models, ``torch.func.vmap`` otherwise).
* :class:`SequentialBackend` is the plain reference: one client after another, an ordinary
  ``nn.Module`` and ``torch.optim.SGD`` loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch.func import functional_call, vmap

from fedsample.engine.algorithms import ClientStep
from fedsample.engine.batching import BatchPlan
from fedsample.engine.kernels import dense_forward, dense_sgd_step, make_kernel, per_sample_loss
from fedsample.engine.models import ModelSpec, Params

__all__ = [
    "Backend",
    "BatchedBackend",
    "LocalResult",
    "LocalTask",
    "SequentialBackend",
    "flat_norms",
    "padded_widths",
    "size_buckets",
]


@dataclass(frozen=True)
class LocalResult:
    """What local training returns for ``k`` slots.

    ``updates``: ``theta_i - theta`` per slot (stacked); ``first_loss``: the loss of the starting
    model on each slot's first batch; ``gradient_norms``: the norm of the first step's mean
    mini-batch gradient of the task loss (the stochastic gradient at ``theta``); ``loss_means`` and
    ``loss_squares``: the mean of the per-sample task losses and of their squares over every sample
    the slot saw in the round, each at the model of the step that read it (``None``: not measured).
    """

    updates: Params
    first_loss: torch.Tensor
    gradient_norms: torch.Tensor
    loss_means: torch.Tensor | None = None
    loss_squares: torch.Tensor | None = None

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
        )


# Plain SGD on the task loss (FedAvg's step), the default of both backends.
PLAIN = ClientStep()


@dataclass(frozen=True)
class LocalTask:
    """What one backend call trains, besides the slots' starting parameters: the pooled data on the
    device, the batch plan, ``steps`` local steps at ``local_lr``, the local algorithm's client step,
    and whether every sample's loss is measured (``LocalResult.loss_means`` / ``loss_squares``)."""

    features: torch.Tensor
    targets: torch.Tensor
    plan: BatchPlan
    steps: int
    local_lr: float
    step: ClientStep
    measure_losses: bool


class Backend(ABC):
    """Local training of a round's slots; subclasses implement :meth:`run`."""

    name: str

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
    ) -> LocalResult:
        """Train every slot of ``plan`` from its row of ``start`` (stacked) and return the slots' results."""
        return self.run(start, LocalTask(features, targets, plan, steps, local_lr, step, measure_losses))

    @abstractmethod
    def run(self, start: Params, task: LocalTask) -> LocalResult:
        """:meth:`train` with its inputs in one :class:`LocalTask`."""


def flat_norms(tensors: Params) -> torch.Tensor:
    """Per-slot Euclidean norm over all stacked tensors."""
    total = sum(t.reshape(t.shape[0], -1).pow(2).sum(1) for t in tensors.values())
    return torch.sqrt(total)  # type: ignore[arg-type]


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
    widths = padded_widths(counts, batch_size)
    return [np.flatnonzero(widths == width) for width in np.unique(widths)]


@dataclass
class BatchedBackend(Backend):
    """Trains all slots of a round as one batched computation per local step."""

    spec: ModelSpec
    name: str = "batched"

    def __post_init__(self) -> None:
        self._kernel = make_kernel(self.spec)
        self._num_layers = len(self.spec.dense_widths) - 1 if self.spec.is_dense else 0
        module, task = self.spec.build(), self.spec.task

        def slot_losses(params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return per_sample_loss(functional_call(module, params, (x,)), y, task)

        self._per_sample = vmap(slot_losses)

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        plan = task.plan
        nominal = plan.batch_size if plan.batch_size is not None else plan.rows.shape[2]
        widths = padded_widths(plan.counts, nominal)
        buckets = size_buckets(plan.counts, nominal)
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
            part = self._train(sub_start, replace(task, plan=sub_plan, step=task.step.select(index)))
            parts.append((index, part))
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
        )

    def _train(self, start: Params, task: LocalTask) -> LocalResult:
        features, targets, plan, steps, step = task.features, task.targets, task.plan, task.steps, task.step
        local_lr, measure_losses = task.local_lr, task.measure_losses
        device = features.device
        rows = torch.as_tensor(plan.rows, device=device)
        counts = torch.as_tensor(plan.counts, device=device, dtype=features.dtype)
        mask = torch.as_tensor(plan.mask, device=device)
        params = {n: v.clone() for n, v in start.items()}
        first_loss = torch.zeros(0)
        grad_norms = torch.zeros(0)
        k, batch = rows.shape[1], rows.shape[2]
        sample_shape = features.shape[1:]
        fused = self.spec.is_dense and step.is_plain
        scale = mask / counts.unsqueeze(1)
        loss_sum = features.new_zeros(k)
        square_sum = features.new_zeros(k)
        for s in range(steps):
            # index_select on flat rows is several times faster than advanced indexing here.
            flat = rows[s].reshape(-1)
            x = features.index_select(0, flat).view(k, batch, *sample_shape)
            y = targets.index_select(0, flat).view(k, batch)
            # The samples' losses at the model this step reads (Feedback.loss_squares): one more
            # forward pass, made only when a run's sampler reads them.
            if measure_losses:
                with torch.no_grad():
                    seen = self._sample_losses(params, x, y) * mask
                    loss_sum += seen.sum(1)
                    square_sum += (seen * seen).sum(1)
            if fused and s > 0:
                dense_sgd_step(params, x, y, scale, lr=local_lr, num_layers=self._num_layers, task=self.spec.task)
                continue
            loss, grads = self._kernel(params, x, y, mask, counts)
            if s == 0:
                first_loss, grad_norms = loss.detach(), flat_norms(grads)
            for n, p in params.items():
                p.sub_(step.direction(n, grads[n], p, start[n]), alpha=local_lr)
        seen_count = counts * steps
        return LocalResult(
            updates={n: params[n] - start[n] for n in params},
            first_loss=first_loss,
            gradient_norms=grad_norms,
            loss_means=loss_sum / seen_count if measure_losses else None,
            loss_squares=square_sum / seen_count if measure_losses else None,
        )

    def _sample_losses(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample task losses ``(k, B)`` of the ``k`` stacked models on ``x (k, B, ...)``."""
        k, batch = y.shape
        if self.spec.is_dense:
            out = dense_forward(params, x, self._num_layers)[2].reshape(k * batch, -1)
            if self.spec.task == "regression":
                out = out.squeeze(-1)
            return per_sample_loss(out, y.reshape(-1), self.spec.task).view(k, batch)
        return self._per_sample(params, x, y)


@dataclass
class SequentialBackend(Backend):
    """The reference: each slot trained alone with ``torch.optim.SGD`` on an ``nn.Module``."""

    spec: ModelSpec
    name: str = "sequential"

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        features, targets, plan, steps, step = task.features, task.targets, task.plan, task.steps, task.step
        local_lr, measure_losses = task.local_lr, task.measure_losses
        k = plan.counts.size
        updates: dict[str, list[torch.Tensor]] = {n: [] for n in start}
        first_loss = torch.zeros(k)
        grad_norms = torch.zeros(k)
        loss_means = torch.zeros(k, dtype=torch.float64)
        loss_squares = torch.zeros(k, dtype=torch.float64)
        device = features.device
        for j in range(k):
            module = self.spec.build().to(device)
            anchor = {n: v[j] for n, v in start.items()}
            slot_step = step.of_slot(j)
            with torch.no_grad():
                for n, p in module.named_parameters():
                    p.copy_(anchor[n])
            optimizer = torch.optim.SGD(module.parameters(), lr=local_lr)
            count = int(plan.counts[j])
            for s in range(steps):
                rows = torch.as_tensor(np.ascontiguousarray(plan.rows[s, j, :count]), device=device)
                optimizer.zero_grad()
                sample_losses = per_sample_loss(module(features[rows]), targets[rows], self.spec.task)
                loss = sample_losses.mean()
                seen = sample_losses.detach().double()
                loss_means[j] += seen.sum() / (count * steps)
                loss_squares[j] += seen.pow(2).sum() / (count * steps)
                # The algorithm's local objective, differentiated by autograd: the reference for the
                # batched backend's explicit ClientStep.direction.
                slot_step.objective(loss, module.named_parameters(), anchor).backward()  # type: ignore[no-untyped-call]
                if s == 0:  # theta_i = theta here, so the proximal term adds no gradient
                    first_loss[j] = loss.detach()
                    grads = [p.grad for p in module.parameters() if p.grad is not None]
                    grad_norms[j] = torch.sqrt(sum(g.pow(2).sum() for g in grads))  # type: ignore[arg-type]
                for n, p in module.named_parameters():
                    p.grad = slot_step.corrected(n, p.grad)  # type: ignore[arg-type]
                optimizer.step()
            for n, p in module.named_parameters():
                updates[n].append(p.detach() - anchor[n])
        return LocalResult(
            updates={n: torch.stack(v) for n, v in updates.items()},
            first_loss=first_loss.to(device),
            gradient_norms=grad_norms.to(device),
            loss_means=loss_means.to(device=device, dtype=features.dtype) if measure_losses else None,
            loss_squares=loss_squares.to(device=device, dtype=features.dtype) if measure_losses else None,
        )
