"""The fused trainer: dense ReLU networks trained with ``bmm`` kernels, every slot of a round at once.

For a plain SGD step (FedAvg's) after the first, one kernel takes the step in place
(:func:`~fedsample.engine.trainers.kernels.dense_sgd_step`); the first step and any other local algorithm's
steps read the explicit gradients (:func:`~fedsample.engine.trainers.kernels.dense_loss_and_grads`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedsample.engine.model_binding import BoundModel
from fedsample.engine.paper_models import Params
from fedsample.engine.trainers.base import as_bound
from fedsample.engine.trainers.kernels import dense_loss_and_grads, dense_sample_losses, dense_sgd_step
from fedsample.engine.trainers.stacked import StackedStep, StackedTrainer
from fedsample.engine.user_model import DenseLayout

__all__ = ["FusedTrainer"]


@dataclass
class FusedTrainer(StackedTrainer):
    """The stacked trainer of a model with a dense layout (``BoundModel.dense``)."""

    model: BoundModel
    name: str = "batched"

    def __post_init__(self) -> None:
        self.model = as_bound(self.model)
        assert self.model.dense is not None
        self.layout: DenseLayout = self.model.dense

    def gradients(self, step: StackedStep) -> tuple[torch.Tensor | None, Params | None, torch.Tensor | None]:
        layout, kind, params, x, y = self.layout, self.model.task, step.params, step.x, step.y
        seen = None
        # The samples' losses at the model this step reads (Feedback.loss_squares): one more
        # forward pass, made only when a run's sampler reads them.
        if step.task.measure_losses:
            with torch.no_grad():
                seen = dense_sample_losses(params, x, y, layout, kind) * step.mask
        if step.task.step.is_plain and step.s > 0:
            dense_sgd_step(params, x, y, step.scale, lr=step.task.local_lr, layout=layout, task=kind)
            return None, None, seen
        loss, grads = dense_loss_and_grads(params, x, y, step.mask, step.counts, layout=layout, task=kind)
        return loss, grads, seen
