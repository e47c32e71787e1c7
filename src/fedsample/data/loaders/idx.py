"""IDX files: MNIST, Fashion-MNIST, KMNIST and EMNIST as distributed (optionally gzipped).

An IDX file starts with a 4-byte magic number ``0x00 0x00 <type> <ndim>`` followed by ``ndim``
big-endian uint32 dimension sizes and the data in row-major order, big-endian.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._validation import Boolean, Options, check_param, invalid
from fedsample.data.dataset import ArrayDataset
from fedsample.data.loaders._files import as_directory, find_file, malformed, read_bytes

__all__ = ["IDX_KINDS", "PACKAGED_DIRECTORIES", "load_idx_dataset", "read_idx"]

# Where a distribution package installs a data set's files: the default directory for it.
# Debian's dataset-fashion-mnist installs the four gzipped IDX files here.
PACKAGED_DIRECTORIES: dict[str, str] = {"fashion-mnist": "/usr/share/datasets/fashion-mnist"}

# Type byte of the magic number -> big-endian numpy dtype.
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass(frozen=True)
class _Kind:
    file_prefix: str
    test_stem: str
    num_classes: int
    label_offset: int
    transpose: bool
    source: str


_EMNIST_SOURCE = "Get EMNIST (binary format) from https://www.nist.gov/itl/products-and-services/emnist-dataset."
_EMNIST_SPLITS = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}

IDX_KINDS: dict[str, _Kind] = {
    "mnist": _Kind("", "t10k", 10, 0, False, "Get MNIST from https://yann.lecun.com/exdb/mnist/ (or a mirror)."),
    "fashion-mnist": _Kind(
        "",
        "t10k",
        10,
        0,
        False,
        "Install the Debian package dataset-fashion-mnist (files in /usr/share/datasets/fashion-mnist) or get "
        "Fashion-MNIST from https://github.com/zalandoresearch/fashion-mnist.",
    ),
    "kmnist": _Kind("", "t10k", 10, 0, False, "Get KMNIST (MNIST format) from https://github.com/rois-codh/kmnist."),
    **{
        # EMNIST stores each image transposed; 'letters' numbers its classes from 1.
        f"emnist-{split}": _Kind(f"emnist-{split}-", "test", count, int(split == "letters"), True, _EMNIST_SOURCE)
        for split, count in _EMNIST_SPLITS.items()
    },
}


def read_idx(path: str | os.PathLike[str]) -> npt.NDArray[Any]:
    """The array stored in one IDX file (``.gz`` decompressed), validated against its header.

    Raises a one-line :class:`~fedsample.errors.FedsampleError` for a bad magic number, a
    truncated header or payload, or trailing bytes.
    """
    owner = "read_idx"
    file = Path(path)
    if not file.is_file():
        raise invalid("path", owner, "an existing IDX file", str(path))
    return _parse_idx(read_bytes(file, owner, parameter="path"), file, owner, parameter="path")


def _parse_idx(data: bytes, path: Path, owner: str, *, parameter: str) -> npt.NDArray[Any]:
    if len(data) < 4:
        raise malformed(
            owner, path, f"truncated: {len(data)} bytes, shorter than the 4-byte magic number", parameter=parameter
        )
    magic = int.from_bytes(data[:4], "big")
    type_code, ndim = data[2], data[3]
    if data[0] != 0 or data[1] != 0 or type_code not in _IDX_TYPES or ndim == 0:
        raise malformed(owner, path, f"bad magic number 0x{magic:08x} (not an IDX file)", parameter=parameter)
    header = 4 + 4 * ndim
    if len(data) < header:
        raise malformed(
            owner, path, f"truncated header: {len(data)} bytes, {ndim} dimensions need {header}", parameter=parameter
        )
    shape = tuple(int(v) for v in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_TYPES[type_code])
    expected = math.prod(shape) * dtype.itemsize  # Python ints: four uint32 dimensions overflow int64
    payload = len(data) - header
    if payload != expected:
        what = "truncated" if payload < expected else "trailing bytes"
        raise malformed(
            owner, path, f"{what}: {payload} data bytes, but dimensions {shape} need {expected}", parameter=parameter
        )
    array = np.frombuffer(data, dtype=dtype, count=expected // dtype.itemsize, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def load_idx_dataset(
    directory: str | os.PathLike[str], *, kind: str = "mnist", flatten: bool = False
) -> tuple[ArrayDataset, ArrayDataset]:
    """The training and test splits of an IDX dataset already on disk (nothing is downloaded).

    Reads ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``
    and ``t10k-labels-idx1-ubyte`` (each possibly with ``.gz``) from ``directory``; for EMNIST the
    names are ``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte``. Pixels are scaled to
    ``[0, 1]`` as float32 with shape ``(N, 1, 28, 28)`` (or ``(N, 784)`` with ``flatten=True``).
    EMNIST images are transposed back to the upright orientation, and the 1-based labels of
    ``emnist-letters`` are shifted to start at 0.

    Parameters
    ----------
    directory:
        Folder holding the four files.
    kind:
        ``"mnist"``, ``"fashion-mnist"``, ``"kmnist"`` or ``"emnist-<split>"`` with split one of
        balanced, byclass, bymerge, digits, letters, mnist.
    flatten:
        Give features of shape ``(N, H * W)``.
    """
    owner = "load_idx_dataset"
    if kind not in IDX_KINDS:
        raise invalid("kind", owner, Options(tuple(IDX_KINDS)), kind)
    check_param("flatten", owner, flatten, Boolean())
    spec = IDX_KINDS[kind]
    folder = as_directory(directory, owner, source=spec.source)
    splits = []
    for stem, split in (("train", "train"), (spec.test_stem, "test")):
        images = _read_member(folder, f"{spec.file_prefix}{stem}-images-idx3-ubyte", spec.source, owner)
        labels = _read_member(folder, f"{spec.file_prefix}{stem}-labels-idx1-ubyte", spec.source, owner)
        splits.append(_to_dataset(images, labels, spec, f"{kind}-{split}", flatten, owner))
    return splits[0], splits[1]


def _read_member(folder: Path, name: str, source: str, owner: str) -> tuple[Path, npt.NDArray[Any]]:
    path = find_file(folder, (name,), owner, source=source)
    return path, _parse_idx(read_bytes(path, owner), path, owner, parameter="directory")


def _to_dataset(
    images: tuple[Path, npt.NDArray[Any]],
    labels: tuple[Path, npt.NDArray[Any]],
    spec: _Kind,
    name: str,
    flatten: bool,
    owner: str,
) -> ArrayDataset:
    image_path, pixels = images
    label_path, values = labels
    if pixels.ndim != 3 or pixels.dtype != np.uint8:
        raise malformed(owner, image_path, f"expected 3-D unsigned-byte images, got {pixels.ndim}-D {pixels.dtype}")
    if values.ndim != 1 or values.dtype != np.uint8:
        raise malformed(owner, label_path, f"expected 1-D unsigned-byte labels, got {values.ndim}-D {values.dtype}")
    if values.shape[0] != pixels.shape[0]:
        raise malformed(
            owner, label_path, f"{values.shape[0]} labels for {pixels.shape[0]} images in {image_path.name}"
        )
    targets = values.astype(np.int64) - spec.label_offset
    if targets.size and (targets.min() < 0 or targets.max() >= spec.num_classes):
        low, high = spec.label_offset, spec.label_offset + spec.num_classes - 1
        raise malformed(owner, label_path, f"labels outside [{low}, {high}] (found {values.min()} to {values.max()})")
    if spec.transpose:
        pixels = pixels.transpose(0, 2, 1)
    features = pixels.astype(np.float32) / np.float32(255.0)
    features = features.reshape(features.shape[0], -1) if flatten else features[:, None, :, :]
    return ArrayDataset(features=features, targets=targets, num_classes=spec.num_classes, name=name)
