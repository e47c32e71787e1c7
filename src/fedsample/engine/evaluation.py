"""Evaluation of stacked global models: the federated objective and the test metrics.

The global objective ``sum_i p_i L_i`` (``L_i`` the mean loss over client ``i``'s training rows) and
the mean test loss, accuracy and the model's extra metrics, over all data, in chunks of rows. Dense
ReLU networks run the training kernels' own forward pass
(:func:`~fedsample.engine.trainers.kernels.dense_forward`); any other model runs the engine's copy of its
module in ``eval()`` mode (dropout off, BatchNorm on its running statistics) with each run's
parameters and buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedsample.engine.losses import accuracy
from fedsample.engine.paper_models import Params
from fedsample.engine.tensors import FLOAT_DTYPE, as_features, as_targets
from fedsample.engine.trainers.kernels import dense_forward
from fedsample.engine.user_model import BoundModel

__all__ = ["FLOAT_DTYPE", "Evaluation", "Evaluator", "as_features", "as_targets"]

# Per run: the objective sum_i p_i L_i, the test loss, the test accuracy, then each extra metric of the
# model (in the order of its ``metrics``).
Evaluation = tuple[np.ndarray, ...]


@dataclass
class Evaluator:
    """Global objective and test metrics of stacked models, batched over data and runs."""

    model: BoundModel
    features: torch.Tensor
    targets: torch.Tensor
    client_of_row: torch.Tensor
    sizes: torch.Tensor
    importances: torch.Tensor
    test_features: torch.Tensor
    test_targets: torch.Tensor
    chunk: int = 8192

    def __post_init__(self) -> None:
        if self.model.dense is None:
            # A module's activations can be many times its input (a convolution's channels): rows of at most
            # 2**22 input values a chunk keep them to a few hundred MB at most.
            per_row = max(1, int(np.prod(self.features.shape[1:])))
            self.chunk = max(64, min(self.chunk, 2**22 // per_row))

    def _outputs(self, params: Params, buffers: Params, x: torch.Tensor) -> torch.Tensor:
        """``(R, rows, ...)`` outputs of the ``R`` stacked models."""
        runs = next(iter(params.values())).shape[0]
        layout = self.model.dense
        if layout is not None:
            stacked = x.unsqueeze(0).expand(runs, *x.shape)
            out = dense_forward(params, stacked, layout)[2]
            return out.squeeze(-1) if layout.squeeze_output else out
        module = self.model.eval_module
        return torch.stack(
            [
                torch.func.functional_call(
                    module, ({n: v[r] for n, v in params.items()}, {n: v[r] for n, v in buffers.items()}), (x,)
                )
                for r in range(runs)
            ]
        )

    def _losses(
        self, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor, *, metrics: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Per-sample losses ``(R, rows)``, correct predictions ``(R, rows)`` and, with ``metrics``, each
        extra metric ``(R, rows)``."""
        losses, correct = [], []
        extra: list[list[torch.Tensor]] = [[] for _ in self.model.metrics] if metrics else []
        classification = self.model.task == "classification"
        for start in range(0, x.shape[0], self.chunk):
            out = self._outputs(params, buffers, x[start : start + self.chunk])
            yy = y[start : start + self.chunk]
            runs = out.shape[0]
            flat_out = out.reshape(runs * out.shape[1], *out.shape[2:])
            flat_y = yy.repeat(runs)
            losses.append(self.model.loss(flat_out, flat_y).reshape(runs, -1))
            if classification:
                correct.append(accuracy(out, yy.unsqueeze(0)))
            for values, function in zip(extra, self.model.metrics.values(), strict=False):
                values.append(function(flat_out, flat_y).reshape(runs, -1).to(out.dtype))
        loss = torch.cat(losses, dim=1)
        acc = torch.cat(correct, dim=1) if correct else torch.full_like(loss, float("nan"))
        return loss, acc, [torch.cat(values, dim=1) for values in extra]

    @torch.no_grad()
    def sample_losses(self, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample losses ``(R, rows)`` of the ``R`` stacked models on the rows ``x``, ``y`` (the
        evaluation's forward pass; Power-of-Choice's candidates' losses at the global model)."""
        return self._losses(params, buffers, x, y)[0]

    def mean_loss_gradients(
        self, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor, counts: np.ndarray
    ) -> torch.Tensor:
        """``(groups, d)``: for each group of ``counts[k]`` consecutive rows of ``x``, ``y``, the gradient
        of the mean loss at the one model ``params`` (stacked ``(1, ...)``, the evaluation's forward
        pass: dense kernels, or the module in ``eval()`` mode), flattened in the order of ``params``.

        One forward and backward pass per group and chunk of rows (DivFL's full-batch gradients).
        """
        rows = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        out = []
        with torch.enable_grad():
            for k in range(len(counts)):
                leaves = [v.detach().clone().requires_grad_(True) for v in params.values()]
                stacked = dict(zip(params, leaves, strict=True))
                total = [torch.zeros_like(v) for v in leaves]
                count = max(int(counts[k]), 1)
                for start in range(int(rows[k]), int(rows[k + 1]), self.chunk):
                    end = min(int(rows[k + 1]), start + self.chunk)
                    outputs = self._outputs(stacked, buffers, x[start:end])[0]
                    loss = self.model.loss(outputs, y[start:end]).sum() / count
                    for acc, grad in zip(total, torch.autograd.grad(loss, leaves), strict=True):
                        acc.add_(grad)
                out.append(torch.cat([g.reshape(-1) for g in total]))
        return torch.stack(out) if out else torch.zeros(0, sum(v[0].numel() for v in params.values()))

    @torch.no_grad()
    def __call__(self, params: Params, buffers: Params | None = None) -> Evaluation:
        """Per run: the objective ``sum_i p_i L_i``, the test loss and accuracy and each extra metric (NaN
        without test rows; accuracy NaN for regression)."""
        buffers = buffers if buffers is not None else {}
        # One run at a time: a run's metrics then come from the same kernels, bit for bit, whichever
        # runs it is simulated with (a stacked matmul over runs rounds differently for 1 and R runs),
        # so a comparison split over Ray tasks reports exactly what one batch reports.
        runs = next(iter(params.values())).shape[0]
        train: list[torch.Tensor] = []
        tested: list[list[torch.Tensor]] = [[] for _ in range(2 + len(self.model.metrics))]
        for r in range(runs):
            one = {n: v[r : r + 1] for n, v in params.items()}
            one_buffers = {n: v[r : r + 1] for n, v in buffers.items()}
            loss, _, _ = self._losses(one, one_buffers, self.features, self.targets)
            per_client = torch.zeros(self.sizes.shape[0], dtype=loss.dtype, device=loss.device)
            per_client.index_add_(0, self.client_of_row, loss[0])
            train.append((per_client / self.sizes).dot(self.importances))
            if self.test_features.shape[0]:
                run_loss, run_acc, run_metrics = self._losses(
                    one, one_buffers, self.test_features, self.test_targets, metrics=True
                )
                for values, column in zip(tested, (run_loss, run_acc, *run_metrics), strict=True):
                    values.append(column[0].mean())
        objective = torch.stack(train)

        def runs_of(values: list[torch.Tensor]) -> np.ndarray:
            stacked = torch.stack(values) if values else torch.full_like(objective, float("nan"))
            out: np.ndarray = stacked.double().cpu().numpy()
            return out

        return (objective.double().cpu().numpy(), *(runs_of(values) for values in tested))
