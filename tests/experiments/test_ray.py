"""Runs as Ray tasks on a local Ray instance (2 CPUs): the run directory equals a local run's, file by
file (the wall-clock seconds aside); resume keeps finished tasks; a task whose worker dies is retried,
and one that fails on every attempt ends in one line; the CLI's one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from run_directories import assert_same_run_directory

ray = pytest.importorskip("ray")

from fedsample.cli import main  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.experiments.build import build_experiment  # noqa: E402
from fedsample.experiments.config import load_config  # noqa: E402
from fedsample.experiments.distributed import (  # noqa: E402
    TASKS_DIR,
    RayOptions,
    _check_reachable,
    _run_task,
    _save_task,
    _task_file,
)
from fedsample.experiments.executors import CHECKPOINT_FILE, RayExecutor  # noqa: E402
from fedsample.experiments.runner import run_experiment  # noqa: E402

# 30 clients, some with fewer than B = 60 samples (padded batches of several widths), and two
# samplers that learn from their feedback (OSMD, Alg. 2). Before the engine made a run's numbers
# independent of the runs batched with it, 5 of these 6 runs differed in their last bits alone.
CONFIG = """
name = "ray-tiny"
seeds = 2

[federation]
dataset = "digits"
partition = "dirichlet"
num_clients = 30
alpha = 0.5

[model]
kind = "mlp"
hidden = 16

[training]
rounds = 4
num_sampled = 3
local_steps = 2
batch_size = 60
local_lr = 0.1

[[samplers]]
name = "md"

[[samplers]]
name = "adaptive-osmd"

[[samplers]]
name = "clustered-similarity"

[baselines]
centralized = true
"""

SCRIPT = Path(sys.executable).parent / "fedsample"

MD_AND_UNIFORM = """
[[samplers]]
name = "md"

[[samplers]]
name = "uniform"
"""
MD_ONLY = """
[[samplers]]
name = "md"
"""


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # a tip about Ray's future defaults
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "ray-tiny.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def local_run(config_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("local") / "run"
    assert main(["run", str(config_file), "--out", str(directory), "-q"]) == 0
    return directory


def test_a_run_on_ray_writes_the_local_run_directory(
    ray_instance: None, config_file: Path, local_run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``fedsample run CONFIG --ray``: one task per sampler x seed (plus the baseline's seeds), same files."""
    directory = tmp_path / "ray"
    assert main(["run", str(config_file), "--out", str(directory), "--ray"]) == 0
    err = capfd.readouterr().err
    assert "8 runs on Ray (8 tasks): 32/32 rounds" in err
    assert not (directory / TASKS_DIR).exists()
    assert json.loads((directory / "runs.json").read_text())["complete"] is True
    assert_same_run_directory(local_run, directory)


