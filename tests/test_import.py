"""``import fedsample`` stays light: no heavy optional module is loaded with the package.

The time itself is measured by ``benchmarks/bench_startup.py`` (a ratio against ``import numpy,
scipy``), not here; this test pins the cause of a slow start, the modules imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy.cluster", "scipy.spatial", "torch", "matplotlib", "pyarrow", "sklearn", "flwr", "ray")


def test_import_fedsample_loads_no_heavy_module() -> None:
    code = f"import json, sys, fedsample; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(result.stdout) == []


def test_the_similarity_sampler_still_clusters_after_a_light_import() -> None:
    """scipy.cluster is imported where Ward's linkage is computed."""
    code = (
        "import numpy as np; from fedsample.samplers.similarity.sampler import ward_linkage; "
        "print(ward_linkage(np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [4.0, 3.0, 0.0]])).shape)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "(2, 4)"
