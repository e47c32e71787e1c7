"""Small MNIST-format (IDX) data sets written by tests: real file layout, any labels, tiny images."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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
