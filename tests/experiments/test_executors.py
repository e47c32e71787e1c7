"""Executors: the runner owns the run directory and hands the runs to an executor (here or Ray);
progress reaches the caller's reporter; runner.py and distributed.py do not import each other; the
quadratic preset runs through run_suite like the other presets."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample.errors import FedsampleError
from fedsample.experiments.build import Experiment, build_experiment
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict
from fedsample.experiments.executors import (
    CHECKPOINT_FILE,
    Executed,
    LocalExecutor,
    RayExecutor,
    discard_intermediate_files,
)
from fedsample.experiments.progress import ProgressReporter
from fedsample.experiments.results.metrics import read_metrics
from fedsample.experiments.rundir.directory import LOCK_FILE, MANIFEST_FILE
from fedsample.experiments.runner import CONFIG_FILE, RUNS_FILE, run_experiment
from fedsample.experiments.suite import run_suite

EXPERIMENTS = Path(__file__).resolve().parents[2] / "src" / "fedsample" / "experiments"


def _config(*, centralized: bool = False) -> ExperimentConfig:
    return config_from_dict(
        {
            "name": "executors",
            "seeds": 2,
            "federation": {"dataset": "osmd-linear", "num_clients": 12, "sigma": 3.0, "seed": 1},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {"rounds": 3, "num_sampled": 3, "local_steps": 1, "batch_size": 8, "local_lr": 0.05},
            "samplers": [{"name": "md"}, {"name": "uniform"}],
            "baselines": {"centralized": centralized},
        }
    )


class Recorder:
    """A progress reporter that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def begin(self, phase: str, labels: tuple[str, ...] | list[str]) -> None:
        self.calls.append(("begin", (phase, list(labels))))

    def update(self, done: int, total: int, losses: np.ndarray | None = None) -> None:
        self.calls.append(("update", (done, total)))

    def message(self, text: str) -> None:
        self.calls.append(("message", text))

    def close(self) -> None:
        self.calls.append(("close", None))


class Watching:
    """An executor that checks what the runner has set up before the runs, then runs them here."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, bool, bool]] = []

    def check(self, experiment: Experiment) -> None:
        LocalExecutor().check(experiment)

    def execute(self, experiment: Experiment, directory: Path, *, resume: bool, progress: ProgressReporter) -> Executed:
        self.seen.append(((directory / CONFIG_FILE).is_file(), (directory / LOCK_FILE).exists(), resume))
        assert not (directory / RUNS_FILE).exists()  # results are the runner's to write, after the runs
        return LocalExecutor().execute(experiment, directory, resume=resume, progress=progress)


def test_the_runner_hands_its_opened_directory_to_the_executor(tmp_path: Path) -> None:
    """The executor runs inside the opened, locked directory whose config is written; the runner then
    writes the results it returns and releases the directory."""
    executor, progress = Watching(), Recorder()
    outcome = run_experiment(_config(), tmp_path / "run", executor=executor, progress=progress)
    assert executor.seen == [(True, True, False)]
    assert len(outcome.results) == 4
    assert (tmp_path / "run" / RUNS_FILE).is_file()
    assert "runs.json" in (tmp_path / "run" / MANIFEST_FILE).read_text()
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    table = read_metrics(tmp_path / "run")
    assert sorted(set(zip(table["label"].tolist(), table["seed"].tolist(), strict=True))) == [
        ("md", 0),
        ("md", 1),
        ("uniform", 0),
        ("uniform", 1),
    ]


def test_progress_reaches_the_callers_reporter(tmp_path: Path) -> None:
    """Phases, every round of both phases (runs, then the centralized baseline), close, and the final note."""
    progress = Recorder()
    run_experiment(_config(centralized=True), tmp_path / "run", progress=progress)
    kinds = [kind for kind, _ in progress.calls]
    phases = [value[0] for kind, value in progress.calls if kind == "begin"]
    assert phases == ["executors: 4 runs", "executors: centralized baseline"]
    updates = [value for kind, value in progress.calls if kind == "update"]
    assert updates[:3] == [(1, 3), (2, 3), (3, 3)]
    assert updates[3:] == [(1, 6), (2, 6), (3, 6), (4, 6), (5, 6), (6, 6)]
    assert kinds[-2] == "close"
    assert progress.calls[-1][0] == "message"
    assert "done in" in progress.calls[-1][1]


def test_the_ray_executor_refuses_a_local_checkpoint_without_ray(tmp_path: Path) -> None:
    """A directory holding a local run's checkpoint is refused before Ray is needed, naming '--ray'."""
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"")
    with pytest.raises(FedsampleError) as info:
        RayExecutor().execute(build_experiment(_config()), tmp_path, resume=True, progress=Recorder())
    assert info.value.parameter == "--ray"
    assert "without --ray" in str(info.value)


def test_intermediate_files_of_both_executors_are_discarded(tmp_path: Path) -> None:
    for name in (CHECKPOINT_FILE, "checkpoint-seed3.npz", "tasks/task-0000.npz", "summary.csv"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    discard_intermediate_files(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["summary.csv"]


def test_the_quadratic_preset_runs_through_run_suite(tmp_path: Path) -> None:
    """No comparison to run: the preset's kind decides; the directory is a run directory like any other."""
    progress = Recorder()
    outcome = run_suite([], tmp_path / "q", preset="impact-quadratic", progress=progress)
    assert outcome.parts == []
    assert (tmp_path / "q" / "quadratic.json").is_file()
    assert "quadratic.json" in (tmp_path / "q" / MANIFEST_FILE).read_text()
    with pytest.raises(FedsampleError):  # a run is there: --overwrite to replace it
        run_suite([], tmp_path / "q", preset="impact-quadratic", progress=progress)
    run_suite([], tmp_path / "q", preset="impact-quadratic", progress=progress, overwrite=True)


def test_the_quadratic_preset_is_refused_on_ray_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError) as info:
        run_suite([], tmp_path / "q", preset="impact-quadratic", executor=RayExecutor(), progress=Recorder())
    assert info.value.parameter == "--ray"
    assert "'impact-quadratic'" in str(info.value)
    assert not (tmp_path / "q").exists()


def _imported(module: str) -> set[str]:
    """Every fedsample module ``experiments/{module}.py`` imports, lazily or not."""
    names = set()
    for node in ast.walk(ast.parse((EXPERIMENTS / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_runner_and_distributed_do_not_import_each_other() -> None:
    assert "fedsample.experiments.distributed" not in _imported("runner")
    assert "fedsample.experiments.runner" not in _imported("distributed")
    assert "fedsample.experiments.executors" not in _imported("distributed")
    assert not any(name == "ray" for name in _imported("executors"))  # Ray stays lazy
