"""fedsample's default ``oort`` against FedScale 1.0's selector (``benchmarks/reference/compare_oort.py``):
every one of its 21 statistics within the harness's stated tolerance (4 standard errors of the paired
difference over 30 seeds, plus 5% of FedScale's mean for the continuous ones, plus a floor; about 1%
false failures over the 21 together for two selectors equal in distribution).

It needs the side environment of ``benchmarks/reference/make_env.sh`` (numpy 1.x and FedScale's files),
so it is marked ``slow`` and skipped where that environment is absent. About 10 s.
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
        not (REFERENCE_DIR / "venv-fedscale" / "bin" / "python").is_file()
        or not (REFERENCE_DIR / "fedscale-src" / "thirdparty" / "oort" / "oort.py").is_file(),
        reason=f"no FedScale side environment at {REFERENCE_DIR} (benchmarks/reference/make_env.sh)",
    ),
]


@pytest.mark.parametrize("durations", ["up front", "from feedback"])
def test_default_oort_matches_fedscale_on_every_statistic(durations: str) -> None:
    script = ROOT / "benchmarks" / "reference" / "compare_oort.py"
    extra = ["--no-durations"] if durations == "from feedback" else []
    done = subprocess.run(
        [sys.executable, str(script), *extra], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "21 of 21 statistics within tolerance" in done.stdout
