"""CIFAR-10 binary loader on small batch files written in the real record format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsample.data import load_cifar10
from fedsample.errors import FedsampleError
from idx_files import missing_file_error

RECORD = 1 + 3072


def records(labels: list[int], seed: int) -> tuple[bytes, np.ndarray]:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(len(labels), 3, 32, 32), dtype=np.uint8)
    table = np.concatenate([np.array(labels, dtype=np.uint8)[:, None], pixels.reshape(len(labels), -1)], axis=1)
    return table.tobytes(), pixels


def write_cifar(folder: Path) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    pixels = []
    for k in range(1, 6):
        data, p = records([k, (k + 3) % 10], seed=k)
        (folder / f"data_batch_{k}.bin").write_bytes(data)
        pixels.append(p)
    data, test_pixels = records([9, 0, 4], seed=99)
    (folder / "test_batch.bin").write_bytes(data)
    return {"train": np.concatenate(pixels), "test": test_pixels}


def test_load_cifar10(tmp_path: Path) -> None:
    pixels = write_cifar(tmp_path)
    train, test = load_cifar10(tmp_path)
    assert train.features.shape == (10, 3, 32, 32)
    assert test.features.shape == (3, 3, 32, 32)
    assert train.features.dtype == np.float32
    assert train.targets.tolist() == [1, 4, 2, 5, 3, 6, 4, 7, 5, 8]
    assert test.targets.tolist() == [9, 0, 4]
    # Channel planes: the first 1024 pixel bytes are red, row-major.
    assert np.allclose(train.features * 255, pixels["train"])
    assert np.allclose(test.features * 255, pixels["test"])
    assert train.num_classes == 10
    assert train.name == "cifar10-train"


def test_load_cifar10_from_the_extracted_archive_folder(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar-10-batches-bin")
    train, _ = load_cifar10(tmp_path)
    assert train.num_samples == 10


def test_missing_batch_names_the_path(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    error = missing_file_error(load_cifar10, tmp_path / "test_batch.bin")
    assert "https://www.cs.toronto.edu/~kriz/cifar.html" in str(error)


def test_truncated_batch(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    path = tmp_path / "data_batch_3.bin"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(FedsampleError) as info:
        load_cifar10(tmp_path)
    assert "data_batch_3.bin" in str(info.value)
    assert f"not a whole number of {RECORD}-byte records" in str(info.value)


def test_bad_label_byte(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    data, _ = records([3, 10], seed=0)
    (tmp_path / "data_batch_2.bin").write_bytes(data)
    with pytest.raises(FedsampleError, match=r"label byte 10 outside \[0, 9\]"):
        load_cifar10(tmp_path)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError, match="load_cifar10: folder not found"):
        load_cifar10(tmp_path / "cifar")
