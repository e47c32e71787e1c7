"""SIGINT (Ctrl-C) and SIGTERM during ``fedsample run`` (issue 26 item 5).

Each case starts the console script on a small config and sends the signal at a chosen point, found by
watching the process (its SIGTERM handler installed, read from ``/proc/PID/status``) or the run
directory (a checkpoint written), not by sleeping: before the run directory exists, between two
checkpoints, and right after one. The run must end in one line on stderr naming what is saved and the
exact ``--resume`` command, with exit status 130 (SIGINT) or 143 (SIGTERM), no traceback, no lock and
no temporary file left; ``--resume`` must then finish with the metrics of an uninterrupted run.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config
from fedsample.cli import main
from fedsample.engine import load_checkpoint
from fedsample.experiments.config.reading import load_config
from fedsample.experiments.executors import CHECKPOINT_FILE
from fedsample.experiments.rundir.directory import LOCK_FILE
from fedsample.experiments.runner import run_experiment
from run_interrupts import assert_same_metrics, handles_sigterm, quiet_progress

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="watches /proc (Linux)")

ROUNDS = 40
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _config(tmp_path: Path, checkpoint_every: int) -> Path:
    path = tmp_path / f"every{checkpoint_every}.toml"
    tables = MD_AND_UNIFORM + f"[run]\ncheckpoint_every = {checkpoint_every}\n"
    path.write_text(digits_config(name="interrupted", seeds=1, rounds=ROUNDS, tables=tables))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run (checkpoints change no metric, so one serves every case)."""
    folder = tmp_path_factory.mktemp("reference")
    out = folder / "run"
    run_experiment(load_config(_config(folder, 0)), out, progress=quiet_progress())
    return out


def _checkpointed(out: Path, rounds: int) -> bool:
    path = out / CHECKPOINT_FILE
    return path.exists() and load_checkpoint(path).rounds_done >= rounds


def _interrupt(script: Path, config: Path, out: Path, signum: int, ready: str) -> subprocess.CompletedProcess[str]:
    """Run ``config`` into ``out`` and send ``signum`` once ``ready``: ``"started"`` (the handler is in
    place, the run directory not yet made) or ``"checkpoint"`` (the checkpoint after round 3 is written)."""
    process = subprocess.Popen(
        [str(script), "run", str(config), "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            if handles_sigterm(process.pid) if ready == "started" else _checkpointed(out, 3):
                break
            time.sleep(0.005)
        assert process.poll() is None, "the run ended before it could be interrupted"
        if ready == "started":
            assert not out.exists()
        os.kill(process.pid, signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_before_the_run_directory_exists_writes_nothing(
    tmp_path: Path, fedsample_script: Path, signum: int
) -> None:
    out = tmp_path / "out"
    done = _interrupt(fedsample_script, _config(tmp_path, 1), out, signum, "started")
    name = signal.Signals(signum).name
    assert (done.returncode, done.stdout) == (EXIT_STATUS[signum], "")
    assert done.stderr == f"fedsample run: interrupted by {name} before it began; nothing was written\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("signum", "checkpoint_every"),
    [
        pytest.param(signal.SIGINT, 4, id="SIGINT-between-checkpoints"),
        pytest.param(signal.SIGTERM, 1, id="SIGTERM-right-after-a-checkpoint"),
        pytest.param(signal.SIGTERM, 4, id="SIGTERM-between-checkpoints", marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, 1, id="SIGINT-right-after-a-checkpoint", marks=pytest.mark.slow),
    ],
)
def test_an_interrupted_run_says_what_is_saved_and_resumes_to_identical_metrics(
    tmp_path: Path, fedsample_script: Path, reference: Path, signum: int, checkpoint_every: int
) -> None:
    out = tmp_path / "out"
    done = _interrupt(fedsample_script, _config(tmp_path, checkpoint_every), out, signum, "checkpoint")
    assert (done.returncode, done.stdout) == (EXIT_STATUS[signum], "")
    saved = load_checkpoint(out / CHECKPOINT_FILE).rounds_done
    line = re.fullmatch(
        rf"fedsample run: interrupted by {signal.Signals(signum).name} after (\d+) of {ROUNDS} rounds; the "
        rf"checkpoint after round {saved} of {ROUNDS} is saved: resume with `(.*)`\n",
        done.stderr,
    )
    assert line is not None, done.stderr
    assert saved <= int(line.group(1)) <= ROUNDS  # all rounds only if the test was kept waiting (a busy machine)
    assert saved % checkpoint_every == 0
    # The directory stays resumable: no lock, no temporary file, not marked complete.
    assert not (out / LOCK_FILE).exists()
    assert not [path for path in out.rglob("*") if path.name.endswith(".tmp")]
    assert not (out / "runs.json").exists() or '"complete": false' in (out / "runs.json").read_text()
    command = shlex.split(line.group(2))
    assert command == ["fedsample", "run", "--resume", str(out)]
    assert main([*command[1:], "-q"]) == 0  # the command as printed (in this process: the imports are done)
    assert_same_metrics(reference, out)
    assert not (out / CHECKPOINT_FILE).exists()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_on_ray_interrupted_says_its_saved_tasks_and_resumes_with_ray(
    tmp_path: Path, fedsample_script: Path, reference: Path, signum: int
) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out"
    process = subprocess.Popen(
        [str(fedsample_script), "run", str(_config(tmp_path, 0)), "--out", str(out), "--ray", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline and not list(out.glob("tasks/task-*.npz")):
            time.sleep(0.01)
        assert process.poll() is None, "the run ended before it could be interrupted"
        os.kill(process.pid, signum)  # ray.init's own SIGTERM handler would exit on the spot
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == EXIT_STATUS[signum], stderr
    assert "Traceback" not in stderr
    last = stderr.splitlines()[-1]
    saved = r"[12] finished Ray tasks? (is|are) saved"
    resume = f"`fedsample run --resume {out} --ray`"
    name = signal.Signals(signum).name
    line = rf"fedsample run: interrupted by {name} after \d+ of \d+ rounds; {saved}: resume with {resume}"
    assert re.fullmatch(line, last), last
    assert not (out / LOCK_FILE).exists()
    resumed = subprocess.run(
        [str(fedsample_script), "run", "--resume", str(out), "--ray", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert_same_metrics(reference, out)
