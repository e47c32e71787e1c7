"""Small federations and a feedback-recording sampler shared by the engine tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from fedsample import Federation
from fedsample.data import FederatedDataset
from fedsample.designs import Design
from fedsample.engine import ModelSpec
from fedsample.samplers import ROUND_FIELDS, DesignState, Feedback, MDSampler

# Unequal client sizes, some below the usual batch sizes (those clients train on a padded batch).
SIZES = (5, 9, 3, 7, 12, 4, 20, 6, 8, 11, 2, 13)


def _offsets(sizes: tuple[int, ...] | list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def classification_data(
    seed: int,
    *,
    sizes: tuple[int, ...] | list[int] = SIZES,
    sample_shape: tuple[int, ...] = (6,),
    num_classes: int = 4,
    test_per_client: int = 3,
) -> FederatedDataset:
    """Gaussian features, labels uniform over ``num_classes``, a few test rows per client."""
    rng = np.random.default_rng(seed)
    total, num_test = int(sum(sizes)), test_per_client * len(sizes)
    return FederatedDataset(
        train_features=rng.normal(size=(total, *sample_shape)).astype(np.float32),
        train_targets=rng.integers(0, num_classes, total),
        train_indptr=_offsets(sizes),
        test_features=rng.normal(size=(num_test, *sample_shape)).astype(np.float32),
        test_targets=rng.integers(0, num_classes, num_test),
        test_indptr=_offsets([test_per_client] * len(sizes)),
        num_classes=num_classes,
    )


def regression_data(seed: int, *, sizes: tuple[int, ...] | list[int] = SIZES, features: int = 5) -> FederatedDataset:
    """Noisy linear targets ``y = x . w + 0.1 noise`` with a per-client shift, a few test rows per client."""
    rng = np.random.default_rng(seed)
    total = int(sum(sizes))
    w = rng.normal(size=features)
    x = rng.normal(size=(total, features)).astype(np.float32)
    shift = np.repeat(rng.normal(size=len(sizes)), sizes)
    tx = rng.normal(size=(2 * len(sizes), features)).astype(np.float32)
    return FederatedDataset(
        train_features=x,
        train_targets=x @ w + shift + 0.1 * rng.normal(size=total),
        train_indptr=_offsets(sizes),
        test_features=tx,
        test_targets=tx @ w,
        test_indptr=_offsets([2] * len(sizes)),
        task="regression",
    )


def sequence_data(seed: int, *, sizes: tuple[int, ...] | list[int] = (4, 6, 3), length: int = 80) -> FederatedDataset:
    """Random character ids (vocabulary 80) of ``length`` steps, the next character as the label."""
    rng = np.random.default_rng(seed)
    total = int(sum(sizes))
    return FederatedDataset(
        train_features=rng.integers(0, 80, (total, length)),
        train_targets=rng.integers(0, 80, total),
        train_indptr=_offsets(sizes),
        test_features=rng.integers(0, 80, (len(sizes), length)),
        test_targets=rng.integers(0, 80, len(sizes)),
        test_indptr=_offsets([1] * len(sizes)),
        num_classes=80,
    )


def spec_for(kind: str, data: FederatedDataset, **options: Any) -> ModelSpec:
    """The ``kind`` model for ``data``'s samples and classes."""
    return ModelSpec(kind, data.sample_shape, data.num_classes or 1, **options)  # type: ignore[arg-type]


def torch_params(params: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {n: torch.as_tensor(v) for n, v in params.items()}


def load(spec: ModelSpec, params: dict[str, np.ndarray] | dict[str, torch.Tensor]) -> torch.nn.Module:
    """``spec``'s module holding ``params``."""
    module = spec.build()
    module.load_state_dict({n: torch.as_tensor(v) for n, v in params.items()})
    return module


@dataclass(frozen=True)
class Recorded:
    """The state of :class:`RecordingSampler`: MD's own state and every feedback seen so far."""

    inner: DesignState
    feedback: tuple[Feedback, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RecordingSampler(MDSampler):
    """MD sampling whose state accumulates the feedback of every round (and asks for update vectors)."""

    name: ClassVar[str] = "recording-md"
    reads: ClassVar[frozenset[str]] = ROUND_FIELDS | {"updates"}

    def init(self, federation: Federation, num_sampled: int) -> Recorded:  # type: ignore[override]
        return Recorded(inner=super().init(federation, num_sampled))

    def design(self, state: Recorded) -> Design:  # type: ignore[override]
        return super().design(state.inner)

    def update(self, state: Recorded, feedback: Feedback) -> Recorded:  # type: ignore[override]
        return Recorded(inner=state.inner, feedback=(*state.feedback, feedback))


@dataclass(frozen=True, kw_only=True)
class NormsOnlyRecordingSampler(RecordingSampler):
    """The same recorder, without asking for the update vectors."""

    name: ClassVar[str] = "recording-md-norms"
    reads: ClassVar[frozenset[str]] = ROUND_FIELDS
