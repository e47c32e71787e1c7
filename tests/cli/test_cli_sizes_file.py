"""``--sizes-file``: the vectorised reader accepts what the per-line rule accepts and refuses the rest.

Each refusal is one line on stderr naming ``'--sizes-file'``, with exit status 2; reading stops at
``MAX_SIZES_FILE_BYTES`` so an endless file (``/dev/zero``) is refused at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_cli
from fedsample.cli import _inputs


def _sizes(path: Path, content: bytes) -> np.ndarray:
    path.write_bytes(content)
    return _inputs._sizes_from_file(str(path))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"10\n20\n30\n", [10, 20, 30]),
        (b"  10  \r\n+20\n\n\n30", [10, 20, 30]),  # blanks, CRLF, a leading '+', no final newline
        (b"# header\n5 # five\n#\n7\n", [5, 7]),
        (b"007\n", [7]),
        (b"9223372036854775807\n", [2**63 - 1]),
    ],
)
def test_valid_files_are_read_exactly(tmp_path: Path, content: bytes, expected: list[int]) -> None:
    assert _sizes(tmp_path / "sizes.txt", content).tolist() == expected


def test_large_file_matches_the_reference_parse(tmp_path: Path) -> None:
    """10^5 random sizes with comments and blanks read back exactly as numpy wrote them."""
    sizes = np.random.default_rng(0).integers(1, 10**9, size=100_000)
    lines = [f"{value}  # client {i}" if i % 7 == 0 else str(value) for i, value in enumerate(sizes)]
    assert _sizes(tmp_path / "sizes.txt", ("\n".join(lines) + "\n\n").encode()).tolist() == sizes.tolist()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"10\n20 30\n", "line 2"),  # two numbers on one line
        (b"20 30\n40 50\n", "line 1"),  # two columns throughout
        (b"3 4\n", "'3 4' on line 1"),  # one line of two numbers is not two sizes
        (b"10\n0\n", "'0' on line 2"),
        (b"10\n-5\n", "'-5' on line 2"),
        (b"1+2\n", "line 1"),
        (b"+\n", "line 1"),
        (b"++4\n", "line 1"),
        (b"10\n3.5\n", "'3.5' on line 2"),
        ("12\n\u0663\n".encode(), "line 2"),  # ARABIC-INDIC DIGIT THREE: ASCII digits only, as --sizes
        (b"\x00\x01\xff\n", "line 1"),  # binary
        (b"# only a comment\n\n", "no sizes"),
        (b"", "no sizes"),
        (b"99999999999999999999999\n", "below 2**63"),
    ],
)
def test_bad_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, fragment: str
) -> None:
    path = tmp_path / "sizes.txt"
    path.write_bytes(content)
    code, out, err = run_cli(["stats", "--sizes-file", str(path), "-m", "1"], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "'--sizes-file'" in err
    assert fragment in err


def test_reading_stops_at_the_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file over the cap is refused without being read whole; at the cap it is read."""
    monkeypatch.setattr(_inputs, "MAX_SIZES_FILE_BYTES", 8)
    path = tmp_path / "sizes.txt"
    path.write_bytes(b"1\n2\n3\n44\n")  # 9 bytes
    code, _, err = run_cli(["stats", "--sizes-file", str(path), "-m", "1"], capsys)
    assert code == 2
    assert "at most 8 bytes" in err
    path.write_bytes(b"1\n2\n3\n4\n")  # 8 bytes
    assert _inputs._sizes_from_file(str(path)).tolist() == [1, 2, 3, 4]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["stats", "--sizes-file", "/dev/zero", "-m", "1"], capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert f"at most {_inputs.MAX_SIZES_FILE_BYTES} bytes" in err


def test_a_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["stats", "--sizes-file", str(tmp_path), "-m", "1"], capsys)
    assert code == 2
    assert "'--sizes-file'" in err
    assert err.count("\n") == 1
