"""The run directory's manifest, ``--overwrite`` semantics and lock (:mod:`fedsample.experiments.rundir.directory`).

Checked without training: every atomic write inside an open directory is listed before it is
written; overwriting removes exactly the listed files, the temporary files of interrupted writes
and the folders left empty, refuses a directory holding anything else (a user's notes, a symbolic
link, a pre-manifest run) before removing anything, and never follows a link; resuming removes
stale temporary files; a second writer (a real second process) is refused, naming the owner, even
after the directory was removed and made again; a lock left by a killed process is taken over.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fedsample._io import atomic_path, write_text_atomic
from fedsample.errors import FedsampleError
from fedsample.experiments.rundir.directory import LOCK_FILE, MANIFEST_FILE, check_new_run_directory, open_run_directory


def _listed(directory: Path) -> list[str]:
    return list(json.loads((directory / MANIFEST_FILE).read_text())["files"])


def _write_run(directory: Path) -> None:
    with open_run_directory(directory):
        write_text_atomic(directory / "config.toml", "name = 'x'\n")
        (directory / "plots").mkdir()
        write_text_atomic(directory / "plots" / "loss.png", "png")


def _tree(directory: Path) -> set[str]:
    return {path.relative_to(directory).as_posix() for path in directory.rglob("*")}


def test_every_write_is_listed_before_it_lands(tmp_path: Path) -> None:
    run = tmp_path / "w"
    seen: list[list[str]] = []
    with open_run_directory(run):
        assert _listed(run) == []  # the manifest is the first file
        with atomic_path(run / "metrics.csv") as temporary:
            seen.append(_listed(run))  # already listed while its bytes are being written
            temporary.write_text("a,b\n")
    assert seen == [["metrics.csv"]]
    assert not (run / LOCK_FILE).exists()  # released
    write_text_atomic(tmp_path / "elsewhere.txt", "not recorded")  # outside the block: no manifest involved
    assert _listed(run) == ["metrics.csv"]


def test_overwrite_removes_only_listed_files_and_refuses_anything_else(tmp_path: Path) -> None:
    run = tmp_path / "w"
    _write_run(run)
    (run / "notes").mkdir()
    (run / "notes" / "ideas.md").write_text("mine")
    before = _tree(run)
    with pytest.raises(FedsampleError, match=r"'--overwrite'.*'notes'") as info:
        check_new_run_directory(run, overwrite=True)
    assert "\n" not in str(info.value)
    with pytest.raises(FedsampleError, match="notes"), open_run_directory(run, overwrite=True):
        pass
    assert _tree(run) == before  # refused before anything was removed
    (run / "notes" / "ideas.md").unlink()
    (run / "notes").rmdir()
    (run / "plots" / ".loss.png.abc123.tmp").write_text("half")  # an interrupted write of a listed file
    with open_run_directory(run, overwrite=True):
        assert _tree(run) == {MANIFEST_FILE, LOCK_FILE}  # the listed files, their temporary files, empty folders
    assert _listed(run) == []


def test_overwrite_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "loss.png").write_text("keep me")
    run = tmp_path / "w"
    _write_run(run)
    # A listed folder replaced by a link out of the directory: the listed name now leads outside.
    (run / "plots" / "loss.png").unlink()
    (run / "plots").rmdir()
    (run / "plots").symlink_to(outside, target_is_directory=True)
    with pytest.raises(FedsampleError, match="'plots'"):
        check_new_run_directory(run, overwrite=True)
    assert (outside / "loss.png").read_text() == "keep me"
    # A listed file replaced by a link: the link is removed, its target kept.
    (run / "plots").unlink()
    (run / "config.toml").unlink()
    (run / "config.toml").symlink_to(outside / "loss.png")
    with open_run_directory(run, overwrite=True):
        pass
    assert not os.path.lexists(run / "config.toml")
    assert (outside / "loss.png").read_text() == "keep me"


def test_a_tampered_manifest_cannot_reach_outside(tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    run = tmp_path / "w"
    _write_run(run)
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    manifest["files"] += ["../precious.txt", str(outside)]
    (run / MANIFEST_FILE).write_text(json.dumps(manifest))
    with open_run_directory(run, overwrite=True):
        pass
    assert outside.read_text() == "keep me"  # removal walks the directory, it never joins listed names


@pytest.mark.parametrize(
    ("prepare", "expected"),
    [
        (lambda d: (d / "config.toml").write_text("name = 'old'\n"), "older fedsample"),  # a pre-manifest run
        (lambda d: (d / "notes.txt").write_text("mine"), "holds other files"),
    ],
    ids=["pre-manifest-run", "foreign-files"],
)
def test_directories_without_a_manifest_are_refused(tmp_path: Path, prepare: object, expected: str) -> None:
    run = tmp_path / "w"
    run.mkdir()
    prepare(run)  # type: ignore[operator]
    before = _tree(run)
    for overwrite in (False, True):
        with pytest.raises(FedsampleError, match=expected) as info:
            check_new_run_directory(run, overwrite=overwrite)
        assert "\n" not in str(info.value)
    assert _tree(run) == before


def test_out_naming_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    target.write_text("mine")
    for directory in (target, target / "run"):
        with pytest.raises(FedsampleError, match="existing file"):
            check_new_run_directory(directory, overwrite=True)
    assert target.read_text() == "mine"


def test_a_run_without_overwrite_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "w"
    _write_run(run)
    with pytest.raises(FedsampleError, match=r"--resume.*--overwrite"):
        check_new_run_directory(run, overwrite=False)


def test_resume_removes_stale_temporary_files_of_its_own_naming_only(tmp_path: Path) -> None:
    run = tmp_path / "w"
    _write_run(run)
    ours = [run / ".config.toml.k1l2m3.tmp", run / "plots" / ".loss.png.x9.tmp", run / f".{MANIFEST_FILE}.q.tmp"]
    for path in ours:
        path.write_bytes(b"\0" * 1000)
    (run / "user.tmp").write_text("a user's own file")  # not our naming: kept
    (run / ".other.abc.tmp").write_text("no listed file of that name: kept")
    with open_run_directory(run, resume=True):
        assert not any(path.exists() for path in ours)
    assert (run / "user.tmp").exists()
    assert (run / ".other.abc.tmp").exists()
    assert _listed(run) == ["config.toml", "plots/loss.png"]  # resuming keeps the list


def test_a_suite_lists_its_parts_and_overwrite_removes_them(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    with open_run_directory(suite):
        write_text_atomic(suite / "suite.json", "{}")
        _write_run(suite / "alpha-0.1")
    assert set(_listed(suite)) == {"suite.json", f"alpha-0.1/{MANIFEST_FILE}"}
    (suite / "alpha-0.1" / "notes.md").write_text("mine")
    with pytest.raises(FedsampleError, match=re.escape("alpha-0.1/notes.md")):
        check_new_run_directory(suite, overwrite=True)
    (suite / "alpha-0.1" / "notes.md").unlink()
    with open_run_directory(suite, overwrite=True):
        assert _tree(suite) == {MANIFEST_FILE, LOCK_FILE}


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from fedsample.experiments.rundir.directory import open_run_directory
    with open_run_directory(Path(sys.argv[1]), resume=True):
        print("locked", flush=True)
        time.sleep(60)
    """
)


def _start_holder(run: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(run)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_writer_is_refused_and_a_dead_owners_lock_is_taken_over(tmp_path: Path) -> None:
    run = tmp_path / "w"
    _write_run(run)
    holder = _start_holder(run)
    try:
        owner = json.loads((run / LOCK_FILE).read_text())
        assert owner["pid"] == holder.pid
        assert owner["host"]
        assert owner["started"]
        for flags in ({"resume": True}, {"overwrite": True}):
            with (
                pytest.raises(FedsampleError, match=rf"process {holder.pid} on .* is writing") as info,
                open_run_directory(run, **flags),
            ):
                pass
            assert "\n" not in str(info.value)
        assert (run / "config.toml").exists()  # the refused overwrite removed nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert json.loads((run / LOCK_FILE).read_text())["pid"] == holder.pid  # the killed owner's lock stays
    begin = time.monotonic()
    with open_run_directory(run, resume=True) as opened:
        assert opened.stale_owner is not None
        assert opened.stale_owner["pid"] == holder.pid
        assert json.loads((run / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert time.monotonic() - begin < 5
    assert not (run / LOCK_FILE).exists()


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from fedsample._io import write_text_atomic
    from fedsample.errors import FedsampleError
    from fedsample.experiments.rundir.directory import open_run_directory
    run = Path(sys.argv[1])
    try:
        with open_run_directory(run, resume=True):
            print("locked", flush=True)
            sys.stdin.readline()
            write_text_atomic(run / "metrics.csv", "late")
    except FedsampleError as exc:
        print(exc, flush=True)
    """
)


def test_a_second_writer_is_refused_after_the_directory_was_removed_and_made_again(tmp_path: Path) -> None:
    """The first writer's lock goes with its removed directory; its claim on the path does not. And the
    first writer, once it writes again, finds the directory is no longer the one it opened: it writes
    nothing into the new one, and does not make the directory again."""
    run = tmp_path / "w"
    _write_run(run)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdin is not None
    assert writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "locked"
        shutil.rmtree(run)
        run.mkdir()
        with (
            pytest.raises(FedsampleError, match=rf"process {writer.pid} on .* is writing") as info,
            open_run_directory(run),
        ):
            pass
        assert "\n" not in str(info.value)
        assert _tree(run) == set()  # the refused writer wrote nothing
        writer.stdin.write("go\n")
        writer.stdin.flush()
        said = writer.stdout.readline()
        assert f"Got {str(run)!r}, which was replaced by another directory (before writing 'metrics.csv')" in said
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert _tree(run) == set()  # the first writer wrote nothing into the new directory either
    with open_run_directory(run):  # the first writer is gone: the path is free
        pass
