"""A SIGKILL that lands while a checkpoint is being written (issue 11 item 8).

The model is large (about 2.6 million parameters, so each checkpoint is tens of MB) and a
checkpoint is written every round, so the write takes long enough to be caught: the test watches
the run directory and kills the run the moment a ``.checkpoint*.tmp`` file (fedsample._io's
atomic write in progress) appears. The killed directory must hold that half-written temporary
file and no result; ``--resume`` must then finish with metrics identical to an uninterrupted run
(wall-clock seconds aside) and leave no temporary file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import digits_config, run_script
from run_interrupts import assert_same_metrics

CONFIG = digits_config(
    name="big",
    seeds=1,
    hidden=40000,
    rounds=30,
    local_lr=0.05,
    tables="""
[server]
name = "fedadam"
lr = 0.01

[[samplers]]
name = "md"

[run]
checkpoint_every = 1
""",
)


def _writing_checkpoint(directory: Path) -> bool:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return False
    return any(name.startswith(".checkpoint") and name.endswith(".tmp") for name in names)


def _kill_during_a_checkpoint_write(command: list[str], out: Path) -> bool:
    """Start the run and SIGKILL it as soon as a checkpoint's temporary file appears."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline:
            if _writing_checkpoint(out):
                os.kill(process.pid, signal.SIGKILL)
                break
    finally:
        if process.poll() is None and not _writing_checkpoint(out):
            process.kill()
        process.wait()
    return process.returncode == -signal.SIGKILL and _writing_checkpoint(out)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_a_kill_during_a_checkpoint_write_resumes_to_identical_metrics(tmp_path: Path, fedsample_script: Path) -> None:
    config = tmp_path / "big.toml"
    config.write_text(CONFIG)
    reference = tmp_path / "reference"
    finished = run_script(fedsample_script, "run", str(config), "-o", str(reference), "-q", timeout=600)
    assert finished.returncode == 0, finished.stderr
    # A kill can miss the write's window (the run may be between writes); a few tries catch one.
    for attempt in range(5):
        killed = tmp_path / f"killed-{attempt}"
        command = [str(fedsample_script), "run", str(config), "-o", str(killed), "-q"]
        if _kill_during_a_checkpoint_write(command, killed):
            break
    else:
        pytest.fail("no kill landed during a checkpoint write in 5 tries")
    assert not (killed / "runs.json").exists()
    assert not (killed / "metrics.csv").exists()
    resumed = run_script(fedsample_script, "run", "--resume", str(killed), "-q", timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert [path.name for path in killed.rglob("*") if path.name.endswith(".tmp")] == []
    assert_same_metrics(reference, killed)
