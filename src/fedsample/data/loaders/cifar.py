"""CIFAR-10 in its binary distribution: records of 1 label byte and 3072 pixel bytes (never pickles)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedsample.data.dataset import ArrayDataset
from fedsample.data.loaders._files import as_directory, find_file, malformed, read_bytes

__all__ = ["load_cifar10"]

_SOURCE = "Get the 'CIFAR-10 binary version' from https://www.cs.toronto.edu/~kriz/cifar.html and extract it."
_RECORD = 1 + 3 * 32 * 32
_TRAIN_FILES = tuple(f"data_batch_{k}.bin" for k in range(1, 6))


def load_cifar10(directory: str | os.PathLike[str]) -> tuple[ArrayDataset, ArrayDataset]:
    """The CIFAR-10 training (50000) and test (10000) images from the binary files already on disk.

    ``directory`` holds ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin`` (or is
    the folder that contains ``cifar-10-batches-bin``). Each record is one label byte (0-9) and
    3072 pixel bytes (red, green, blue planes of 32x32, row-major). Features are float32 in
    ``[0, 1]`` of shape ``(N, 3, 32, 32)``. Only the binary version is read: the Python version is a
    pickle, and unpickling a downloaded file can run arbitrary code.
    """
    owner = "load_cifar10"
    folder = as_directory(directory, owner, source=_SOURCE)
    if not (folder / _TRAIN_FILES[0]).is_file() and (folder / "cifar-10-batches-bin").is_dir():
        folder = folder / "cifar-10-batches-bin"
    train = _read_batches(folder, _TRAIN_FILES, owner, "cifar10-train")
    test = _read_batches(folder, ("test_batch.bin",), owner, "cifar10-test")
    return train, test


def _read_batches(folder: Path, names: tuple[str, ...], owner: str, name: str) -> ArrayDataset:
    records = []
    for file_name in names:
        path = find_file(folder, (file_name,), owner, source=_SOURCE)
        data = read_bytes(path, owner)
        if len(data) == 0 or len(data) % _RECORD:
            raise malformed(
                owner, path, f"truncated: {len(data)} bytes is not a whole number of {_RECORD}-byte records"
            )
        block = np.frombuffer(data, dtype=np.uint8).reshape(-1, _RECORD)
        if block[:, 0].max() > 9:
            raise malformed(owner, path, f"label byte {int(block[:, 0].max())} outside [0, 9]")
        records.append(block)
    table = np.concatenate(records)
    features = table[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / np.float32(255.0)
    return ArrayDataset(features=features, targets=table[:, 0].astype(np.int64), num_classes=10, name=name)
