"""Trackers (fedsample.experiments.results.tracking): every round's metrics record reaches TensorBoard's event files
and an MLflow store, read back here with TensorBoard's and MLflow's own readers and compared with the run's
metrics file; a resumed run shows every round once; a failing tracker stops with one line, not the run."""

from __future__ import annotations

import io
import math
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch import nn

from fedsample.data import FederatedDataset
from fedsample.engine import RoundReport, RunSpec, TrainingConfig, simulate
from fedsample.errors import FedsampleError
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict, load_config
from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.results.metrics import read_metrics
from fedsample.experiments.results.tracking import (
    MLFLOW_FILE,
    TENSORBOARD_DIR,
    Trackers,
    check_trackers,
    folder_name,
    reports_from_histories,
    scalars,
)
from fedsample.experiments.rundir.manifest import read_manifest
from fedsample.experiments.runner import CONFIG_FILE, run_experiment
from fedsample.samplers import make_sampler
from run_interrupts import Interrupted, StopAfter

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

ROUNDS = 5
LABELS = ("md", "uniform (plain)")


def _config(tracking: dict[str, Any] | None = None, **run: Any) -> ExperimentConfig:
    return config_from_dict(
        {
            "name": "tracked",
            "seeds": 2,
            "federation": {"dataset": "osmd-linear", "num_clients": 12, "sigma": 3.0, "seed": 1},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {
                "rounds": ROUNDS,
                "num_sampled": 3,
                "local_steps": 1,
                "batch_size": 8,
                "local_lr": 0.05,
                "eval_every": 2,
            },
            "samplers": [{"name": "md"}, {"name": "uniform", "label": LABELS[1]}],
            "run": run,
            **({"tracking": tracking} if tracking else {}),
        }
    )


def _quiet() -> ProgressLine:
    return ProgressLine(stream=io.StringIO())


def _expected(run_dir: Path, label: str, seed: int) -> dict[str, dict[int, float]]:
    """The run's values by column and round, from its metrics file, less the missing marks."""
    table = read_metrics(run_dir)
    chosen = (table["label"] == label) & (table["seed"] == seed)
    values: dict[str, dict[int, float]] = {}
    for index in np.flatnonzero(chosen):
        row = {name: getattr(column[index], "item", lambda c=column[index]: c)() for name, column in table.items()}
        for name, value in scalars(row).items():
            values.setdefault(name, {})[int(row["round"])] = value
    return values


def _tensorboard(run_dir: Path, label: str, seed: int) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = run_dir / TENSORBOARD_DIR / folder_name(label) / f"seed{seed}"
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    found: dict[str, dict[int, float]] = {}
    for tag in events.Tags()["scalars"]:
        steps = [e.step for e in events.Scalars(tag)]
        assert len(steps) == len(set(steps)), f"{tag}: a round shown twice"
        found[tag] = {e.step: e.value for e in events.Scalars(tag)}
    return found


def _mlflow_runs(uri: str, experiment: str) -> dict[tuple[str, int], Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id])
    return {(r.data.tags["fedsample.label"], int(r.data.tags["fedsample.seed"])): r for r in runs}


