"""Optional dependencies: a command whose extra is missing prints one line naming it and exits 2.

The missing library is simulated in a fresh interpreter by ``sys.modules[NAME] = None``, which makes
``import NAME`` raise ``ModuleNotFoundError`` exactly as an absent package does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = """
import sys
sys.modules[{module!r}] = None
from fedsample.cli import main
sys.exit(main({argv!r}))
"""


def _without(module: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = _CHILD.format(module=module, argv=argv)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("module", "extra", "argv"),
    [
        ("torch", "torch", ["run", "--out", "out", "--rounds", "2"]),
        ("torch", "torch", ["run", "impact-md-vs-uniform", "--out", "out"]),
    ],
)
def test_a_missing_extra_is_one_line_and_writes_nothing(
    tmp_path: Path, module: str, extra: str, argv: list[str]
) -> None:
    result = _without(module, argv, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert f"pip install 'fedsample[{extra}]'" in result.stderr
    assert list(tmp_path.iterdir()) == []
