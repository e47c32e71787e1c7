"""The vmap trainer: any module trained with ``torch.func``, every slot of a round at once.

The functional kernel (:func:`~fedsample.engine.trainers.kernels.functional_kernel`) maps one slot's step
over the stacked parameters, buffers, batches and dropout keys; :func:`batching_problem` says, from one
trial step, when ``torch.func`` cannot batch a model (then the sequential trainer serves it).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import torch

from fedsample.engine.model_binding import BoundModel
from fedsample.engine.paper_models import Params
from fedsample.engine.tensors import as_features, as_targets
from fedsample.engine.trainers.base import as_bound
from fedsample.engine.trainers.kernels import functional_kernel
from fedsample.engine.trainers.stacked import StackedStep, StackedTrainer
from fedsample.errors import one_line

__all__ = ["VmapTrainer", "batching_problem"]


@dataclass
class VmapTrainer(StackedTrainer):
    """The stacked trainer of any module ``torch.func`` can batch (no dense layout)."""

    model: BoundModel
    name: str = "batched"

    def __post_init__(self) -> None:
        self.model = as_bound(self.model)
        self._kernel = functional_kernel(self.model)

    def gradients(self, step: StackedStep) -> tuple[torch.Tensor | None, Params | None, torch.Tensor | None]:
        mask, task = step.mask, step.task
        loss, grads, losses = self._kernel(
            step.params, step.buffers, step.x, step.y, mask, step.counts, task.keys, step.s
        )
        return loss, grads, losses * mask if task.measure_losses else None


# What torch.func says when it has no batching rule for an operation and loops over the batch instead.
_NO_BATCHING_RULE = "batching rule"


def batching_problem(
    model: BoundModel, features: npt.ArrayLike, targets: npt.ArrayLike, device: torch.device | None = None
) -> str | None:
    """Why the batched trainers cannot serve ``model`` on ``device`` (one line), or None when it can.

    One trial step of the functional kernel, on two slots of the data's first two rows (on the CPU,
    from copies: nothing of the model or the caller's random state changes), tells: a random
    operation ``vmap`` cannot batch (anything but the keyed dropout), an in-place write it refuses,
    or an operation without a batching rule (the fused LSTM kernel), which ``torch.func`` would run
    one sample at a time, slower than the sequential backend. A model that draws from the global
    generator in its training step (other than the keyed dropout; :func:`~fedsample.engine.model_binding.bind_model`
    finds it on the data) cannot be batched at all: the clients of a batch, or of the threads, would share
    it. Dense ReLU networks (the fused kernels) and models trained on threads
    (:meth:`~fedsample.engine.model_binding.BoundModel.threaded`) need no trial.
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
