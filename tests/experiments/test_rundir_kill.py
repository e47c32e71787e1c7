"""A run killed at chosen moments of its final writes leaves a directory that later commands read right.

Each test runs ``run_experiment`` in a subprocess that sends itself ``SIGKILL`` when a chosen
function is first called (a kill at a fixed point, not a race), then checks the directory the kill
left: ``--overwrite`` must accept it (every entry is listed in the manifest), and the overwritten
or resumed run must give the uninterrupted run's metrics.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config
from fedsample.experiments.config.reading import load_config
from fedsample.experiments.executors import CHECKPOINT_FILE
from fedsample.experiments.results.report import rebuild_plots, write_report
from fedsample.experiments.rundir.directory import LOCK_FILE, check_new_run_directory
from fedsample.experiments.runner import RUNS_FILE, run_experiment
from fedsample.experiments.suite import run_suite
from run_interrupts import assert_same_metrics, quiet_progress

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")

CONFIG = digits_config(name="killed", seeds=1, rounds=4)


def _kill_at(config: Path, out: Path, module: str, function: str, *, resume: bool = False) -> None:
    """Run ``config`` into ``out`` in a subprocess that SIGKILLs itself when ``module.function`` is called."""
    script = textwrap.dedent(
        f"""
        import importlib, os, signal
        from fedsample.experiments.config.reading import load_config
        from fedsample.experiments.runner import run_experiment
        from fedsample.experiments.progress import ProgressLine
        import io

        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

        setattr(importlib.import_module({module!r}), {function!r}, die)
        resume = {resume!r}
        config = None if resume else load_config({str(config)!r})
        run_experiment(config, {str(out)!r}, resume=resume, progress=ProgressLine(stream=io.StringIO()))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr


@pytest.mark.parametrize(
    ("module", "function", "folder"),
    [
        ("fedsample.samplers.persistence", "sampler_to_dict", "states"),  # the first sampler state
        ("fedsample.experiments.results.plots", "_figure", "plots"),  # the first figure
    ],
)
def test_a_kill_before_a_folders_first_file_leaves_no_unlisted_folder(
    tmp_path: Path, module: str, function: str, folder: str
) -> None:
    config = tmp_path / "killed.toml"
    config.write_text(CONFIG)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    run_experiment(load_config(config), reference, progress=quiet_progress())
    _kill_at(config, killed, module, function)
    # A folder is made by its first file's write, once the manifest lists it: none was made yet.
    assert not (killed / folder).exists()
    check_new_run_directory(killed, overwrite=True)  # nothing the manifest does not list
    run_experiment(load_config(config), killed, overwrite=True, progress=quiet_progress())
    assert_same_metrics(reference, killed)


@pytest.mark.parametrize("command", ["report", "plot"])
def test_report_and_plot_list_what_they_write_in_a_killed_runs_manifest(tmp_path: Path, command: str) -> None:
    config = tmp_path / "killed.toml"
    config.write_text(CONFIG)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    run_experiment(load_config(config), reference, progress=quiet_progress())
    # Killed once the metrics are written, before the summary: `fedsample report` or `plot` can finish it.
    _kill_at(config, killed, "fedsample.experiments.results.report", "write_summary")
    assert (killed / "metrics.csv").is_file()
    assert not (killed / "summary.csv").exists()
    written = write_report(killed) if command == "report" else rebuild_plots(killed)
    assert written
    check_new_run_directory(killed, overwrite=True)  # what the command wrote is listed
    run_experiment(load_config(config), killed, overwrite=True, progress=quiet_progress())
    assert_same_metrics(reference, killed)


def test_resuming_a_run_killed_after_it_was_marked_complete_removes_its_checkpoint_and_lock(tmp_path: Path) -> None:
    config = tmp_path / "killed.toml"
    config.write_text(
        digits_config(name="killed", seeds=1, rounds=4, tables=MD_AND_UNIFORM + "[run]\ncheckpoint_every = 1\n")
    )
    killed = tmp_path / "killed"
    _kill_at(config, killed, "fedsample.experiments.runner", "discard_intermediate_files")
    assert json.loads((killed / RUNS_FILE).read_text())["complete"] is True
    assert (killed / CHECKPOINT_FILE).is_file()
    assert (killed / LOCK_FILE).is_file()
    outcome = run_experiment(None, killed, resume=True, progress=quiet_progress())
    assert outcome.results == []  # nothing was run again
    assert not (killed / CHECKPOINT_FILE).exists()
    assert not (killed / LOCK_FILE).exists()
    check_new_run_directory(killed, overwrite=True)


SUITE_SCRIPT = """
import dataclasses, io, os, signal, sys
import fedsample.experiments.suite as suite
from fedsample.experiments.config.reading import load_config
from fedsample.experiments.progress import ProgressLine

original, calls = suite.run_experiment, []

def second_part_dies(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # the second part is about to begin
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

if sys.argv[3] == "kill":
    suite.run_experiment = second_part_dies
config = load_config(sys.argv[1])
parts = [("a", config), ("b", dataclasses.replace(config, seeds=(1,)))]
suite.run_suite(parts, suite.Path(sys.argv[2]), progress=ProgressLine(stream=io.StringIO()), preset="two")
"""


def test_a_suite_killed_before_a_part_began_is_resumed_to_identical_metrics(tmp_path: Path) -> None:
    config = tmp_path / "killed.toml"
    config.write_text(CONFIG)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    for out, mode in ((reference, "run"), (killed, "kill")):
        done = subprocess.run(
            [sys.executable, "-c", SUITE_SCRIPT, str(config), str(out), mode],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == (0 if mode == "run" else -signal.SIGKILL), done.stderr
    assert not (killed / "b").exists()
    run_suite(None, killed, resume=True, progress=quiet_progress())
    for part in ("a", "b"):
        assert_same_metrics(reference / part, killed / part)
    assert not (killed / LOCK_FILE).exists()
