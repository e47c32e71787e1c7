"""The losses and evaluation metrics of the engine, one value per sample.

A loss is a function ``(output, target) -> (B,)``: the engine averages it over each client's
real samples, so a padded batch never changes the gradient. The named ones are

* ``"cross-entropy"``: classification; ``output (B, C)`` logits, ``target (B,)`` class ids;
* ``"mse"``: regression; the squared error ``(output - target)^2`` of ``output (B,)`` or ``(B, 1)``.

``"auto"`` takes cross-entropy for a classification data set and mse for a regression one. Any
other callable returning one finite value per sample works too (a label-smoothed cross-entropy, a
Huber loss...): it receives the targets as the data set holds them (int64 class ids, float32
values). A metric has the same signature; the engine reports its mean over the test rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["LOSSES", "PerSampleFn", "accuracy", "cross_entropy", "per_sample_loss", "squared_error"]

PerSampleFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The cross-entropy of logits ``(B, C)`` against class ids ``(B,)``, per sample."""
    if output.dim() == 2 and target.dim() == 1 and not target.is_floating_point():
        # The same numbers as F.cross_entropy (the negated log-probability of the target class, and
        # the same gradient), in two operations that torch.func batches directly, where cross_entropy
        # goes through a Python decomposition of nll_loss on every call.
        return -torch.log_softmax(output, 1).gather(1, target.unsqueeze(1)).squeeze(1)
    return torch.nn.functional.cross_entropy(output, target, reduction="none")


def squared_error(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``(output - target)^2`` per sample; an output of shape ``(B, 1)`` is read as ``(B,)``."""
    if output.dim() == target.dim() + 1 and output.shape[-1] == 1:
        output = output.squeeze(-1)
    return (output - target) ** 2


def accuracy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 where the largest logit is the target's class, else 0 (as the output's dtype)."""
    return (output.argmax(-1) == target).to(output.dtype)


LOSSES: dict[str, PerSampleFn] = {"cross-entropy": cross_entropy, "mse": squared_error}
"""The named losses; ``"auto"`` picks one from the data set's task."""


def per_sample_loss(output: torch.Tensor, target: torch.Tensor, task: str) -> torch.Tensor:
    """Cross-entropy for classification, squared error for regression, one value per sample."""
    return LOSSES["mse" if task == "regression" else "cross-entropy"](output, target)
