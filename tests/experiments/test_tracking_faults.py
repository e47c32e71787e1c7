"""Trackers under faults (docs/tracking.md): a Ctrl-C inside an MLflow write, or a process killed after a
checkpoint, then ``--resume``, leave every round in MLflow exactly once; a store whose disk fills mid-run
is stopped in one line, its MLflow runs marked FAILED, and the run goes on; a store placed inside a run
directory that does not exist yet works, and a refused run leaves no store behind."""

from __future__ import annotations

import logging
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from test_tracking import (
    LABELS,
    ROUNDS,
    _assert_close,
    _config,
    _expected,
    _mlflow,
    _mlflow_runs,
    _quiet,
    _sqlite,
    flush_after,
)

from fedsample._interrupts import Interrupted
from fedsample.cli import main
from fedsample.experiments.results.metrics import read_metrics
from fedsample.experiments.results.tracking import MLflowTracker, Trackers
from fedsample.experiments.rundir.manifest import read_manifest
from fedsample.experiments.runner import run_experiment
from run_interrupts import Interrupted as Stopped
from run_interrupts import StopAfter

pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy")

# What a library's failure prints besides the tracker's line: its log records and tracebacks.
NOISE = r"Traceback|File \"|Error|ERROR|WARNING|mlflow\.|sqlalchemy|alembic"
CONFIG = f"""
name = "tracked"
seeds = [0, 1]
[federation]
dataset = "osmd-linear"
num_clients = 8
sigma = 3.0
[algorithm]
name = "minibatch-sgd"
[training]
rounds = {ROUNDS}
num_sampled = 2
local_steps = 1
batch_size = 8
eval_every = 2
[[samplers]]
name = "md"
"""


def _assert_every_round_once(uri: str, out: Path, status: str = "FINISHED") -> None:
    """Each MLflow run holds every round of the metrics file once, with its values (the wall time of a round
    logged by an interrupted process aside)."""
    runs = _mlflow_runs(uri, "tracked")
    assert len(runs) == 2 * len({label for label, _ in runs})
    for (label, seed), run in runs.items():
        _assert_close(_mlflow(uri, run), _expected(out, label, seed), timed_before=ROUNDS)  # (no round twice)
        assert run.info.status == status


@pytest.mark.parametrize("when", ["before the store took it", "after the store took it"])
def test_a_ctrl_c_inside_an_mlflow_write_loses_no_round_and_repeats_none(
    when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    flush_after(monkeypatch, 0.0)  # every round written as it is reported: round 3's write is cut
    real = MlflowClient.log_batch
    cut: list[str] = []

    def log_batch(client: Any, run_id: str, metrics: Any = (), **kwargs: Any) -> Any:
        if not cut and any(metric.step == 3 for metric in metrics):
            cut.append(run_id)
            if when.startswith("after"):
                real(client, run_id, metrics, **kwargs)
            raise Interrupted(signal.SIGINT)
        return real(client, run_id, metrics, **kwargs)

    out = tmp_path / "run"
    with monkeypatch.context() as patched:
        patched.setattr(MlflowClient, "log_batch", log_batch)
        with pytest.raises(Interrupted):
            run_experiment(_config({"mlflow": True}, checkpoint_every=2), out, progress=_quiet())
    assert cut
    run_experiment(None, out, resume=True, progress=_quiet())
    _assert_every_round_once(_sqlite(out), out)
    assert len(_mlflow_runs(_sqlite(out), "tracked")) == 2 * len(LABELS)


def test_a_process_killed_after_a_checkpoint_left_every_round_before_it_in_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flush_after(monkeypatch, 1e9)  # no timed write: only the checkpoints' (and the end's)
    out = tmp_path / "run"
    with monkeypatch.context() as patched:
        patched.setattr(Trackers, "close", lambda self, *, complete: None)  # killed: the trackers never close
        with pytest.raises(Stopped):
            # Rounds 0-4 reported; the checkpoint after round 4 saved, from which the resumed run goes on.
            run_experiment(_config({"mlflow": True}, checkpoint_every=2), out, progress=StopAfter(5))
    run_experiment(None, out, resume=True, progress=_quiet())
    _assert_every_round_once(_sqlite(out), out)


@pytest.fixture
def disk() -> Any:
    """SQLite stores whose files stop growing once ``disk["full"]`` is set: their writes then fail with
    SQLite's "database or disk is full", as on a full disk."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    state = {"full": False}

    def checkout(connection: Any, record: Any, proxy: Any) -> None:
        if state["full"]:
            cursor = connection.cursor()
            (pages,) = cursor.execute("PRAGMA page_count").fetchone()
            cursor.execute(f"PRAGMA max_page_count = {pages}")
            cursor.close()

    event.listen(Pool, "checkout", checkout)
    yield state
    event.remove(Pool, "checkout", checkout)


def test_a_full_disk_under_the_mlflow_store_gives_one_line_and_a_failed_mlflow_run(
    tmp_path: Path,
    disk: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = MLflowTracker.log

    def filling(tracker: MLflowTracker, report: Any) -> None:
        disk["full"] = report.round >= 3
        log(tracker, report)

    monkeypatch.setattr(MLflowTracker, "log", filling)
    flush_after(monkeypatch, 0.0)
    caplog.set_level(logging.DEBUG)
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    code = main(["run", str(config), "--mlflow", "--out", str(out)])
    err = capfd.readouterr().err.splitlines()
    assert code == 0, err
    stopped = [line for line in err if "tracking" in line]
    assert len(stopped) == 1, err
    assert stopped[0].startswith("MLflow tracking stopped; the run goes on, and its metrics files hold every round: ")
    assert stopped[0].endswith(": OperationalError: database or disk is full"), stopped
    assert not [line for line in err if re.search(NOISE, line) and line not in stopped], err
    libraries = ("mlflow", "sqlalchemy", "alembic")
    assert not [r for r in caplog.records if r.name.partition(".")[0] in libraries and r.levelno >= logging.WARNING]
    assert sorted(set(read_metrics(out)["round"].tolist())) == list(range(ROUNDS + 1))
    disk["full"] = False
    runs = _mlflow_runs(_sqlite(out), "tracked")
    assert len(runs) == 2
    assert {run.info.status for run in runs.values()} == {"FAILED"}


def test_an_mlflow_store_inside_a_new_run_directory_is_one_of_its_files(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    uri = f"sqlite:///{out / 'custom.db'}"
    for again in ([], ["--overwrite"]):  # the second run removes the store with the run and makes it anew
        code = main(["run", str(config), "-q", "--mlflow-uri", uri, "--out", str(out), *again])
        assert (code, capfd.readouterr().err) == (0, "")
        assert "custom.db" in read_manifest(out)[0]
        _assert_every_round_once(uri, out)
        written = {path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file()}
        assert written - {"manifest.json"} <= read_manifest(out)[0]  # --overwrite removes each of them
    stranger = tmp_path / "theirs"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("not a run")
    code = main(
        ["run", str(config), "-q", "--mlflow-uri", f"sqlite:///{stranger / 'custom.db'}", "--out", str(stranger)]
    )
    err = capfd.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert "'--out'" in err[0]
    assert os.listdir(stranger) == ["notes.txt"]  # refused before its store was made
