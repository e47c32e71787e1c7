"""Local-training backends: all selected clients at once, or one after another.

Both backends take the same inputs (each slot's starting parameters, the pooled data on the
device, the :class:`~fedsample.engine.batching.BatchPlan`, and the local algorithm's
:class:`~fedsample.engine.algorithms.ClientStep`) and return the same :class:`LocalResult`, so the
round loop does not know which one runs, and neither backend knows which algorithm it runs.

* :class:`BatchedBackend` trains every slot of the round together: one stacked forward and
  backward pass per local step (``bmm`` kernels for dense ReLU networks, ``torch.func.vmap``
  over any other module, its buffers and its keyed dropout), or, on a CPU, for convolutional and
  recurrent modules, the slots spread over PyTorch's threads, one thread and one module copy each.
* :class:`SequentialBackend` is the plain reference: one client after another, an ordinary
  ``nn.Module`` and ``torch.optim.SGD`` loop; it runs any module, also one ``torch.func`` cannot
  batch.

Both return each slot's final buffers (BatchNorm's running statistics after its local steps) beside
its update, and key each slot's dropout by its own key (:mod:`fedsample.engine.dropout`).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from fedsample.engine.algorithms import ClientStep
from fedsample.engine.batching import BatchPlan
from fedsample.engine.dropout import dropout_keys
from fedsample.engine.losses import PerSampleFn
from fedsample.engine.paper_models import ModelSpec, Params
from fedsample.engine.tensors import as_features, as_targets
from fedsample.engine.trainers.kernels import (
    dense_loss_and_grads,
    dense_sample_losses,
    dense_sgd_step,
    functional_kernel,
)
from fedsample.engine.user_model import BoundModel, bind_model
from fedsample.errors import one_line

__all__ = [
    "Backend",
    "BatchedBackend",
    "LocalResult",
    "LocalTask",
    "SequentialBackend",
    "batching_problem",
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


# Plain SGD on the task loss (FedAvg's step), the default of both backends.
PLAIN = ClientStep()


@dataclass(frozen=True)
class LocalTask:
    """What one backend call trains, besides the slots' starting parameters: the pooled data on the
    device, the batch plan, ``steps`` local steps at ``local_lr``, the local algorithm's client step,
    whether every sample's loss is measured (``LocalResult.loss_means`` / ``loss_squares``), the
    slots' starting buffers (stacked) and their 31-bit random keys (``(k,)`` int64; dropout masks,
    and the sequential backend's seed for any other random operation)."""

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


def _as_bound(model: BoundModel | ModelSpec) -> BoundModel:
    """A backend's model: a :class:`BoundModel`, or a ModelSpec bound to its own task (no data check)."""
    if isinstance(model, BoundModel):
        return model
    return bind_model(model, task=model.task, owner="Backend")


class Backend(ABC):
    """Local training of a round's slots; subclasses implement :meth:`run`."""

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
    return _groups(padded_widths(counts, batch_size))


def _groups(widths: np.ndarray) -> list[np.ndarray]:
    return [np.flatnonzero(widths == width) for width in np.unique(widths)]


