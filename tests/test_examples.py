"""The examples the docs point to run as users run them, and write what the docs say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_your_model_example_writes_a_run_directory(tmp_path: Path) -> None:
    """examples/your_model.py (docs/your-model.md): a CNN with BatchNorm and dropout on numpy arrays,
    three samplers x two seeds, into a run directory that the report command reads."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "your_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert {"config.toml", "metrics.csv", "summary.md", "report.md", "runs.json", "plots", "states"} <= {
        p.name for p in out.iterdir()
    }
    runs = json.loads((out / "runs.json").read_text())
    assert runs["complete"] is True
    assert sorted({run["label"] for run in runs["runs"]}) == ["clustered-size", "md", "uniform"]
    assert sorted({run["seed"] for run in runs["runs"]}) == [0, 1]
    assert runs["info"]["model"] == "SmallCNN"
    assert "final test accuracy" in done.stdout
    # The states hold each run's final sampler state; the metrics, the CNN's accuracy per evaluation.
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "test_accuracy" in header
