"""The engine's tensors of a data set's rows: float32 features (integer token ids kept) and targets."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["FLOAT_DTYPE", "as_features", "as_targets"]

FLOAT_DTYPE = torch.float32


def as_features(array: npt.ArrayLike, device: torch.device | str) -> torch.Tensor:
    """Rows of inputs on ``device`` (floats as float32; integer inputs, such as characters, kept)."""
    # np.array copies: the dataset's arrays are read-only, torch tensors are writable.
    tensor = torch.as_tensor(np.array(array), device=device)
    return tensor.to(FLOAT_DTYPE) if tensor.is_floating_point() else tensor


def as_targets(array: npt.ArrayLike, device: torch.device | str, task: str) -> torch.Tensor:
    """Targets on ``device``: float32 for regression, class indices (int64) for classification."""
    return torch.as_tensor(np.array(array), device=device).to(FLOAT_DTYPE if task == "regression" else torch.long)