def _mlflow(uri: str, run: Any) -> dict[str, dict[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found: dict[str, dict[int, float]] = {}
    for name in run.data.metrics:
        history = client.get_metric_history(run.info.run_id, name)
        steps = [m.step for m in history]
        assert len(steps) == len(set(steps)), f"{name}: a round logged twice"
        found[name] = {m.step: m.value for m in history}
    return found


def _assert_close(
    found: dict[str, dict[int, float]], expected: dict[str, dict[int, float]], *, timed_before: int = -1
) -> None:
    """``timed_before``: the rounds up to it were logged by an interrupted process, whose wall times differ."""
    assert found.keys() == expected.keys()
    for name, values in expected.items():
        assert found[name].keys() == values.keys(), name
        for step, value in values.items():
            if name == "round_seconds" and step <= timed_before:
                continue
            assert math.isclose(found[name][step], value, rel_tol=1e-6, abs_tol=1e-9), (name, step)


def _sqlite(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / MLFLOW_FILE).resolve()}"


def test_tensorboard_and_mlflow_hold_every_column_of_every_round(tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[RoundReport] = []
    run_experiment(_config({"tensorboard": True, "mlflow": True}), out, progress=_quiet(), on_round=seen.append)
    assert len(seen) == ROUNDS + 1  # the caller's callback comes after the trackers, every round
    runs = _mlflow_runs(_sqlite(out), "tracked")
    assert set(runs) == {(label, seed) for label in LABELS for seed in (0, 1)}
    for label in LABELS:
        for seed in (0, 1):
            expected = _expected(out, label, seed)
            assert {"train_loss", "distinct_clients", "weight_sum", "dropped", "local_lr"} <= expected.keys()
            _assert_close(_tensorboard(out, label, seed), expected)
            run = runs[(label, seed)]
            _assert_close(_mlflow(_sqlite(out), run), expected)
            assert run.info.status == "FINISHED"
            assert run.info.run_name == f"{label} seed {seed}"
            assert run.data.params["training.rounds"] == str(ROUNDS)
            assert run.data.params["sampler"] == ("md" if label == "md" else "uniform")
    files, _ = read_manifest(out)
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert written - {"manifest.json"} <= files, "every tracker file goes through the manifest"
    assert MLFLOW_FILE in files
    assert any(name.startswith(f"{TENSORBOARD_DIR}/") for name in files)
    assert "[tracking]" in (out / CONFIG_FILE).read_text()


def test_a_resumed_run_shows_every_round_once_with_the_values_of_the_metrics_file(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = _config({"tensorboard": True, "mlflow": True}, checkpoint_every=2)
    with pytest.raises(Interrupted):
        run_experiment(config, out, progress=StopAfter(4))  # round 4 logged, the checkpoint holds round 2
    run_experiment(None, out, resume=True, progress=_quiet())
    runs = _mlflow_runs(_sqlite(out), "tracked")
    assert len(runs) == 4  # the same MLflow runs continued
    for label in LABELS:
        for seed in (0, 1):
            expected = _expected(out, label, seed)
            _assert_close(_tensorboard(out, label, seed), expected)
            # MLflow keeps the rounds the interrupted process logged after its checkpoint (up to round 3):
            # their values are the resumed run's, but for the wall time.
            _assert_close(_mlflow(_sqlite(out), runs[(label, seed)]), expected, timed_before=3)
            assert runs[(label, seed)].info.status == "FINISHED"
    assert len(list((out / TENSORBOARD_DIR / "md" / "seed0").glob("events.out.tfevents.*"))) == 2


def test_a_resumed_run_may_add_a_tracker_without_changing_its_config(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = _config(checkpoint_every=2)
    with pytest.raises(Interrupted):
        run_experiment(config, out, progress=StopAfter(3))
    before = (out / CONFIG_FILE).read_text()
    run_experiment(config, out, resume=True, progress=_quiet(), tracking={"tensorboard": True})
    assert (out / CONFIG_FILE).read_text() == before
    found = _tensorboard(out, "md", 0)
    assert sorted(found["train_loss"]) == [4, 5]  # the rounds this process ran (evaluated at 4 and at the end)
    assert sorted(found["weight_sum"]) == [3, 4, 5]


def test_a_tracker_that_fails_is_stopped_in_one_line_and_the_run_goes_on() -> None:
    said: list[str] = []

    class Broken:
        name = "Broken"
        closed = False
        abandoned = False

        def log(self, report: RoundReport) -> None:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            raise AssertionError("a tracker that failed is not flushed")

        def close(self, *, complete: bool) -> None:
            self.closed = True  # would call the store that just failed once more

        def abandon(self) -> None:
            self.abandoned = True

    broken = Broken()
    seen: list[int] = []
    trackers = Trackers([broken], lambda report: seen.append(report.round), said.append)
    for done in range(3):
        trackers(RoundReport(round=done, total=2, evaluated=True, rows=()))
    trackers.close(complete=True)
    assert seen == [0, 1, 2]
    assert broken.abandoned
    assert not broken.closed
    assert len(said) == 1
    assert said[0].startswith("Broken tracking stopped; the run goes on")
    assert "No space left on device" in said[0]


def test_an_mlflow_store_that_does_not_open_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (tmp_path / "a-file").write_text("not a folder")
    store = f"sqlite:///{tmp_path / 'a-file' / 'x.db'}"
    with pytest.raises(FedsampleError, match=r"'tracking.mlflow_uri' parameter must name an MLflow store that opens"):
        run_experiment(_config({"mlflow": True, "mlflow_uri": store}), out, progress=_quiet())
    assert not out.exists() or not any(out.iterdir())


def test_a_missing_package_is_named_with_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name))
    with pytest.raises(FedsampleError, match=r"'tracking.tensorboard' parameter needs the tensorboard package.*"):
        check_trackers({"tensorboard": True})
    check_trackers({"tensorboard": False, "mlflow": True})


def test_ray_tasks_report_what_the_engine_reported() -> None:
    rng = np.random.default_rng(5)
    sizes = np.array([5, 9, 3, 7, 12, 4])
    data = FederatedDataset(
        train_features=rng.normal(size=(int(sizes.sum()), 6)).astype(np.float32),
        train_targets=rng.integers(0, 3, int(sizes.sum())),
        train_indptr=np.concatenate([[0], np.cumsum(sizes)]),
        test_features=rng.normal(size=(12, 6)).astype(np.float32),
        test_targets=rng.integers(0, 3, 12),
        test_indptr=np.arange(0, 13, 2),
    )
    config = TrainingConfig(rounds=4, num_sampled=3, local_steps=2, batch_size=4, local_lr=0.1, eval_every=3)
    runs = [RunSpec(make_sampler("md"), seed=1), RunSpec(make_sampler("optimal"), seed=2)]
    seen: list[RoundReport] = []
    results = simulate(data, nn.Linear(6, 3), runs, config, on_round=seen.append)
    rebuilt = list(reports_from_histories([r.history for r in results]))
    assert [(r.round, r.total, r.evaluated) for r in rebuilt] == [(r.round, r.total, r.evaluated) for r in seen]
    for mine, theirs in zip(rebuilt, seen, strict=True):
        for a, b in zip(mine.rows, theirs.rows, strict=True):
            assert list(a) == list(b)
            assert all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


def test_labels_become_distinct_folder_names() -> None:
    assert folder_name("md") == "md"
    odd = ["a/b", "a b", "a:b", "..", ".hidden", "é", "MD", "Md"]
    names = [folder_name(label) for label in [*odd, "md"]]
    assert len({name.lower() for name in names}) == len(odd) + 1  # distinct where case is ignored too
    assert all("/" not in name and not name.startswith(".") for name in names)


def test_the_cli_flags_set_the_trackers_and_a_typo_gets_the_right_key(tmp_path: Path, fedsample_script: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        'name = "c"\nseeds = [0]\n[federation]\ndataset = "osmd-linear"\nnum_clients = 8\nsigma = 3.0\n'
        '[algorithm]\nname = "minibatch-sgd"\n[training]\nrounds = 2\nnum_sampled = 2\nlocal_steps = 1\n'
        'batch_size = 8\n[[samplers]]\nname = "md"\n'
    )
    fedsample = [str(fedsample_script)]
    done = subprocess.run(
        [*fedsample, "run", str(config), "--out", str(tmp_path / "r"), "--tensorboard", "--mlflow", "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    saved = load_config(tmp_path / "r" / CONFIG_FILE)
    assert saved.tracking.tensorboard
    assert saved.tracking.mlflow
    relative = subprocess.run(
        [*fedsample, "run", str(config), "--out", "r2", "--mlflow-uri", "sqlite:///stores/m.db", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert relative.returncode == 0, relative.stderr
    assert load_config(tmp_path / "r2" / CONFIG_FILE).tracking.mlflow_uri == f"sqlite:///{tmp_path / 'stores' / 'm.db'}"
    assert (tmp_path / "stores" / "m.db").is_file()
    closed_form = subprocess.run(
        [*fedsample, "run", "impact-quadratic", "--out", "q", "--tensorboard"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert closed_form.returncode == 2
    assert len(closed_form.stderr.strip().splitlines()) == 1
    assert "closed form" in closed_form.stderr
    assert not (tmp_path / "q").exists()
    assert done.stderr == ""  # -q: not a line, MLflow's own included
    typo = subprocess.run(
        [*fedsample, "run", str(config), "--out", str(tmp_path / "t"), "--set", "tracking.tensorbord=true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert typo.returncode == 2
    assert len(typo.stderr.strip().splitlines()) == 1
    assert "tracking.tensorboard" in typo.stderr


def test_an_overwrite_whose_mlflow_store_does_not_open_leaves_the_previous_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_experiment(_config(), out, progress=_quiet())
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    (tmp_path / "a-file").write_text("not a folder")
    store = f"sqlite:///{tmp_path / 'a-file' / 'x.db'}"
    with pytest.raises(FedsampleError, match=r"'tracking.mlflow_uri'"):
        run_experiment(_config({"mlflow": True, "mlflow_uri": store}), out, overwrite=True, progress=_quiet())
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before


def test_a_run_directory_tracked_again_in_the_same_process_gets_a_working_store(tmp_path: Path) -> None:
    out = tmp_path / "run"
    for _ in range(2):  # the second --overwrite removes mlflow.db, which MLflow's kept engine pointed at
        said: list[str] = []
        progress = ProgressLine(stream=io.StringIO())
        progress.message = said.append  # type: ignore[method-assign,assignment]
        run_experiment(_config({"mlflow": True}), out, overwrite=True, progress=progress)
        assert not [line for line in said if "tracking" in line], said
        runs = _mlflow_runs(_sqlite(out), "tracked")
        assert len(runs) == 4
        assert all(run.info.status == "FINISHED" for run in runs.values())


def test_run_comparison_feeds_the_callback_and_the_trackers(tmp_path: Path) -> None:
    from fedsample.data.builders import FederationSpec, build_federation
    from fedsample.engine import ModelSpec
    from fedsample.experiments import run_comparison

    data = build_federation(FederationSpec(dataset="osmd-linear", partition="natural", num_clients=8, sigma=3.0))
    seen: list[int] = []
    run_comparison(
        data,
        ModelSpec("linear", data.sample_shape, 1),
        ["md"],
        tmp_path / "c",
        training={"rounds": 3, "num_sampled": 2, "local_steps": 1, "batch_size": 8},
        algorithm="minibatch-sgd",
        progress=_quiet(),
        on_round=lambda report: seen.append(report.round),
        tracking={"tensorboard": True},
    )
    assert seen == [0, 1, 2, 3]
    assert _tensorboard(tmp_path / "c", "md", 0)["weight_sum"].keys() == {1, 2, 3}


def flush_after(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The trackers' flush timer at ``seconds`` (0: every round written as it is reported; a long time: only
    the checkpoints and the end write)."""
    import importlib

    for name in ("tracking", "tracking.tensorboard_events", "tracking.mlflow_runs"):
        try:
            module = importlib.import_module(f"fedsample.experiments.{name}")
        except ImportError:  # (the trackers in one module)
            continue
        monkeypatch.setattr(module, "FLUSH_SECONDS", seconds, raising=False)
