"""What an interrupted run directory holds, in the words of the interrupt line (fedsample.experiments.rundir.resumable):
each kind of directory the runner leaves, made by stopping a run in this process at a chosen round."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config
from fedsample.experiments.config.reading import ExperimentConfig, load_config
from fedsample.experiments.distributed import TASKS_DIR
from fedsample.experiments.rundir.resumable import Saved, saved_work
from fedsample.experiments.runner import run_experiment
from fedsample.experiments.suite import run_suite
from run_interrupts import Interrupted, StopAfter, quiet_progress

ROUNDS = 6


def _config(tmp_path: Path, *, per_seed: bool = False, checkpoint_every: int = 2) -> ExperimentConfig:
    path = tmp_path / "c.toml"
    tables = MD_AND_UNIFORM + f"[run]\ncheckpoint_every = {checkpoint_every}\n"
    text = digits_config(name="c", seeds=2, rounds=ROUNDS, tables=tables)
    if per_seed:
        text = text.replace("alpha = 0.5\n", "alpha = 0.5\nper_seed = true\n")
    path.write_text(text)
    return load_config(path)


class StopInPart(StopAfter):
    """Interrupts the run once ``limit`` rounds of the ``part``-th phase begun are done."""

    def __init__(self, part: int, limit: int) -> None:
        super().__init__(limit)
        self.part, self.begun = part, 0

    def begin(self, phase: str, labels: tuple[str, ...] | list[str]) -> None:
        self.begun += 1

    def update(self, done: int, total: int, losses: object = None) -> None:
        if self.begun >= self.part:
            super().update(done, total, losses)


def _stopped(config: ExperimentConfig, out: Path, rounds: int) -> Path:
    with pytest.raises(Interrupted):
        run_experiment(config, out, progress=StopAfter(rounds))
    return out


def test_each_kind_of_run_directory_is_said_with_what_resume_continues(tmp_path: Path) -> None:
    config = _config(tmp_path)
    complete = tmp_path / "complete"
    run_experiment(config, complete, progress=quiet_progress())
    per_seed = _stopped(_config(tmp_path, per_seed=True), tmp_path / "per-seed", ROUNDS + 3)
    cases = {
        "missing": (tmp_path / "missing", Saved("nothing was written", resumable=False)),
        "complete": (complete, Saved("the run is complete", resumable=True)),
        "checkpoint": (
            _stopped(config, tmp_path / "one", 5),
            Saved(f"the checkpoint after round 4 of {ROUNDS} is saved", resumable=True),
        ),
        "per-seed": (
            per_seed,
            Saved(f"checkpoints after rounds 4 (seed 0), 2 (seed 1) of {ROUNDS} are saved", resumable=True),
        ),
        "no-checkpoint": (
            _stopped(config, tmp_path / "none", 1),
            Saved("no checkpoint is saved yet (the runs start again from round 0)", resumable=True),
        ),
    }
    for name, (directory, expected) in cases.items():
        assert saved_work(directory) == expected, name


def test_ray_task_files_are_said_and_resumed_with_ray(tmp_path: Path) -> None:
    out = _stopped(_config(tmp_path, checkpoint_every=0), tmp_path / "ray", 1)
    for number in range(3):  # what the Ray executor saves as each task finishes (only the names are read here)
        (out / TASKS_DIR).mkdir(exist_ok=True)
        (out / TASKS_DIR / f"task-{number:04d}.npz").write_bytes(b"")
    assert saved_work(out) == Saved("3 finished Ray tasks are saved", resumable=True, ray=True)


def test_a_suite_says_its_complete_parts_and_the_part_it_stopped_in(tmp_path: Path) -> None:
    config = _config(tmp_path)
    parts = [("a", config), ("b", dataclasses.replace(config, seeds=(5,)))]
    with pytest.raises(Interrupted):  # the first part's 6 rounds, then 3 of the second's
        run_suite(parts, tmp_path / "suite", progress=StopInPart(2, 3), preset="two")
    saved = saved_work(tmp_path / "suite")
    assert saved.text == f"1 of 2 parts are complete, and in part 'b' the checkpoint after round 2 of {ROUNDS} is saved"
    assert saved.resumable