def test_runs_grouped_in_tasks_resume_from_the_finished_tasks(
    ray_instance: None, config_file: Path, local_run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Tasks of 4 runs; a directory interrupted after one task (its file saved, and another task's file
    from a split into tasks of 1 run) resumes with ``--resume --ray``: the finished task is not run
    again, the other file's task runs, and the files are the local run's."""
    config = load_config(config_file)
    directory = tmp_path / "interrupted"
    directory.mkdir()
    (directory / "config.toml").write_text((local_run / "config.toml").read_text())
    tasks = directory / TASKS_DIR
    tasks.mkdir()
    key = (False, [0, 1, 2, 3])
    states = [run.state for run in build_experiment(config).runs]  # what the driver sends
    results = _run_task(config, states, key[1], False)
    _save_task(_task_file(directory, 0), key, results)
    _save_task(_task_file(directory, 1), (False, [1]), results[1:2])
    outcome = run_experiment(None, directory, resume=True, executor=RayExecutor(RayOptions(runs_per_task=4)))
    assert "resuming" in capfd.readouterr().err
    assert [r.history.label for r in outcome.results] == ["md"] * 2 + ["adaptive-osmd"] * 2 + [
        "clustered-similarity"
    ] * 2 + ["centralized"] * 2
    # The test wrote config.toml and the task files itself, so the manifest does not list them.
    assert_same_run_directory(local_run, directory, manifests=False)
    # a complete run has nothing left to resume
    assert main(["run", "--resume", str(directory), "--ray", "-q"]) == 0


def test_a_suite_runs_on_ray(ray_instance: None, tmp_path: Path) -> None:
    """A preset of several parts: every part is a run directory, and the index is written."""
    directory = tmp_path / "suite"
    args = ["run", "osmd-linear", "--ray", "--rounds", "3", "--seeds", "1", "--out", str(directory), "-q"]
    assert main(args) == 0
    parts = json.loads((directory / "suite.json").read_text())["parts"]
    assert len(parts) == 3
    for part in parts:
        assert json.loads((directory / part / "runs.json").read_text())["complete"] is True
    assert (directory / "report.md").is_file()


@pytest.mark.parametrize(("name", "expected"), [(CHECKPOINT_FILE, "without --ray"), ("checkpoint.pkl", "pickle")])
def test_ray_refuses_to_resume_a_local_checkpoint(
    ray_instance: None, local_run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str, expected: str
) -> None:
    """A local run's checkpoint is resumed without Ray; an old pickled one is never read at all."""
    directory = tmp_path / "local-checkpoint"
    directory.mkdir()
    (directory / "config.toml").write_text((local_run / "config.toml").read_text())
    (directory / name).write_bytes(b"a local run's checkpoint")
    assert main(["run", "--resume", str(directory), "--ray"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert expected in err


def test_ray_options_are_checked() -> None:
    with pytest.raises(FedsampleError, match="runs_per_task"):
        RayOptions(runs_per_task=0)


def _cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{prelude}import sys; from fedsample.cli import main; raise SystemExit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "run", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_an_unreachable_address_is_one_line(config_file: Path, tmp_path: Path) -> None:
    """The real command with a cluster address nobody listens on: one line, exit 2, nothing written."""
    done = _cli(str(config_file), "--out", str(tmp_path / "run"), "--ray", "ray://127.0.0.1:1")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert "'ray://127.0.0.1:1', which cannot be reached" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("address", "reason"), [("127.0.0.1:1", "cannot be reached"), ("nowhere", "not HOST:PORT"), ("ray://:5", "not")]
)
def test_addresses_are_checked_before_ray_tries_them(address: str, reason: str) -> None:
    """HOST:PORT and ray:// addresses fail fast (Ray itself retries for a long time)."""
    with pytest.raises(FedsampleError, match=reason) as error:
        _check_reachable(address)
    assert error.value.parameter == "--ray"
    _check_reachable("auto")  # left to Ray, which answers at once


def test_missing_ray_names_the_extra(config_file: Path, tmp_path: Path) -> None:
    """``import ray`` fails: one line naming the extra, and nothing written."""
    done = _cli(
        str(config_file), "--out", str(tmp_path / "run"), "--ray", prelude="import sys; sys.modules['ray'] = None; "
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert "fedsample[ray]" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_cli_passes_the_address(monkeypatch: pytest.MonkeyPatch, config_file: Path, tmp_path: Path) -> None:
    """``--ray PRESET`` reads the preset as the target; ``--ray=ADDRESS`` reaches the runner."""
    seen: list[Any] = []

    def fake_suite(suite: Any, directory: Path, **kwargs: Any) -> Any:
        seen.append((suite, kwargs["executor"]))
        raise FedsampleError("stop here")

    monkeypatch.setattr("fedsample.experiments.suite.run_suite", fake_suite)
    monkeypatch.setattr("fedsample.experiments.distributed.connect", lambda address: False)
    assert main(["run", "--ray", str(config_file), "--out", str(tmp_path / "a"), "-q"]) == 2
    assert seen[-1][1] == RayExecutor(RayOptions(address=None))
    assert seen[-1][0][0][1].name == "ray-tiny"
    assert main(["run", str(config_file), "--ray=auto", "--out", str(tmp_path / "b"), "-q"]) == 2
    assert seen[-1][1] == RayExecutor(RayOptions(address="auto"))


# A model factory that crashes the Ray worker building it (the driver builds the model too, and lives):
# with the marker "crash-once" beside it, the one worker that removes the marker dies; with "crash-always",
# every worker dies. Each test writes it under its own module name (Python caches modules by name).
CRASHING_FACTORY = """
import os
import sys
from pathlib import Path

from torch import nn

ONCE = Path(__file__).with_name("crash-once")
ALWAYS = Path(__file__).with_name("crash-always")


def make(width=8):
    if sys.argv[0].endswith("default_worker.py"):  # a Ray worker, not the driver
        if ALWAYS.exists():
            os._exit(1)
        try:
            ONCE.unlink()
        except FileNotFoundError:
            pass
        else:
            os._exit(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10))
"""


def _crashing_config(folder: Path, module: str, samplers: str) -> Path:
    folder.mkdir()
    (folder / f"{module}.py").write_text(CRASHING_FACTORY)
    config = folder / "crashing.toml"
    config.write_text(
        f"""
name = "crashing"
seeds = 1

[federation]
dataset = "digits"
partition = "iid"
num_clients = 8

[model]
factory = "{module}:make"

[training]
rounds = 2
num_sampled = 3
local_steps = 2
batch_size = 8
threads = 1
{samplers}"""
    )
    return config


def test_a_task_whose_worker_is_killed_is_retried_and_the_run_equals_a_local_one(
    ray_instance: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Two tasks; the first worker that builds the model dies mid-task (os._exit): its task runs again
    (``max_retries``), and the run directory is the local run's."""
    config = _crashing_config(tmp_path / "models", "fedsample_test_ray_crash_once", MD_AND_UNIFORM)
    local, distributed = tmp_path / "local", tmp_path / "ray"
    assert main(["run", str(config), "--out", str(local), "-q"]) == 0
    (config.parent / "crash-once").write_text("")
    assert main(["run", str(config), "--out", str(distributed), "-q", "--ray"]) == 0, capfd.readouterr().err
    assert not (config.parent / "crash-once").exists()  # a worker died on it
    assert_same_run_directory(local, distributed)


def test_a_task_that_fails_on_every_attempt_ends_in_one_line_and_resume_completes_it(
    ray_instance: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every worker building the model dies: after its retries the task is named in one line (its run,
    label and seed) with the command that completes the run, which it then does."""
    config = _crashing_config(tmp_path / "models", "fedsample_test_ray_crash_always", MD_ONLY)
    directory = tmp_path / "ray"
    (config.parent / "crash-always").write_text("")
    capfd.readouterr()
    assert main(["run", str(config), "--out", str(directory), "-q", "--ray"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1, err
    assert "The Ray task 0 (runs: md seed 0) failed: WorkerCrashedError on each of its 3 attempts" in err
    assert f"`fedsample run --resume {directory} --ray` completes the run" in err
    assert "Traceback" not in err
    (config.parent / "crash-always").unlink()
    assert main(["run", "--resume", str(directory), "-q", "--ray"]) == 0
    assert json.loads((directory / "runs.json").read_text())["complete"] is True