@dataclass
class BatchedBackend(Backend):
    """Trains all slots of a round as one batched computation per local step.

    A model whose forward pass mixes the samples of a batch (``BoundModel.batch_dependent``:
    BatchNorm) is never padded: its slots are grouped by their exact batch count instead, so that
    padding rows never enter the batch statistics.
    """

    model: BoundModel
    name: str = "batched"

    def __post_init__(self) -> None:
        self.model = _as_bound(self.model)
        self._kernel = functional_kernel(self.model) if self.model.dense is None else None
        self._copies: list[nn.Module] = []

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        if self.model.threaded(task.features.device):
            return self._train_threads(start, task)
        plan = task.plan
        nominal = plan.batch_size if plan.batch_size is not None else plan.rows.shape[2]
        counts = np.maximum(np.asarray(plan.counts, dtype=np.int64), 1)
        widths = counts if self.model.batch_dependent else padded_widths(counts, nominal)
        buckets = _groups(widths)
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
        layout, model_task = self.model.dense, self.model.task
        fused = layout is not None and step.is_plain
        scale = mask / counts.unsqueeze(1)
        loss_sum = torch.zeros(k, device=device)
        square_sum = torch.zeros(k, device=device)
        for s in range(steps):
            # index_select on flat rows is several times faster than advanced indexing here.
            flat = rows[s].reshape(-1)
            x = features.index_select(0, flat).view(k, batch, *sample_shape)
            y = targets.index_select(0, flat).view(k, batch)
            seen = None
            if layout is not None:
                # The samples' losses at the model this step reads (Feedback.loss_squares): one more
                # forward pass, made only when a run's sampler reads them.
                if measure_losses:
                    with torch.no_grad():
                        seen = dense_sample_losses(params, x, y, layout, model_task) * mask
                if fused and s > 0:
                    dense_sgd_step(params, x, y, scale, lr=local_lr, layout=layout, task=model_task)
                    loss_sum, square_sum = _add_seen(loss_sum, square_sum, seen)
                    continue
                loss, grads = dense_loss_and_grads(params, x, y, mask, counts, layout=layout, task=model_task)
            else:
                assert self._kernel is not None
                loss, grads, losses = self._kernel(params, buffers, x, y, mask, counts, task.keys, s)
                seen = losses * mask if measure_losses else None
            loss_sum, square_sum = _add_seen(loss_sum, square_sum, seen)
            if s == 0:
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

    def _train_threads(self, start: Params, task: LocalTask) -> LocalResult:
        """Every slot on its own module copy, the slots spread over PyTorch's threads, one thread each.

        Worker ``w`` trains slots ``w, w + W, ...`` in order; inside a worker PyTorch runs on one thread,
        so each slot's arithmetic is that of a one-thread run, whatever the number of workers. The
        caller's thread count is restored after.
        """
        k = task.plan.counts.size
        before = torch.get_num_threads()
        workers = max(1, min(k, before))
        copies = self._module_copies(workers, task.features)
        slots: list[SlotResult | None] = [None] * k

        def work(worker: int) -> None:
            torch.set_num_threads(1)  # this thread's own OpenMP setting
            for j in range(worker, k, workers):
                slots[j] = train_slot(copies[worker], j, start, task, self.model.loss, seeded=False)

        # Threads started after this read the count when they first run an operation: one.
        torch.set_num_threads(1)
        try:
            if workers == 1:
                work(0)
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="fedsample-slot") as pool:
                    list(pool.map(work, range(workers)))
        finally:
            torch.set_num_threads(before)
        return stack_slots([slot for slot in slots if slot is not None], start, task)

    def _module_copies(self, count: int, features: torch.Tensor) -> list[nn.Module]:
        """``count`` private copies of the training module on the data's device (kept between calls);
        channels-last on a CPU for 2-D convolutions of images, where PyTorch's CPU kernels are faster."""
        device = features.device
        if len(self._copies) < count or any(next(c.parameters()).device != device for c in self._copies[:1]):
            template = copy.deepcopy(self.model.train_module).to(device)
            if (
                device.type == "cpu"
                and features.dim() == 4
                and any(isinstance(m, nn.Conv2d) for m in template.modules())
            ):
                template = template.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            self._copies = [copy.deepcopy(template) for _ in range(count)]
        return self._copies[:count]


