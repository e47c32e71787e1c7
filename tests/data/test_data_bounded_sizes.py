"""Sizes nobody bounded (issue 32, item 8, data part): an NPZ member's declared shape is checked against
the bytes it holds and this machine's memory before anything is allocated, and a synthetic data set too
large for memory is refused up front, each in one line naming the file and member or the parameter; the
command line exits 2 and writes nothing."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import format as npy

import fedsample._memory
from cli_helpers import run_cli
from fedsample.data import (
    load_table,
    lognormal_sizes,
    make_mnist1d,
    make_osmd_linear_regression,
    make_quadratic_clients,
    osmd_skewed_sizes,
    read_columns,
)
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.errors import FedsampleError

HUGE = 10**12


def _member(shape: tuple[int, ...], descr: str, data: bytes) -> bytes:
    """A real .npy file: a version 1.0 header declaring ``shape`` and ``descr``, then ``data``."""
    buffer = io.BytesIO()
    npy.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


def _archive(path: Path, x_shape: tuple[int, ...], compression: int = zipfile.ZIP_STORED) -> Path:
    """Three rows of client and y, and a member x whose header declares ``x_shape`` over 16 bytes."""
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("client.npy", _member((3,), "<i8", np.arange(3, dtype="<i8").tobytes()))
        archive.writestr("x.npy", _member(x_shape, "<f8", bytes(16)))
        archive.writestr("y.npy", _member((3,), "<i8", np.zeros(3, dtype="<i8").tobytes()))
    return path


def _message(call: Callable[[], object]) -> str:
    with pytest.raises(FedsampleError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_an_npz_member_declaring_more_than_it_holds_is_refused_by_name(tmp_path: Path, compression: int) -> None:
    """(10**12, 5) float64 over 16 bytes was a 56-line "cannot allocate 36 TiB" traceback."""
    path = _archive(tmp_path / "huge.npz", (HUGE, 5), compression)
    expected = f"{str(path)!r} is malformed: member 'x' declares shape ({HUGE}, 5) of float64 (40000000000000 bytes) "
    for call in (lambda: read_columns(path), lambda: load_table(path, client_column="client", target_column="y")):
        message = _message(call)
        assert expected in message
        assert "but holds 16 bytes of data" in message


def test_the_header_is_checked_before_any_allocation(tmp_path: Path) -> None:
    """4 GB declared over 16 bytes: numpy allocated the 4 GB, then found the data short."""
    path = _archive(tmp_path / "big.npz", (10**8, 5))
    tracemalloc.start()
    try:
        message = _message(lambda: read_columns(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "member 'x' declares shape (100000000, 5)" in message
    assert peak < 2**24  # 16 MiB: nothing of the declared 4 GB


def test_members_that_would_not_fit_in_memory_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An honest archive bigger than memory is refused before reading: here a machine of 10000 bytes."""
    path = tmp_path / "fat.npz"
    np.savez(path, client=np.arange(1000), x=np.ones((1000, 2)), y=np.zeros(1000, dtype=np.int64))
    assert read_columns(path)["x"].shape == (1000, 2)
    monkeypatch.setattr(fedsample._memory, "memory_limit", lambda: 10_000)
    message = _message(lambda: read_columns(path))
    assert "The 'path' parameter of read_columns must be small enough for the arrays of " in message
    assert "up to member 'x' (shape (1000, 2) of float64) to fit in memory" in message


def test_a_member_that_is_not_an_array_or_a_scalar_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "odd.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", b"not an array")
    assert "member 'x' is not a .npy array" in _message(lambda: read_columns(path))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", _member((), "<f8", bytes(8)))
    assert "member 'x' is a scalar, not a column" in _message(lambda: read_columns(path))


needs_a_memory_limit = pytest.mark.skipif(
    fedsample._memory.memory_limit() is None, reason="this machine does not say how much memory it has"
)


@needs_a_memory_limit
@pytest.mark.parametrize(
    ("call", "owner", "parameter"),
    [
        (lambda rng: make_mnist1d(HUGE, rng=rng), "make_mnist1d", "num_samples"),
        (
            lambda rng: make_osmd_linear_regression(num_clients=HUGE, rng=rng),
            "make_osmd_linear_regression",
            "num_clients",
        ),
        (
            lambda rng: make_quadratic_clients(num_clients=HUGE, iid=True, rng=rng),
            "make_quadratic_clients",
            "num_clients",
        ),
        (lambda rng: lognormal_sizes(HUGE, rng=rng), "lognormal_sizes", "num_clients"),
        (lambda rng: osmd_skewed_sizes(HUGE, rng=rng), "osmd_skewed_sizes", "num_clients"),
    ],
)
def test_a_synthetic_data_set_too_large_for_memory_is_refused_up_front(call: Any, owner: str, parameter: str) -> None:
    message = _message(lambda: call(np.random.default_rng(0)))
    assert message.startswith(f"The {parameter!r} parameter of {owner} must be small enough for ")
    assert "to fit in memory: " in message
    assert message.endswith(f"Got {HUGE} instead.")


@needs_a_memory_limit
def test_a_federation_spec_asking_for_too_many_samples_names_num_samples() -> None:
    spec = FederationSpec(dataset="mnist1d", partition="iid", num_clients=10, num_samples=HUGE)
    with pytest.raises(FedsampleError, match="'num_samples' parameter of make_mnist1d") as info:
        build_federation(spec)
    assert info.value.parameter == "num_samples"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@needs_a_memory_limit
@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["--dataset", "mnist1d", "--num-samples", str(HUGE)], "'federation.num_samples'"),
        (["--dataset", "osmd-linear", "--model", "linear", "--num-clients", str(HUGE)], "'federation.num_clients'"),
        (["--dataset", "huge.npz"], "member 'x' declares shape (1000000000000, 5)"),
        (["--dataset", "ids.csv"], "column 'y' appears twice in the header"),
        (["--dataset", "missing.csv"], "client column 'client' has a missing client id"),
    ],
)
def test_the_command_line_refuses_in_one_line_and_writes_nothing(
    argv: list[str], key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _archive(tmp_path / "huge.npz", (HUGE, 5))
    (tmp_path / "ids.csv").write_text("client,f1,y,f3,y\n1,0.5,1,0.2,5\n2,0.3,0,0.1,6\n")
    (tmp_path / "missing.csv").write_text("client,f1,y\na,0.5,1\n,0.3,0\nb,0.1,1\n")
    before = _snapshot(tmp_path)
    code, out, err = run_cli(["run", *argv, "--sampler", "md", "-q"], capsys)
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "Traceback" not in err
    assert key in err
    assert _snapshot(tmp_path) == before
