"""scikit-learn's handwritten digits: 1797 real 8x8 images, shipped inside the scikit-learn package."""

from __future__ import annotations

import numpy as np

from fedsample._imports import require
from fedsample._validation import Boolean, check_param
from fedsample.data.dataset import ArrayDataset

__all__ = ["load_digits"]


def load_digits(*, as_images: bool = False) -> ArrayDataset:
    """The UCI optical-recognition digits as packaged by scikit-learn (no network needed).

    Pixel intensities (0 to 16) are scaled to ``[0, 1]`` as float32. Needs the ``data`` extra
    (scikit-learn).

    Parameters
    ----------
    as_images:
        ``False`` (default) gives features of shape ``(1797, 64)``; ``True`` gives ``(1797, 1, 8, 8)``.
    """
    owner = "load_digits"
    check_param("as_images", owner, as_images, Boolean())
    datasets = require("sklearn.datasets", extra="data", package="scikit-learn", owner=owner)
    bunch = datasets.load_digits()
    features = np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)
    if as_images:
        features = features.reshape(-1, 1, 8, 8)
    targets = np.asarray(bunch.target, dtype=np.int64)
    return ArrayDataset(features=features, targets=targets, num_classes=10, task="classification", name="digits")
