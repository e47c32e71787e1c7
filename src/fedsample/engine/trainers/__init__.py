"""Local training of a round's clients: one trainer per execution path, chosen once per run.

:func:`choose_trainer` picks the path for a model on a device: the fused dense kernels
(:class:`~fedsample.engine.trainers.fused.FusedTrainer`), ``torch.func.vmap``
(:class:`~fedsample.engine.trainers.vmap.VmapTrainer`), threads
(:class:`~fedsample.engine.trainers.threads.ThreadTrainer`) or the sequential reference
(:class:`~fedsample.engine.trainers.sequential.SequentialTrainer`); :mod:`~fedsample.engine.trainers.base`
holds what they share. ``BatchedBackend`` and ``SequentialBackend`` (the engine's public names) are
:func:`batched_trainer` and :class:`SequentialTrainer`.
"""

from __future__ import annotations

import warnings

import numpy.typing as npt
import torch

from fedsample.engine.model_binding import BoundModel
from fedsample.engine.paper_models import ModelSpec
from fedsample.engine.specs import FallbackWarning
from fedsample.engine.trainers.base import LocalResult, LocalTask, Trainer, as_bound
from fedsample.engine.trainers.fused import FusedTrainer
from fedsample.engine.trainers.sequential import SequentialTrainer
from fedsample.engine.trainers.threads import ThreadTrainer
from fedsample.engine.trainers.vmap import VmapTrainer, batching_problem

__all__ = [
    "BatchedBackend",
    "FusedTrainer",
    "LocalResult",
    "LocalTask",
    "SequentialBackend",
    "SequentialTrainer",
    "ThreadTrainer",
    "Trainer",
    "VmapTrainer",
    "batched_trainer",
    "batching_problem",
    "choose_trainer",
    "trainer_for",
]


def batched_trainer(model: BoundModel | ModelSpec, device: torch.device | None = None) -> Trainer:
    """The trainer that trains every slot of a round together on ``device`` (default: where the model's
    module is): the fused kernels for a dense layout, threads where :meth:`BoundModel.threaded` says so,
    else ``torch.func.vmap``."""
    bound = as_bound(model)
    if device is None:
        device = next((p.device for p in bound.train_module.parameters()), torch.device("cpu"))
    if bound.dense is not None:
        return FusedTrainer(bound)
    if bound.threaded(device):
        return ThreadTrainer(bound)
    return VmapTrainer(bound)


def choose_trainer(model: BoundModel, requested: str, device: torch.device) -> Trainer:
    """The trainer of a run: the sequential one when ``requested``, else :func:`batched_trainer`'s."""
    return SequentialTrainer(model) if requested == "sequential" else batched_trainer(model, device)


# The engine's public names for the batched and the sequential paths.
BatchedBackend = batched_trainer
SequentialBackend = SequentialTrainer


def trainer_for(
    model: BoundModel, requested: str, features: npt.ArrayLike, targets: npt.ArrayLike, device: torch.device
) -> Trainer:
    """The trainer ``requested`` (:func:`choose_trainer`), or the sequential one with a
    :class:`~fedsample.engine.specs.FallbackWarning` saying why when ``torch.func`` cannot batch the model (a
    random operation other than dropout, an operation without a batching rule such as the fused LSTM kernel,
    an in-place write it refuses), tried on the training ``features`` and ``targets``."""
    problem = None if requested == "sequential" else batching_problem(model, features, targets, device)
    if problem is not None:
        warnings.warn(
            f"the batched backend does not serve the model {model.name!r} ({problem}); using the sequential backend",
            FallbackWarning,
            stacklevel=4,
        )
        return SequentialTrainer(model)
    return choose_trainer(model, requested, device)
