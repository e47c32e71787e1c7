"""IDX loader (MNIST family) on small files written in the real format, plain and gzipped."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from fedsample.data import load_idx_dataset, read_idx
from fedsample.errors import FedsampleError
from idx_files import missing_file_error

TYPE_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int16): 0x0B, np.dtype(np.float32): 0x0D}


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding of ``array``: magic number, big-endian dimensions, big-endian data."""
    code = TYPE_CODES[array.dtype]
    header = bytes([0, 0, code, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path: Path, data: bytes) -> None:
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)


def write_idx_dataset(
    folder: Path,
    *,
    prefix: str = "",
    test_stem: str = "t10k",
    gz: bool = False,
    num_train: int = 5,
    num_test: int = 3,
    label_offset: int = 0,
    shape: tuple[int, int] = (28, 28),
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {}
    for stem, count in (("train", num_train), (test_stem, num_test)):
        images = rng.integers(0, 256, size=(count, *shape), dtype=np.uint8)
        labels = (np.arange(count) % 10 + label_offset).astype(np.uint8)
        suffix = ".gz" if gz else ""
        write(folder / f"{prefix}{stem}-images-idx3-ubyte{suffix}", idx_bytes(images))
        write(folder / f"{prefix}{stem}-labels-idx1-ubyte{suffix}", idx_bytes(labels))
        arrays[f"{stem}-images"], arrays[f"{stem}-labels"] = images, labels
    return arrays


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("kind", ["mnist", "fashion-mnist", "kmnist"])
def test_load_mnist_family(tmp_path: Path, gz: bool, kind: str) -> None:
    arrays = write_idx_dataset(tmp_path, gz=gz)
    train, test = load_idx_dataset(tmp_path, kind=kind)
    assert train.features.shape == (5, 1, 28, 28)
    assert test.features.shape == (3, 1, 28, 28)
    assert train.features.dtype == np.float32
    assert np.allclose(train.features[:, 0] * 255, arrays["train-images"])
    assert train.targets.tolist() == arrays["train-labels"].tolist()
    assert test.targets.dtype == np.int64
    assert train.num_classes == 10
    assert train.name == f"{kind}-train"
    assert test.name == f"{kind}-test"
    flat, _ = load_idx_dataset(tmp_path, kind=kind, flatten=True)
    assert flat.features.shape == (5, 784)


def test_load_emnist_letters_transposes_and_shifts_labels(tmp_path: Path) -> None:
    arrays = write_idx_dataset(tmp_path, prefix="emnist-letters-", test_stem="test", label_offset=1)
    train, test = load_idx_dataset(tmp_path, kind="emnist-letters")
    assert np.allclose(train.features[:, 0] * 255, arrays["train-images"].transpose(0, 2, 1))
    assert train.targets.tolist() == (arrays["train-labels"].astype(int) - 1).tolist()
    assert train.num_classes == 26
    assert test.num_samples == 3


def test_read_idx_handles_other_types(tmp_path: Path) -> None:
    values = np.arange(-6, 6, dtype=np.int16).reshape(2, 3, 2)
    (tmp_path / "a.idx").write_bytes(idx_bytes(values))
    out = read_idx(tmp_path / "a.idx")
    assert out.dtype == np.int16
    assert out.dtype.isnative
    assert np.array_equal(out, values)
    floats = np.linspace(0, 1, 4, dtype=np.float32)
    (tmp_path / "b.idx").write_bytes(idx_bytes(floats))
    assert np.array_equal(read_idx(tmp_path / "b.idx"), floats)


def test_missing_folder_and_file_give_one_line(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError) as info:
        load_idx_dataset(tmp_path / "nowhere")
    assert "folder not found" in str(info.value)
    assert "\n" not in str(info.value)
    write_idx_dataset(tmp_path)
    error = missing_file_error(load_idx_dataset, tmp_path / "t10k-labels-idx1-ubyte")
    assert "https://" in str(error)
    assert error.parameter == "directory"


def corrupt(folder: Path, name: str, data: bytes) -> str:
    (folder / name).write_bytes(data)
    with pytest.raises(FedsampleError) as info:
        load_idx_dataset(folder)
    message = str(info.value)
    assert "\n" not in message
    assert name in message
    return message


def test_bad_magic(tmp_path: Path) -> None:
    write_idx_dataset(tmp_path)
    message = corrupt(tmp_path, "train-images-idx3-ubyte", b"\x12\x34\x08\x03" + bytes(100))
    assert "bad magic number 0x12340803" in message


def test_truncated_payload_and_header(tmp_path: Path) -> None:
    arrays = write_idx_dataset(tmp_path)
    full = idx_bytes(arrays["train-images"])
    assert "truncated" in corrupt(tmp_path, "train-images-idx3-ubyte", full[:-10])
    assert "truncated header" in corrupt(tmp_path, "train-images-idx3-ubyte", full[:9])
    assert "truncated" in corrupt(tmp_path, "train-images-idx3-ubyte", full[:2])
    assert "trailing bytes" in corrupt(tmp_path, "train-images-idx3-ubyte", full + b"\x00")


def test_counts_dimensions_and_labels_are_validated(tmp_path: Path) -> None:
    write_idx_dataset(tmp_path)
    message = corrupt(tmp_path, "train-labels-idx1-ubyte", idx_bytes(np.zeros(4, dtype=np.uint8)))
    assert "4 labels for 5 images" in message
    message = corrupt(tmp_path, "train-labels-idx1-ubyte", idx_bytes(np.full(5, 10, dtype=np.uint8)))
    assert "labels outside [0, 9]" in message
    write_idx_dataset(tmp_path)
    message = corrupt(tmp_path, "train-images-idx3-ubyte", idx_bytes(np.zeros((5, 784), dtype=np.uint8)))
    assert "expected 3-D unsigned-byte images" in message


def test_corrupt_gzip(tmp_path: Path) -> None:
    write_idx_dataset(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(FedsampleError) as info:
        load_idx_dataset(tmp_path)
    assert "not a complete gzip stream" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError, match="'kind' parameter of load_idx_dataset must be one of"):
        load_idx_dataset(tmp_path, kind="svhn")
