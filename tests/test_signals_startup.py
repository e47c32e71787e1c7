"""SIGINT and SIGTERM at any moment of ``fedsample run``, start-up included (issue 32 items 4 and 10).

The console script is started on a small config and sent the signal after a delay (counted from the
moment its handler is in place), a fraction of the time an uninterrupted run of the same config took on
this machine: the delays fall in its imports
(PyTorch's take most of a second), its config and data reading, the run directory's creation, its
training, the writing of its results and its exit, whatever the machine's speed. Which phase a delay
hits is not asserted (a busy machine moves them); what must hold at every one is:

- the process exits with 130 (SIGINT), 143 (SIGTERM) or, when the signal came too late to stop
  anything, 0; it never dies by SIGSEGV or SIGABRT (a negative status), and by the signal itself only
  in the interpreter's last instants, after a complete run (Python hands the signal back to the
  system as it finalizes);
- stderr holds at most two lines and never a traceback;
- the run directory is absent (then stderr says that nothing was written), or ``--resume`` finishes
  it with the metrics of the uninterrupted run.

A signal sent before the interpreter reaches fedsample's first line (Python's own start-up, some
20 ms) meets Python's default handling, which no program can change; so each case waits until the
console script's handler is in place before it counts the delay. Signals during the imports (the
first second) are also checked on their own, for their exact line: on the base tree, one there left
PyTorch half-imported and ended in a traceback and a SIGSEGV.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config
from fedsample.cli import main
from fedsample.experiments.runner import is_complete
from run_interrupts import assert_same_metrics, completed, handles_sigterm, running

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="watches /proc (Linux)")

SIGINT, SIGTERM = signal.SIGINT, signal.SIGTERM
CRASHES = {-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS, -signal.SIGILL, -signal.SIGFPE}


def _config(folder: Path) -> Path:
    path = folder / "swept.toml"
    tables = MD_AND_UNIFORM + "[run]\ncheckpoint_every = 2\n"
    path.write_text(digits_config(name="swept", seeds=1, rounds=6, tables=tables))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, fedsample_script: Path) -> tuple[Path, Path, float]:
    """The config, its uninterrupted run (through the console script) and the seconds that run took."""
    folder = tmp_path_factory.mktemp("reference")
    config, out = _config(folder), folder / "run"
    start = time.monotonic()
    done = subprocess.run(
        [str(fedsample_script), "run", str(config), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return config, out, time.monotonic() - start


def _signalled(script: Path, config: Path, out: Path, signum: int, delay: float) -> subprocess.CompletedProcess[str]:
    """Run ``config`` into ``out`` and send ``signum`` ``delay`` seconds after the console script's handler is
    in place (from fedsample's first line on: some 20 to 50 ms after the start)."""
    with running(script, config, out) as process:
        deadline = time.monotonic() + 60
        while process.poll() is None and not handles_sigterm(process.pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        if process.poll() is None:
            os.kill(process.pid, signum)
        return completed(process, timeout=300)


def _check(done: subprocess.CompletedProcess[str], signum: int, out: Path, reference: Path) -> None:
    status, stderr = done.returncode, done.stderr
    assert status not in CRASHES, (status, stderr)
    assert "Traceback" not in stderr, stderr
    assert len(stderr.splitlines()) <= 2, stderr
    assert done.stdout == ""
    if status == 0 or status == -signum:  # the signal came after the run finished
        assert stderr == ""
        assert is_complete(out)
    else:
        assert status == 128 + signum, (status, stderr)
        assert stderr.startswith(f"fedsample run: interrupted by {signal.Signals(signum).name} "), stderr
    if not out.exists():
        assert stderr.endswith(" before it began; nothing was written\n"), stderr
        return
    assert main(["run", "--resume", str(out), "-q"]) == 0  # (in this process: the imports are done)
    assert_same_metrics(reference, out)


# Three moments quickly, then a dense sweep of both signals over the whole run (slow).
_MOMENTS = [
    pytest.param(0.2, SIGTERM, id="early-SIGTERM"),
    pytest.param(0.5, SIGINT, id="middle-SIGINT"),
    pytest.param(0.8, SIGTERM, id="late-SIGTERM"),
] + [
    pytest.param(round(0.05 * step, 2), signum, id=f"sweep-{round(0.05 * step, 2)}-{name}", marks=pytest.mark.slow)
    for name, signum in (("SIGINT", SIGINT), ("SIGTERM", SIGTERM))
    for step in range(22)
]


@pytest.mark.parametrize(("fraction", "signum"), _MOMENTS)
def test_a_signal_at_any_moment_ends_cleanly_and_leaves_a_resumable_run(
    tmp_path: Path, fedsample_script: Path, reference: tuple[Path, Path, float], fraction: float, signum: int
) -> None:
    config, reference_run, seconds = reference
    out = tmp_path / "out"
    _check(_signalled(fedsample_script, config, out, signum, fraction * seconds), signum, out, reference_run)


@pytest.mark.parametrize(
    ("delay", "signum"),
    [(0.0, SIGINT), (0.3, SIGTERM), (0.6, SIGINT), (0.9, SIGTERM)],
    ids=["0.0s-SIGINT", "0.3s-SIGTERM", "0.6s-SIGINT", "0.9s-SIGTERM"],
)
def test_a_signal_during_the_imports_ends_cleanly(
    tmp_path: Path, fedsample_script: Path, reference: tuple[Path, Path, float], delay: float, signum: int
) -> None:
    config, reference_run, _ = reference
    out = tmp_path / "out"
    _check(_signalled(fedsample_script, config, out, signum, delay), signum, out, reference_run)
