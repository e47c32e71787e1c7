"""``fedsample run`` and its run directory under bad input, kills and careless use (issue 11, items 1-3 and 6).

Checked: a table of rejected commands, each one line on stderr, exit 2, and the file system left
exactly as it was (no directory created, no config left behind), after which the corrected command
succeeds; ``--overwrite`` keeping a user's notes and refusing a pre-manifest folder; no temporary
file left after SIGKILL and ``--resume``; a run whose every update is rejected stopping with one
line; and exactly which checkpoints a run writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import digits_config, run_cli, snapshot
from fedsample.experiments.rundir.directory import LOCK_FILE, MANIFEST_FILE
from idx_files import write_mnist_format

CONFIG = digits_config() + "\n[run]\ncheckpoint_every = 1\n"


# Each rejected command: extra arguments (CONFIG: the config file, OUT: the output directory), and a
# fragment of the one-line error. Every case but the last two is refused today after the config was
# written (or an empty directory made), which then made the corrected command fail with "holds one".
REJECTED: list[tuple[list[str], str]] = [
    (["-m", "100000000000000000000"], "training.num_sampled"),
    (["-m", "11"], "num_sampled"),  # more than the 10 clients, for sampling without replacement
    (["--rounds", "1000000000"], "GiB"),  # the history alone would need hundreds of GiB
    (["--set", "training.rounds=9223372036854775807"], "GiB"),
    (["--lr", "inf"], "training.local_lr"),
    (["--lr", "1e400"], "training.local_lr"),
    (["CONFIG:local_lr = inf"], "training.local_lr"),
    (["DATA:mnist", "--test-fraction", "0.5"], "'federation.test_fraction'"),  # was 'federation.fraction'
    (["--sampler", "no-such-sampler"], "no-such-sampler"),
    (["--num-clients", "100000"], "federation"),  # more clients than the data set's rows
    (["OUT:file"], "existing file"),
    (["OUT:inside-a-file"], "existing file"),
]


@pytest.mark.parametrize(("extra", "needle"), REJECTED, ids=[" ".join(args) for args, _ in REJECTED])
def test_a_rejected_run_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    config_text, out = CONFIG, tmp_path / "out" / "run"
    config = tmp_path / "tiny.toml"
    target, args = str(config), []
    for item in extra:
        if item == "DATA:mnist":  # 200 training images, a test split of 20: too few for half of each client
            labels = np.arange(220) % 10
            args += [
                "--dataset",
                "mnist",
                "--data-dir",
                str(write_mnist_format(tmp_path / "mnist", labels[:200], labels[200:])),
            ]
        elif item.startswith("CONFIG:"):
            config_text = config_text.replace("local_lr = 0.1", item.removeprefix("CONFIG:"))
        elif item == "OUT:file":
            out = tmp_path / "results.csv"
            out.write_text("a user's file")
        elif item == "OUT:inside-a-file":
            (tmp_path / "results.csv").write_text("a user's file")
            out = tmp_path / "results.csv" / "run"
        else:
            args.append(item)
    config.write_text(config_text)
    before = snapshot(tmp_path)
    code, stdout, err = run_cli(["run", target, "-o", str(out), "-q", *args], capsys)
    assert code == 2, err
    assert stdout == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err
    assert "Traceback" not in err
    assert snapshot(tmp_path) == before  # not a byte written, not a folder made


def test_the_corrected_command_runs_where_a_rejected_one_was_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, out = tmp_path / "tiny.toml", tmp_path / "run"
    config.write_text(CONFIG)
    assert run_cli(["run", str(config), "-o", str(out), "-q", "-m", "100000000000000000000"], capsys)[0] == 2
    code, _, err = run_cli(["run", str(config), "-o", str(out), "-q", "-m", "3"], capsys)
    assert code == 0, err
    assert (out / "runs.json").is_file()
    assert (out / MANIFEST_FILE).is_file()
    assert not (out / LOCK_FILE).exists()


def test_overwrite_keeps_a_users_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config kept beside notes is not a run directory; notes put in a run directory are not the run's."""
    work = tmp_path / "w"
    (work / "notes").mkdir(parents=True)
    (work / "notes" / "plan.md").write_text("mine")
    (work / "config.toml").write_text(CONFIG)
    code, _, err = run_cli(["run", str(work / "config.toml"), "-o", str(work), "-q", "--overwrite"], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "manifest.json" in err
    assert "delete the directory yourself" in err
    assert (work / "notes" / "plan.md").read_text() == "mine"

    run = tmp_path / "run"
    assert run_cli(["run", str(work / "config.toml"), "-o", str(run), "-q"], capsys)[0] == 0
    (run / "notes").mkdir()
    (run / "notes" / "plan.md").write_text("mine")
    before = snapshot(run)
    code, _, err = run_cli(["run", str(work / "config.toml"), "-o", str(run), "-q", "--overwrite"], capsys)
    assert code == 2
    assert "'notes'" in err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(run) == before
    (run / "notes" / "plan.md").unlink()
    (run / "notes").rmdir()
    assert run_cli(["run", str(work / "config.toml"), "-o", str(run), "-q", "--overwrite"], capsys)[0] == 0


def test_every_update_rejected_stops_the_run_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG.replace("rounds = 3", "rounds = 8\nmax_rejected_rounds = 3"))
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "run"), "-q", "--lr", "1e30"], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert "rejected as NaN or infinity in rounds 1 to 3" in err
    assert "max_rejected_rounds = 3" in err


