"""fedsample's released MIFA against the authors' own trainer (benchmarks/reference/mifa/compare_mifa.py), run
quick (12 clients, 80 rounds): the global model within 1e-9 on Bernoulli, Markov and cyclic participation.

Needs the side environment of ``benchmarks/reference/make_env_mifa.sh`` (skipped without it) and takes
about 40 s on two cores: marked slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))

pytestmark = pytest.mark.slow


def test_the_released_variant_is_the_released_trainer() -> None:
    if not (REFERENCE_DIR / "venv-mifa" / "bin" / "python").exists():
        pytest.skip("no side environment: run benchmarks/reference/make_env_mifa.sh")
    script = ROOT / "benchmarks" / "reference" / "mifa" / "compare_mifa.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("(ok)") == 3, result.stdout
