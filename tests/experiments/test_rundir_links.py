"""Links planted in a run directory are refused, never followed (issue 24, item 3).

A ``.fedsample.lock`` that is a symbolic link (to a file, or to nothing yet) or a hard link to
another file, and a symbolic link planted where a file or a folder is written (``summary.csv``,
``plots``, ``metrics.csv``, ``states``), are refused by ``run``, ``run --resume``, ``run
--overwrite``, ``report`` and ``plot`` in one line naming the path, with exit status 2: the link's
target is never truncated, written or created, and the link stays where it was.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_helpers import digits_config, run_cli
from fedsample.experiments.config.reading import load_config
from fedsample.experiments.rundir.directory import LOCK_FILE
from fedsample.experiments.runner import run_experiment
from run_interrupts import Interrupted, StopAfter, quiet_progress

CONFIG = digits_config(name="links", seeds=1, rounds=3) + "\n[run]\ncheckpoint_every = 1\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The config, a complete run, and a run interrupted after its first round."""
    folder = tmp_path_factory.mktemp("runs")
    config = folder / "links.toml"
    config.write_text(CONFIG)
    run_experiment(load_config(config), folder / "complete", progress=quiet_progress())
    with pytest.raises(Interrupted):
        run_experiment(load_config(config), folder / "interrupted", progress=StopAfter(1))
    return {"config": config, "complete": folder / "complete", "interrupted": folder / "interrupted"}


def _tree(root: Path) -> dict[str, object]:
    """Every path under ``root``: a link's target, a file's bytes, None for a folder."""
    return {
        path.relative_to(root).as_posix(): (
            ("link", os.readlink(path)) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
        )
        for path in sorted(root.rglob("*"))
    }


def _command(name: str, runs: dict[str, Path], out: Path) -> list[str]:
    """The command ``name`` on ``out``, prepared from the fixture's runs."""
    if name == "run":
        out.mkdir()  # a folder holding nothing but the planted lock counts as empty
        return ["run", str(runs["config"]), "-o", str(out), "-q"]
    shutil.copytree(runs["interrupted" if name == "resume" else "complete"], out, symlinks=True)
    return {
        "resume": ["run", "--resume", str(out), "-q"],
        "overwrite": ["run", str(runs["config"]), "-o", str(out), "-q", "--overwrite"],
        "report": ["report", str(out)],
        "plot": ["plot", str(out)],
    }[name]


def _symbolic(victim: Path, lock: Path) -> None:
    lock.symlink_to(victim)


def _dangling(victim: Path, lock: Path) -> None:
    victim.unlink()
    lock.symlink_to(victim)  # an O_CREAT that followed it would create the victim


def _hard(victim: Path, lock: Path) -> None:
    os.link(victim, lock)


@pytest.mark.parametrize("plant", [_symbolic, _dangling, _hard], ids=["symlink", "dangling-symlink", "hard-link"])
@pytest.mark.parametrize("command", ["run", "resume", "overwrite", "report", "plot"])
def test_a_planted_lock_file_link_is_refused_and_its_target_never_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    runs: dict[str, Path],
    command: str,
    plant: Callable[[Path, Path], None],
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "run"
    argv = _command(command, runs, out)
    plant(victim, out / LOCK_FILE)
    before = _tree(tmp_path)
    code, stdout, err = run_cli(argv, capsys)
    assert code == 2, err
    assert stdout == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert repr(str(out / LOCK_FILE)) in err
    assert _tree(tmp_path) == before  # the victim as it was (or still absent), nothing else written


# (command, the planted name, whether it stands for a folder)
PLANTED = [
    ("report", "summary.csv", False),
    ("report", "plots", True),
    ("plot", "plots/train_loss.png", False),
    ("resume", "metrics.csv", False),
    ("resume", "states", True),
]


@pytest.mark.parametrize(("command", "name", "folder"), PLANTED, ids=[f"{c}-{n}" for c, n, _ in PLANTED])
def test_a_link_where_a_file_or_folder_is_written_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runs: dict[str, Path], command: str, name: str, folder: bool
) -> None:
    victim = tmp_path / "victim"
    if folder:
        victim.mkdir()
        (victim / "keep.txt").write_text("precious")
    else:
        victim.write_text("precious")
    out = tmp_path / "run"
    argv = _command(command, runs, out)
    planted = out / name
    if planted.is_dir():
        shutil.rmtree(planted)
    planted.unlink(missing_ok=True)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(victim, target_is_directory=folder)
    victims = _tree(victim) if folder else victim.read_bytes()
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert f"{name!r}" in err
    assert "symbolic link" in err
    assert (_tree(victim) if folder else victim.read_bytes()) == victims
    assert planted.is_symlink()  # not replaced either
    assert not (out / LOCK_FILE).exists()
