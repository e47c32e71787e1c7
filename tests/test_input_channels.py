"""Bounded input channels (issue 11 item 6): each bad file or flag is one FedsampleError line, never a traceback.

Availability traces, table and IDX loaders through the Python API; integer flags and the
``stats`` help through the command line.
"""

from __future__ import annotations

import importlib
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_cli
from fedsample import FedsampleError
from fedsample.data.loaders import load_table, read_idx
from fedsample.data.loaders.table import MAX_CLASS_ID
from fedsample.participation.availability import load_availability_trace


def _one_line(error: pytest.ExceptionInfo[FedsampleError], *words: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


# --- availability traces --------------------------------------------------------------------------

TRACES = {
    "binary": (b"client,start,end\n\xff\xfe\x00\x81\n", "UTF-8 CSV text file"),
    "client id 10^20": (b"client,start,end\n100000000000000000000,0,3\n", "below 2**62"),
    "field over csv's limit": (b"client,start,end\n" + b"1" * 140_000 + b",0,3\n", "field larger than field limit"),
    "NUL byte": (b"client,start,end\n0,0\x00,3\n", "three integers per row"),
}


@pytest.mark.parametrize("case", list(TRACES))
def test_bad_trace_is_one_line(case: str, tmp_path: Path) -> None:
    content, words = TRACES[case]
    path = tmp_path / "trace.csv"
    path.write_bytes(content)
    with pytest.raises(FedsampleError) as caught:
        load_availability_trace(path)
    _one_line(caught, "'availability trace'", str(path), words)


def test_bad_trace_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(TRACES["client id 10^20"][0])
    code, out, err = run_cli(["stats", "--sizes", "1,2,3", "-m", "1", "--availability-trace", str(path)], capsys)
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "below 2**62" in err


# --- table and IDX loaders ------------------------------------------------------------------------


def test_npz_member_that_is_not_npy(tmp_path: Path) -> None:
    path = tmp_path / "table.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("client.txt", "0,1,2")
    with pytest.raises(FedsampleError) as caught:
        load_table(path, client_column="client", target_column="y")
    _one_line(caught, "member 'client.txt' is not a .npy array")


def test_truncated_npz(tmp_path: Path) -> None:
    path = tmp_path / "table.npz"
    np.savez(path, client=np.array([0, 1]), y=np.array([0, 1]), x=np.array([0.5, 1.5]))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FedsampleError) as caught:
        load_table(path, client_column="client", target_column="y")
    _one_line(caught, "not a readable NPZ archive")


def test_csv_class_id_beyond_the_bound(tmp_path: Path) -> None:
    """A class id of 10^18 once asked for 10^18 classes; ids must stay below MAX_CLASS_ID."""
    path = tmp_path / "table.csv"
    path.write_text(f"client,y,x\n0,0,1.0\n1,{10**18},2.0\n")
    with pytest.raises(FedsampleError) as caught:
        load_table(path, client_column="client", target_column="y")
    _one_line(caught, "'y'", f"below {MAX_CLASS_ID}", "1000000000000000000")
    path.write_text(f"client,y,x\n0,0,1.0\n1,{MAX_CLASS_ID - 1},2.0\n")
    assert load_table(path, client_column="client", target_column="y").num_classes == MAX_CLASS_ID


def test_idx_dimensions_whose_product_overflows_int64(tmp_path: Path) -> None:
    """(2^16)^4 float64 values: the int64 product wrapped to 0 bytes, which matched an empty payload."""
    path = tmp_path / "images-idx4-ubyte"
    path.write_bytes(bytes([0, 0, 0x0E, 4]) + struct.pack(">IIII", *[2**16] * 4))
    with pytest.raises(FedsampleError) as caught:
        read_idx(path)
    _one_line(caught, "truncated: 0 data bytes", str(8 * 2**64))
    assert "-" not in str(caught.value).split("need")[1]


# --- integer flags --------------------------------------------------------------------------------

NON_ASCII_INTEGERS = ["\u0663", "\uff13", "1_0", "\u0967\u0966", "-\u0663"]


@pytest.mark.parametrize("value", NON_ASCII_INTEGERS)
@pytest.mark.parametrize(
    "argv",
    [
        ["stats", "--sizes", "1,2,3,4", "-m"],
        ["stats", "--sizes", "1,2,3,4", "--seed"],
        ["stats", "--sizes", "1,2,3,4", "--monte-carlo"],
        ["sample", "md", "--sizes", "1,2,3,4", "--rounds"],
        ["run", "quick", "--rounds"],
    ],
)
def test_integer_flags_take_ascii_digits_only(
    argv: list[str], value: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like --sizes, every integer flag refuses other scripts' digits and underscores."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli([*argv, value], capsys)
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "invalid int value" in err
    assert list(tmp_path.iterdir()) == []
    code, _, err = run_cli(["stats", "--sizes", f"1,{value},3", "-m", "1"], capsys)
    assert code == 2


def test_ascii_integer_flags_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["sample", "md", "--sizes", "1,2,3,4", "-m", "+2", "--rounds", " 2", "--seed", "7"], capsys
    )
    assert (code, err) == (0, "")
    assert out.count("round") == 2


def test_stats_help_names_importable_paths(capsys: pytest.CaptureFixture[str]) -> None:
    """The --sampler-state help named fedsample.samplers.save_sampler, which does not exist."""
    code, out, _ = run_cli(["stats", "--help"], capsys)
    assert code == 0
    paths = re.findall(r"fedsample(?:\.\w+)+", " ".join(out.split()))
    assert paths
    for dotted in paths:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted
