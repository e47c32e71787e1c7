"""Disk faults and a run directory that goes away mid-run (issue 24, item 3): one line, nothing half-written.

A full disk (``ENOSPC``) and a read-only file system (``EROFS``) are simulated by replacing the system
calls of :mod:`fedsample._io` (``_mkdir``, ``_open``, ``_write``, ``_rename``) with ones that raise; the
directory is removed, or replaced by a file, from the run's own progress line. Each case ends in one
line with exit status 2 and no traceback. A fault at the start leaves the file system as it was; a
fault mid-run leaves complete files only (the manifest lists nothing that is not there, no temporary
file), and ``fedsample run --resume`` then ends with the metrics and sampler states of an
uninterrupted run. A removed directory is never made again.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fedsample._io
from cli_helpers import digits_config, run_cli, snapshot
from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.rundir.directory import LOCK_FILE, MANIFEST_FILE
from run_interrupts import assert_same_metrics

CONFIG = digits_config(name="faults", seeds=1, rounds=3) + "\n[run]\ncheckpoint_every = 1\n"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "faults.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def reference(config: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    code = _main(["run", str(config), "-o", str(out), "-q"])
    assert code == 0
    return out


def _main(argv: list[str]) -> int:
    from fedsample.cli import main

    return main(argv)


def _fault(code: int, *, when: Callable[[str], bool] = lambda name: True, after: int = 0) -> Callable[..., Any]:
    """A stand-in for one of fedsample._io's system calls: raises ``OSError(code)`` on the calls whose path's
    name passes ``when``, once ``after`` of them went through."""
    seen: list[str] = []

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            path = args[-1] if original.__name__ == "_rename" else args[0]
            if isinstance(path, int):  # _write's descriptor
                path = os.readlink(f"/proc/self/fd/{path}")
            name = os.path.basename(os.fsdecode(path))
            if when(name):
                seen.append(name)
                if len(seen) > after:
                    raise OSError(code, os.strerror(code), name)
            return original(*args, **kwargs)

        return call

    return wrap


def _patch(monkeypatch: pytest.MonkeyPatch, call: str, wrap: Callable[..., Any]) -> None:
    monkeypatch.setattr(fedsample._io, call, wrap(getattr(fedsample._io, call)))


def _one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def _only_complete_files(out: Path) -> None:
    """What a fault leaves: every listed file there, no temporary file, no lock."""
    listed = json.loads((out / MANIFEST_FILE).read_text())["files"]
    assert all((out / name).is_file() for name in listed), listed
    assert [path.name for path in out.rglob("*") if path.name.endswith(".tmp")] == []
    assert not (out / LOCK_FILE).exists()


# (system call, error, which calls fail, an empty --out folder made beforehand)
AT_START = [
    ("_rename", errno.ENOSPC, lambda name: True, False),  # the manifest, the first file, cannot land
    ("_write", errno.ENOSPC, lambda name: True, False),  # the lock's owner cannot be written
    ("_mkdir", errno.EROFS, lambda name: True, False),  # --out cannot be made
    ("_open", errno.EROFS, lambda name: True, True),  # the lock file cannot be made in an empty --out
    ("_open", errno.EROFS, lambda name: name.startswith(".manifest"), True),  # the manifest's temporary file
]


@pytest.mark.parametrize(
    ("call", "code", "when", "existing"),
    AT_START,
    ids=["ENOSPC-rename", "ENOSPC-lock", "EROFS-mkdir", "EROFS-lock", "EROFS-manifest"],
)
def test_a_disk_fault_at_the_start_is_one_line_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    config: Path,
    call: str,
    code: int,
    when: Callable[[str], bool],
    existing: bool,
) -> None:
    out = tmp_path / "out" / "run"  # two folders to make, unless an empty --out is there already
    if existing:
        out.mkdir(parents=True)
    before = snapshot(tmp_path)
    _patch(monkeypatch, call, _fault(code, when=when))
    status, stdout, err = run_cli(["run", str(config), "-o", str(out), "-q"], capsys)
    assert status == 2, err
    assert stdout == ""
    _one_line(err)
    assert os.strerror(code) in err
    assert snapshot(tmp_path) == before  # not a manifest, not a lock, not a folder left


# (system call, error, which calls fail, how many of them go through first)
MID_RUN = [
    ("_rename", errno.ENOSPC, lambda name: name == "checkpoint.npz", 1),  # the second checkpoint
    ("_write", errno.ENOSPC, lambda name: name.startswith(".runs.json."), 0),  # the results begin
    ("_open", errno.EROFS, lambda name: name.startswith(".md-seed0.json."), 0),  # the first sampler state
    ("_rename", errno.ENOSPC, lambda name: name == "report.md", 0),  # the last files
]


@pytest.mark.parametrize(
    ("call", "code", "when", "after"),
    MID_RUN,
    ids=["ENOSPC-checkpoint", "ENOSPC-runs", "EROFS-state", "ENOSPC-report"],
)
def test_a_disk_fault_mid_run_is_one_line_and_resume_completes_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    config: Path,
    reference: Path,
    call: str,
    code: int,
    when: Callable[[str], bool],
    after: int,
) -> None:
    out = tmp_path / "run"
    with monkeypatch.context() as patched:
        _patch(patched, call, _fault(code, when=when, after=after))
        status, _, err = run_cli(["run", str(config), "-o", str(out), "-q"], capsys)
    assert status == 2, err
    _one_line(err)
    assert os.strerror(code) in err
    assert f"`fedsample run --resume {out}` completes the run" in err
    assert (out / "config.toml").is_file()
    _only_complete_files(out)
    # The fault cleared: the resumed run is the uninterrupted one.
    status, _, err = run_cli(["run", "--resume", str(out), "-q"], capsys)
    assert status == 0, err
    assert_same_metrics(reference, out)
    for state in (reference / "states").iterdir():
        assert state.read_text() == (out / "states" / state.name).read_text()


def _run_acting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], action: Callable[[], None]
) -> tuple[int, str]:
    """Run the CLI with ``argv``, its progress line doing ``action`` once the first round is done."""
    original, acted = ProgressLine.update, []

    def update(self: ProgressLine, done: int, total: int, losses: Any = None) -> None:
        if done >= 1 and not acted:
            acted.append(done)
            action()
        original(self, done, total, losses)

    with monkeypatch.context() as patched:
        patched.setattr(ProgressLine, "update", update)
        status, _, err = run_cli(argv, capsys)
    assert acted
    return status, err


def test_a_run_directory_removed_mid_run_is_not_made_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: Path
) -> None:
    out = tmp_path / "run"
    status, err = _run_acting(
        monkeypatch, capsys, ["run", str(config), "-o", str(out), "-q"], lambda: shutil.rmtree(out)
    )
    assert status == 2, err
    _one_line(err)
    assert f"Got {str(out)!r}, which was removed" in err
    assert not os.path.lexists(out)  # not made again, nothing written after the removal


def test_a_run_directory_replaced_by_a_file_mid_run_is_left_alone_and_resumes_where_it_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: Path, reference: Path
) -> None:
    out, moved = tmp_path / "run", tmp_path / "moved"

    def replace() -> None:
        out.rename(moved)
        out.write_text("a user's file")

    status, err = _run_acting(monkeypatch, capsys, ["run", str(config), "-o", str(out), "-q"], replace)
    assert status == 2, err
    _one_line(err)
    assert f"Got {str(out)!r}, which was replaced by a file" in err
    assert f"the directory it opened is now {str(moved)!r}" in err
    assert out.read_text() == "a user's file"
    assert not (moved / LOCK_FILE).exists()
    status, _, err = run_cli(["run", "--resume", str(moved), "-q"], capsys)
    assert status == 0, err
    assert_same_metrics(reference, moved)


def test_a_folder_replaced_by_a_link_mid_run_is_refused_and_resume_completes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: Path, reference: Path
) -> None:
    """``states/`` planted as a link to another folder before the states are written: nothing lands there."""
    out, victim = tmp_path / "run", tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    status, err = _run_acting(
        monkeypatch, capsys, ["run", str(config), "-o", str(out), "-q"], lambda: (out / "states").symlink_to(victim)
    )
    assert status == 2, err
    _one_line(err)
    assert "'states'" in err
    assert "symbolic link" in err
    assert sorted(path.name for path in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "precious"
    (out / "states").unlink()
    status, _, err = run_cli(["run", "--resume", str(out), "-q"], capsys)
    assert status == 0, err
    assert_same_metrics(reference, out)


def test_a_disk_fault_in_a_suites_part_names_the_suite_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: Path, reference: Path
) -> None:
    """The second part's first checkpoint cannot be written: ``--resume`` of the suite (not of the part)
    completes it, the first part untouched."""
    from fedsample.errors import FedsampleError
    from fedsample.experiments.config.reading import load_config
    from fedsample.experiments.suite import run_suite
    from run_interrupts import quiet_progress

    loaded = load_config(config)
    suite, out = [("a", loaded), ("b", loaded)], tmp_path / "suite"
    with monkeypatch.context() as patched:
        _patch(patched, "_rename", _fault(errno.ENOSPC, when=lambda name: name == "checkpoint.npz", after=2))
        with pytest.raises(FedsampleError) as info:
            run_suite(suite, out, progress=quiet_progress(), preset="two")
    message = str(info.value)
    assert "\n" not in message
    assert f"'{out / 'b' / 'checkpoint.npz'}' failed: No space left on device (ENOSPC)" in message
    assert f"`fedsample run --resume {out}` completes the run" in message
    for part in ("a", "b"):
        _only_complete_files(out / part)
    run_suite(None, out, resume=True, progress=quiet_progress())
    for part in ("a", "b"):
        assert_same_metrics(reference, out / part)


def test_a_disk_fault_while_rebuilding_a_report_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, reference: Path
) -> None:
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    before = (out / "report.md").read_bytes()
    with monkeypatch.context() as patched:
        _patch(patched, "_rename", _fault(errno.ENOSPC, when=lambda name: name == "report.md"))
        status, _, err = run_cli(["report", str(out)], capsys)
    assert status == 2, err
    _one_line(err)
    assert "run the command again once the fault is cleared" in err
    assert (out / "report.md").read_bytes() == before  # the previous report, whole
    _only_complete_files(out)
    assert run_cli(["report", str(out)], capsys)[0] == 0
