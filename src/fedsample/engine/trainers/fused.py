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
from fedsample.engine.trainers.base import LocalTask, as_bound
from fedsample.engine.trainers.kernels import dense_loss_and_grads, dense_sample_losses, dense_sgd_step
from fedsample.engine.trainers.stacked import StackedBatches, StackedTrainer
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

    def gradients(
        self,
        s: int,
        params: Params,
        buffers: Params,
        x: torch.Tensor,
        y: torch.Tensor,
        batches: StackedBatches,
        task: LocalTask,
    ) -> tuple[torch.Tensor | None, Params | None, torch.Tensor | None]:
        layout, kind = self.layout, self.model.task
        seen = None
        # The samples' losses at the model this step reads (Feedback.loss_squares): one more
        # forward pass, made only when a run's sampler reads them.
        if task.measure_losses:
            with torch.no_grad():
                seen = dense_sample_losses(params, x, y, layout, kind) * batches.mask
        if task.step.is_plain and s > 0:
            dense_sgd_step(params, x, y, batches.scale, lr=task.local_lr, layout=layout, task=kind)
            return None, None, seen
        loss, grads = dense_loss_and_grads(params, x, y, batches.mask, batches.counts, layout=layout, task=kind)
        return loss, grads, seen
