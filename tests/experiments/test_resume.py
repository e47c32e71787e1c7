"""Checkpoint and resume through the real command: a run killed with SIGKILL mid-way and restarted with
``--resume`` ends with metrics identical to an uninterrupted run (wall-clock seconds aside), and the
killed run's directory never holds a truncated file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedsample.engine import load_checkpoint
from fedsample.experiments.executors import CHECKPOINT_FILE
from fedsample.experiments.results.metrics import read_metrics

CONFIG = """
name = "killed"
seeds = 3

[federation]
dataset = "digits"
partition = "dirichlet"
num_clients = 20
alpha = 0.3

[model]
kind = "mlp"
hidden = 32

[training]
rounds = 60
num_sampled = 4
local_steps = 10
batch_size = 10
local_lr = 0.05

[server]
name = "fedadam"
lr = 0.01

[[samplers]]
name = "adaptive-osmd"

[[samplers]]
name = "clustered-similarity"

[[samplers]]
name = "md"

[run]
checkpoint_every = 5
"""

SCRIPT = Path(sys.executable).parent / "fedsample"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "run", *args], capture_output=True, text=True, timeout=600, check=False)


def _without_timing(directory: Path) -> dict[str, np.ndarray]:
    table = read_metrics(directory)
    table.pop("round_seconds")
    return table


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_a_run_killed_with_sigkill_resumes_to_identical_metrics(tmp_path: Path) -> None:
    config = tmp_path / "killed.toml"
    config.write_text(CONFIG)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    done = _run(str(config), "--out", str(reference), "-q")
    assert done.returncode == 0, done.stderr

    process = subprocess.Popen(
        [str(SCRIPT), "run", str(config), "--out", str(killed), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checkpoint = killed / CHECKPOINT_FILE
    deadline = time.monotonic() + 300
    try:
        # Kill once a checkpoint after round 10 exists: mid-way, with rounds left to run.
        while time.monotonic() < deadline and process.poll() is None:
            if checkpoint.exists() and load_checkpoint(checkpoint).rounds_done >= 10:
                break
            time.sleep(0.02)
        assert process.poll() is None, "the run finished before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    # The killed directory: a config, a readable checkpoint mid-way, no result file, nothing truncated.
    stopped_at = load_checkpoint(checkpoint).rounds_done
    assert 10 <= stopped_at < 60
    assert not (killed / "runs.json").exists()
    assert not (killed / "metrics.csv").exists()
    assert not list(killed.glob("*.tmp"))
    assert not list(killed.glob(".*.tmp"))

    resumed = _run("--resume", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    assert json.loads((killed / "runs.json").read_text())["info"]["resumed_from_round"] >= stopped_at
    assert not checkpoint.exists()
    first, second = _without_timing(reference), _without_timing(killed)
    assert first.keys() == second.keys()
    for column in first:
        np.testing.assert_array_equal(first[column], second[column], err_msg=column)
    # the final sampler states (OSMD's learned distribution, Alg. 2's representative gradients) agree too
    for state in (reference / "states").iterdir():
        assert state.read_text() == (killed / "states" / state.name).read_text()