def _add_seen(
    loss_sum: torch.Tensor, square_sum: torch.Tensor, seen: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The running sums of the measured sample losses and of their squares, plus a step's ``seen`` (k, B)."""
    if seen is None:
        return loss_sum, square_sum
    return loss_sum + seen.sum(1), square_sum + (seen * seen).sum(1)


# What torch.func says when it has no batching rule for an operation and loops over the batch instead.
_NO_BATCHING_RULE = "batching rule"


def batching_problem(
    model: BoundModel, features: npt.ArrayLike, targets: npt.ArrayLike, device: torch.device | None = None
) -> str | None:
    """Why the batched backend cannot serve ``model`` on ``device`` (one line), or None when it can.

    One trial step of the functional kernel, on two slots of the data's first two rows (on the CPU,
    from copies: nothing of the model or the caller's random state changes), tells: a random
    operation ``vmap`` cannot batch (anything but the keyed dropout), an in-place write it refuses,
    or an operation without a batching rule (the fused LSTM kernel), which ``torch.func`` would run
    one sample at a time, slower than the sequential backend. A model that draws from the global
    generator in its training step (other than the keyed dropout; :func:`~fedsample.engine.user_model.bind_model`
    finds it on the data) cannot be batched at all: the clients of a batch, or of the threads, would share
    it. Dense ReLU networks (the fused kernels) and models trained on threads
    (:meth:`~fedsample.engine.user_model.BoundModel.threaded`) need no trial.
    """
    if model.draws_randomness:  # found by bind_model's training step on the data
        return "its training step draws from PyTorch's global generator, which the clients of a batch would share"
    if model.dense is not None or model.threaded(device if device is not None else torch.device("cpu")):
        return None  # the fused kernels, or threads: no torch.func transform to try
    rows = min(2, int(np.shape(features)[0]))
    if rows == 0:
        return None
    x = as_features(np.asarray(features)[:rows], "cpu")
    y = as_targets(np.asarray(targets)[:rows], "cpu", model.task)
    module = copy.deepcopy(model.train_module).to("cpu")
    probe = replace(model, train_module=module)
    params = {n: p.detach().clone().unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in module.named_parameters()}
    buffers = {n: b.detach().clone().unsqueeze(0).repeat(2, *[1] * b.dim()) for n, b in module.named_buffers()}
    mask = torch.ones(2, rows)
    counts = torch.full((2,), float(rows))
    keys = torch.tensor([1, 2], dtype=torch.int64)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            functional_kernel(probe)(
                params, buffers, x.expand(2, *x.shape), y.expand(2, *y.shape), mask, counts, keys, 0
            )
    except Exception as exc:  # whatever torch.func refuses (the module itself trained in bind_model), said in one line
        return f"torch.func cannot batch it: {one_line(exc, 200)}"
    for warning in caught:
        text = " ".join(str(warning.message).split())
        if _NO_BATCHING_RULE in text:
            operation = text.split("batching rule for ", 1)[-1].split(".", 1)[0]
            return f"torch.func has no batching rule for {operation} and would run it one sample at a time"
    return None


@dataclass
class SequentialBackend(Backend):
    """The reference: each slot trained alone with ``torch.optim.SGD`` on an ``nn.Module``.

    It runs any module. Each slot's random operations are its own: its dropout is keyed as on the
    batched backend, and any other random draw comes from the global generator seeded by the slot's
    key inside ``torch.random.fork_rng``, so the caller's random state is left as it was.
    """

    model: BoundModel
    name: str = "sequential"

    def __post_init__(self) -> None:
        self.model = _as_bound(self.model)

    def run(self, start: Params, task: LocalTask) -> LocalResult:
        module = copy.deepcopy(self.model.train_module).to(task.features.device)
        slots = [train_slot(module, j, start, task, self.model.loss, seeded=True) for j in range(task.plan.counts.size)]
        return stack_slots(slots, start, task)


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


def train_slot(
    module: nn.Module, j: int, start: Params, task: LocalTask, loss_of: PerSampleFn, *, seeded: bool
) -> SlotResult:
    """Slot ``j`` of ``task`` trained on ``module`` (its parameters and buffers overwritten first) with
    ``torch.optim.SGD`` and autograd on the local algorithm's objective.

    ``seeded``: the slot's random draws other than its keyed dropout come from the global generator,
    seeded by its key inside ``torch.random.fork_rng`` (the sequential backend); otherwise the module
    must draw nothing from it (the batched backend's threads share it).
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
    with contextlib.ExitStack() as stack:
        if seeded:
            stack.enter_context(torch.random.fork_rng(devices=[device] if device.type == "cuda" else []))
            torch.default_generator.manual_seed(int(key))
            if device.type == "cuda":
                torch.cuda.manual_seed(int(key))
        for s in range(steps):
            rows = torch.as_tensor(np.ascontiguousarray(plan.rows[s, j, :count]), device=device)
            optimizer.zero_grad()
            x = features[rows]
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with dropout_keys(key, s):
                output = module(x)
            sample_losses = loss_of(output, targets[rows])
            loss = sample_losses.mean()
            seen = sample_losses.detach().double()
            loss_mean += seen.sum() / (count * steps)
            loss_square += seen.pow(2).sum() / (count * steps)
            # The algorithm's local objective, differentiated by autograd: the reference for the
            # batched backend's explicit ClientStep.direction.
            slot_step.objective(loss, module.named_parameters(), anchor).backward()  # type: ignore[no-untyped-call]
            if s == 0:  # theta_i = theta here, so the proximal term adds no gradient
                first_loss = loss.detach()
                grads = [p.grad for p in module.parameters() if p.grad is not None]
                grad_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))  # type: ignore[arg-type]
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
    """Whether the module's copy runs in channels-last layout (set by ``BatchedBackend._module_copies``)."""
    weight = next((m.weight for m in module.modules() if isinstance(m, nn.Conv2d)), None)
    return (
        weight is not None
        and features.dim() == 4
        and weight.is_contiguous(memory_format=torch.channels_last)
        and not weight.is_contiguous()
    )


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
