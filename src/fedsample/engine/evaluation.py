"""Evaluation of stacked global models: the federated objective and the test metrics.

The global objective ``sum_i p_i L_i`` (``L_i`` the mean loss over client ``i``'s training rows) and
the mean test loss and accuracy, over all data, in chunks of rows. Dense models run the training
kernels' own forward pass (:func:`~fedsample.engine.kernels.dense_forward`); other models run their
``nn.Module``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from fedsample.engine.kernels import dense_forward, per_sample_loss
from fedsample.engine.models import ModelSpec, Params

__all__ = ["Evaluator", "as_features", "as_targets"]

FLOAT_DTYPE = torch.float32


def as_features(array: npt.ArrayLike, device: torch.device) -> torch.Tensor:
    """Rows of inputs on ``device`` (floats as float32; integer inputs, such as characters, kept)."""
    # np.array copies: the dataset's arrays are read-only, torch tensors are writable.
    tensor = torch.as_tensor(np.array(array), device=device)
    return tensor.to(FLOAT_DTYPE) if tensor.is_floating_point() else tensor


def as_targets(array: npt.ArrayLike, device: torch.device, task: str) -> torch.Tensor:
    """Targets on ``device``: float32 for regression, class indices (int64) for classification."""
    return torch.as_tensor(np.array(array), device=device).to(FLOAT_DTYPE if task == "regression" else torch.long)


@dataclass
class Evaluator:
    """Global objective and test metrics of stacked models, batched over data and runs."""

    model: ModelSpec
    features: torch.Tensor
    targets: torch.Tensor
    client_of_row: torch.Tensor
    sizes: torch.Tensor
    importances: torch.Tensor
    test_features: torch.Tensor
    test_targets: torch.Tensor
    chunk: int = 8192

    def __post_init__(self) -> None:
        self._module = self.model.build().to(self.features.device)

    def _outputs(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        """``(R, rows, ...)`` outputs of the ``R`` stacked models."""
        runs = next(iter(params.values())).shape[0]
        if self.model.is_dense:
            stacked = x.unsqueeze(0).expand(runs, *x.shape)
            out = dense_forward(params, stacked, len(self.model.dense_widths) - 1)[2]
            return out.squeeze(-1) if self.model.kind == "linear" else out
        return torch.stack(
            [torch.func.functional_call(self._module, {n: v[r] for n, v in params.items()}, (x,)) for r in range(runs)]
        )

    def _losses(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample losses ``(R, rows)`` and correct predictions ``(R, rows)``."""
        losses, correct = [], []
        for start in range(0, x.shape[0], self.chunk):
            out = self._outputs(params, x[start : start + self.chunk])
            yy = y[start : start + self.chunk]
            runs = out.shape[0]
            flat_out = out.reshape(runs * out.shape[1], *out.shape[2:])
            flat_y = yy.repeat(runs)
            losses.append(per_sample_loss(flat_out, flat_y, self.model.task).reshape(runs, -1))
            if self.model.task == "classification":
                correct.append((out.argmax(-1) == yy.unsqueeze(0)).to(out.dtype))
        loss = torch.cat(losses, dim=1)
        acc = torch.cat(correct, dim=1) if correct else torch.full_like(loss, float("nan"))
        return loss, acc

    @torch.no_grad()
    def sample_losses(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample losses ``(R, rows)`` of the ``R`` stacked models on the rows ``x``, ``y`` (the
        evaluation's forward pass; Power-of-Choice's candidates' losses at the global model)."""
        return self._losses(params, x, y)[0]

    @torch.no_grad()
    def __call__(self, params: Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per run: the objective ``sum_i p_i L_i``, the test loss and the test accuracy (NaN without test rows)."""
        # One run at a time: a run's metrics then come from the same kernels, bit for bit, whichever
        # runs it is simulated with (a stacked matmul over runs rounds differently for 1 and R runs),
        # so a comparison split over Ray tasks reports exactly what one batch reports.
        runs = next(iter(params.values())).shape[0]
        train, test_loss, test_accuracy = [], [], []
        for r in range(runs):
            one = {n: v[r : r + 1] for n, v in params.items()}
            loss, _ = self._losses(one, self.features, self.targets)
            per_client = torch.zeros(self.sizes.shape[0], dtype=loss.dtype, device=loss.device)
            per_client.index_add_(0, self.client_of_row, loss[0])
            train.append((per_client / self.sizes).dot(self.importances))
            if self.test_features.shape[0]:
                run_loss, run_acc = self._losses(one, self.test_features, self.test_targets)
                test_loss.append(run_loss[0].mean())
                test_accuracy.append(run_acc[0].mean())
        objective = torch.stack(train)
        tl = torch.stack(test_loss) if test_loss else torch.full_like(objective, float("nan"))
        ta = torch.stack(test_accuracy) if test_accuracy else torch.full_like(objective, float("nan"))
        return objective.double().cpu().numpy(), tl.double().cpu().numpy(), ta.double().cpu().numpy()
