"""Small MNIST-format (IDX) data sets written by tests: real file layout, any labels, tiny images; and the check
that a loader of such files names the one it misses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fedsample.errors import FedsampleError


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding of an unsigned-byte array: magic number, big-endian dimensions, data."""
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def write_mnist_format(folder: Path, train_labels: np.ndarray, test_labels: np.ndarray, *, seed: int = 0) -> Path:
    """Write the four MNIST files (random 28 x 28 images with the given labels) into ``folder``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for stem, labels in (("train", train_labels), ("t10k", test_labels)):
        images = rng.integers(0, 256, size=(len(labels), 28, 28), dtype=np.uint8)
        (folder / f"{stem}-images-idx3-ubyte").write_bytes(idx_bytes(images))
        (folder / f"{stem}-labels-idx1-ubyte").write_bytes(idx_bytes(np.asarray(labels, dtype=np.uint8)))
    return folder


def missing_file_error(load: Callable[[Path], object], missing: Path) -> FedsampleError:
    """The error of ``load(missing.parent)`` once the file ``missing`` is deleted: one line that names it."""
    missing.unlink()
    with pytest.raises(FedsampleError) as info:
        load(missing.parent)
    message = str(info.value)
    assert "\n" not in message
    assert str(missing) in message
    return info.value
