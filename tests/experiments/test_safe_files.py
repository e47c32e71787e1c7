"""No code runs from a file of a run directory (issue 11 item 4): a crafted pickle where the checkpoint
goes (its current name and the old ``checkpoint.pkl``) or where a Ray task's results go is refused by
``fedsample run --resume`` in one line (exit 2), and the code it names never runs."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from fedsample.cli import main
from fedsample.errors import FedsampleError
from fedsample.experiments.distributed import TASKS_DIR
from fedsample.experiments.executors import CHECKPOINT_FILE
from fedsample.experiments.runner import RUNS_FILE

pytest.importorskip("torch")

CONFIG = """
name = "safe"
seeds = 1

[federation]
dataset = "digits"
num_clients = 10

[model]
kind = "softmax"

[training]
rounds = 2
num_sampled = 3
local_steps = 1
batch_size = 10

[[samplers]]
name = "md"

[run]
checkpoint_every = 1
"""


class _Marker:
    """Unpickling this object creates the file ``path``: the proof that a loader ran code from a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run directory, finished."""
    root = tmp_path_factory.mktemp("safe")
    (root / "safe.toml").write_text(CONFIG)
    directory = root / "run"
    assert main(["run", str(root / "safe.toml"), "--out", str(directory), "-q"]) == 0
    return directory


@pytest.fixture
def interrupted(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run made to look interrupted: its results file removed, so --resume continues it."""
    directory = tmp_path / "run"
    shutil.copytree(finished, directory)
    (directory / RUNS_FILE).unlink()
    return directory


@pytest.mark.parametrize(
    ("place", "expected"),
    [
        (CHECKPOINT_FILE, "not an archive of arrays"),
        ("checkpoint.pkl", "pickle"),
        (f"{TASKS_DIR}/task-0000.npz", "not an archive of arrays"),
    ],
)
def test_a_crafted_pickle_in_a_run_directory_runs_nothing(
    interrupted: Path,
    tmp_path: Path,
    place: str,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``fedsample run --resume RUN_DIR`` (with ``--ray`` for a task file): exit 2, one line naming the file."""
    marker = tmp_path / "marker"
    target = interrupted / place
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(pickle.dumps(_Marker(marker)))
    ray = place.startswith(TASKS_DIR)
    # Ray is never started: the task files are read (and refused) before any task is submitted.
    monkeypatch.setattr("fedsample.experiments.distributed.connect", lambda address: False)
    capfd.readouterr()
    code = main(["run", "--resume", str(interrupted), *(["--ray"] if ray else [])])
    err = capfd.readouterr().err
    assert not marker.exists()
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert expected in err
    assert str(target) in err


def test_a_truncated_or_foreign_task_file_is_refused_in_one_line(interrupted: Path, tmp_path: Path) -> None:
    """A task file cut short, or holding something other than its task's results, is refused naming
    the file; a task file of another split into tasks is not an error (that task runs again)."""
    from fedsample.experiments.build import build_experiment
    from fedsample.experiments.config import load_config
    from fedsample.experiments.distributed import _load_task, _run_task, _save_task

    config = load_config(interrupted / "config.toml")
    states = [run.state for run in build_experiment(config).runs]  # what the driver sends with the config
    results = _run_task(config, states, [0], False)
    path = tmp_path / "task-0000.npz"
    _save_task(path, (False, [0]), results)
    assert [r.history.label for r in _load_task(path, (False, [0])) or []] == ["md"]
    assert _load_task(path, (False, [0, 1])) is None  # another split: the task runs again
    assert _load_task(tmp_path / "missing.npz", (False, [0])) is None
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FedsampleError) as info:
        _load_task(path, (False, [0]))
    assert info.value.parameter == "--resume"
    assert "\n" not in str(info.value)
    _save_task(path, (False, [0]), [{"not": "a result"}])
    with pytest.raises(FedsampleError, match="hold their task's results"):
        _load_task(path, (False, [0]))