def test_a_run_writes_checkpoints_only_before_its_last_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedsample.engine

    saved: list[tuple[str, int]] = []
    original = fedsample.engine.save_checkpoint

    def spy(path: Any, checkpoint: Any) -> None:
        saved.append((Path(path).name, int(checkpoint.rounds_done)))
        original(path, checkpoint)

    monkeypatch.setattr(fedsample.engine, "save_checkpoint", spy)
    config = tmp_path / "tiny.toml"
    config.write_text(
        CONFIG.replace("rounds = 3", "rounds = 5").replace("checkpoint_every = 1", "checkpoint_every = 2")
    )
    out = tmp_path / "run"
    assert run_cli(["run", str(config), "-o", str(out), "-q"], capsys)[0] == 0
    names = {name for name, _ in saved}
    assert len(names) == 1  # one checkpoint file for the runs trained together
    assert [done for _, done in saved] == [2, 4]  # every 2 rounds, none after the last (5th) round
    assert not (out / names.pop()).exists()  # removed once the run completed
    saved.clear()
    config.write_text(CONFIG.replace("checkpoint_every = 1", "checkpoint_every = 3"))
    assert run_cli(["run", str(config), "-o", str(tmp_path / "exact"), "-q"], capsys)[0] == 0
    assert saved == []  # rounds = checkpoint_every: the results are written instead


@pytest.mark.slow
def test_one_writer_and_no_temporary_file_after_a_kill_and_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fedsample_script: Path
) -> None:
    config = tmp_path / "long.toml"
    config.write_text(CONFIG.replace("rounds = 3", "rounds = 400"))
    out = tmp_path / "run"
    command = [str(fedsample_script), "run", str(config), "-o", str(out), "-q"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(out.glob("checkpoint*")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    # A second writer while the first is still running: refused in one line, naming the first.
    code, _, err = run_cli(["run", str(config), "-o", str(out), "-q", "--overwrite"], capsys)
    assert process.poll() is None, "the first run ended before the second writer tried"
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert f"process {process.pid} on " in err
    assert (out / "config.toml").is_file()  # nothing of the first run was removed
    process.send_signal(signal.SIGKILL)
    process.wait()
    checkpoints = [path for path in out.glob("checkpoint*") if not path.name.startswith(".")]
    assert checkpoints, "the run was killed before its first checkpoint"
    # What a kill in the middle of a checkpoint's write leaves behind (fedsample._io.atomic_path's naming).
    stale = out / f".{checkpoints[0].name}.x7k2p9.tmp"
    stale.write_bytes(os.urandom(150_000))
    assert (out / LOCK_FILE).exists()  # the killed writer's lock, stale now
    code, _, err = run_cli(["run", "--resume", str(out), "-q"], capsys)
    assert code == 0, err
    assert sorted(path.name for path in out.rglob(".*") if path.name.endswith(".tmp")) == []
    assert not (out / LOCK_FILE).exists()


def test_the_quadratic_preset_writes_a_run_directory_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "quadratic"
    (out / "notes").mkdir(parents=True)
    code, _, err = run_cli(["run", "impact-quadratic", "--out", str(out), "-q"], capsys)
    assert code == 2, err  # a folder of the user's is not written into
    (out / "notes").rmdir()
    assert run_cli(["run", "impact-quadratic", "--out", str(out), "-q"], capsys)[0] == 0
    assert "report.md" in (out / MANIFEST_FILE).read_text()
    assert (
        run_cli(["run", "impact-quadratic", "--out", str(out), "-q"], capsys)[0] == 2
    )  # a run: --overwrite to replace
    assert run_cli(["run", "impact-quadratic", "--out", str(out), "-q", "--overwrite"], capsys)[0] == 0
