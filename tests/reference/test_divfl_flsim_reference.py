"""The reference harness of DivFL and FLSim's selectors (benchmarks/reference/DIVFL_FLSIM.md), run
quick (10 seeds): fedsample's defaults within tolerance of the released code.

Needs the side environments of ``benchmarks/reference/make_env_selectors.sh`` (skipped without them)
and takes about 15 s: marked slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["divfl", "flsim"])
def test_the_defaults_are_within_tolerance_of_the_released_selectors(name: str, tmp_path: Path) -> None:
    if not (REFERENCE_DIR / f"venv-{name}" / "bin" / "python").exists():
        pytest.skip(f"no side environment: run benchmarks/reference/make_env_selectors.sh {name}")
    script = ROOT / "benchmarks" / "reference" / f"compare_{name}.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick", "--json", str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
