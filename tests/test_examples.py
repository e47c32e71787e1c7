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


def _run_example(name: str) -> str:
    """Run ``examples/<name>`` as a user would; its standard output."""
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _objectives(text: str) -> list[float]:
    return [float(line.rsplit("objective ", 1)[1].rstrip(":")) for line in text.splitlines() if "objective " in line]


def test_your_loop_fixed_example_trains_with_md_and_the_server_update() -> None:
    """examples/your_loop_fixed.py (docs/your-loop.md): md in a plain PyTorch loop, BatchNorm's buffers included."""
    out = _run_example("your_loop_fixed.py")
    objectives = _objectives(out)
    assert len(objectives) == 4, out
    assert objectives[-1] < 0.5 * objectives[0], out


def test_your_loop_learning_example_feeds_osmd_and_its_weights_do_not_sum_to_one() -> None:
    """examples/your_loop_learning.py: OSMD learns from the update norms it is given; its weights' sums
    straddle one, which the server update handles and an average of the client models would not."""
    out = _run_example("your_loop_learning.py")
    low, high = (float(x) for x in out.split("weights summed to ", 1)[1].split(" over", 1)[0].split(" .. "))
    assert low < 0.9 < 1.1 < high, out
    smallest, largest = (float(x) for x in out.split("learned probabilities: ", 1)[1].split(" (", 1)[0].split(" .. "))
    assert smallest < 0.05 < largest, out  # moved away from uniform (1/20)
    assert _objectives(out)[-1] < 0.1, out


def test_your_loop_two_phase_example_runs_power_of_choice_rounds() -> None:
    """examples/your_loop_two_phase.py: pow-d's candidates report their losses before each draw."""
    out = _run_example("your_loop_two_phase.py")
    objectives = _objectives(out)
    assert len(objectives) == 3, out
    assert objectives[-1] < objectives[0], out
    assert out.count("kept the candidates of highest loss") == 3, out


def test_the_loop_page_quotes_the_examples() -> None:
    """docs/your-loop.md: every excerpt marked ``<!-- from examples/X.py -->`` is in that script, word for word."""
    page = (ROOT / "docs" / "your-loop.md").read_text()
    marker = "<!-- from "
    excerpts = page.split(marker)[1:]
    assert len(excerpts) == 3
    for excerpt in excerpts:
        name, rest = excerpt.split(" -->\n```python\n", 1)
        code = rest.split("\n```", 1)[0]
        assert code in (ROOT / name).read_text(), f"docs/your-loop.md's excerpt of {name} is not in the script"
