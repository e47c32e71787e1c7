"""fedsample's policies and availability processes against IBM/fedau's released ``main.py`` and
``WorkerSampler`` (``benchmarks/reference/compare_fedau.py --quick``): every global-model trajectory
within 1e-9 of the released one, the Markov parameters exact, the Markov paths equal in law (4.5
standard errors) and the cyclic paths identical.

It needs the side environment of ``benchmarks/reference/make_env_fedau.sh`` (torch, numpy and the
released files), so it is marked ``slow`` and skipped where that environment is absent. About 15 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (REFERENCE_DIR / "venv-fedau" / "bin" / "python").is_file()
        or not (REFERENCE_DIR / "fedau-src" / "main.py").is_file(),
        reason=f"no IBM/fedau side environment at {REFERENCE_DIR} (benchmarks/reference/make_env_fedau.sh)",
    ),
]


def test_the_policies_and_processes_match_the_released_code() -> None:
    script = ROOT / "benchmarks" / "reference" / "compare_fedau.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all within tolerance" in done.stdout
