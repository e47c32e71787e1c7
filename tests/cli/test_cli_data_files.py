"""``fedsample run --dataset FILE``: a user's data file as the federation, end to end, and ``--dataset``
still taking the built-in names (with ``--full`` too)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedsample.experiments.suite as suite_module
from cli_helpers import run_cli
from fedsample.experiments.config.reading import ExperimentConfig
from fedsample.experiments.results.metrics import read_metrics


def _small_npz(path: Path) -> Path:
    """Eight natural clients of 20 rows: 6 features, 3 classes."""
    rng = np.random.default_rng(0)
    with path.open("wb") as handle:  # np.savez given a name not ending in ".npz" would append it
        np.savez(
            handle,
            client=np.repeat(np.arange(8), 20),
            x=rng.normal(size=(160, 6)).astype(np.float32),
            y=rng.integers(0, 3, 160),
        )
    return path


def test_run_on_a_data_file_writes_a_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    data = _small_npz(tmp_path / "small.npz")
    argv = ["run", "--dataset", "small.npz", "--set", "training.rounds=2", "--set", "model.kind=mlp"]
    code, out, err = run_cli([*argv, "--sampler", "md", "-q", "--out", "run"], capsys)
    assert code == 0, err
    assert (out, err) == ("", "")
    config = tomllib.loads((tmp_path / "run" / "config.toml").read_text())
    # relative to the working directory, recorded absolute; the client column gives the natural clients
    assert config["federation"]["dataset"] == str(data.resolve())
    assert config["federation"]["partition"] == "natural"
    metrics = read_metrics(tmp_path / "run")
    assert sorted(set(metrics["round"].tolist()))[-1] == 2
    assert (tmp_path / "run" / "summary.csv").is_file()
    assert not (tmp_path / "runs").exists()


def _captured(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[ExperimentConfig]:
    """The configs ``fedsample run ARGV`` would run (the suite runner replaced by a recorder)."""
    ran: list[ExperimentConfig] = []

    def record(suite: list[tuple[str, ExperimentConfig]], *args: Any, **kwargs: Any) -> None:
        ran.extend(config for _, config in suite)

    monkeypatch.setattr(suite_module, "run_suite", record)
    code, _, err = run_cli(["run", *argv, "-q"], capsys)
    assert code == 0, err
    return ran


def test_dataset_takes_the_built_in_names_and_data_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (config,) = _captured(["--dataset", "mnist1d"], monkeypatch, capsys)
    assert (config.federation.dataset, config.federation.partition) == ("mnist1d", "dirichlet")
    (config,) = _captured(["--dataset", "osmd-linear", "--model", "linear"], monkeypatch, capsys)
    assert config.federation.partition == "natural"
    argv = ["clustered-mnist-shards", "--full", "--data-dir", "/k", "--dataset", "kmnist"]
    assert {(c.federation.dataset, c.federation.path) for c in _captured(argv, monkeypatch, capsys)} == {
        ("kmnist", "/k")
    }
    _small_npz(tmp_path / "small.NPZ")
    (config,) = _captured(["--dataset", "small.NPZ"], monkeypatch, capsys)
    assert (config.federation.dataset, config.federation.partition) == (str(tmp_path / "small.NPZ"), "natural")


def test_dataset_flag_is_a_plain_string_named_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["run", "--help"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    assert "--dataset NAME|FILE" in flat
    assert "or a path to a .npz, .csv, .parquet or .pq file; a data file is relative to the working directory" in flat


def test_a_file_with_test_path_given_by_set_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "train.npz", x=rng.normal(size=(40, 2)), y=rng.integers(0, 2, 40))
    np.savez(tmp_path / "test.npz", x=rng.normal(size=(10, 2)), y=rng.integers(0, 2, 10))
    argv = ["--set", "federation.dataset=train.npz", "--set", "federation.test_path=test.npz", "--num-clients", "4"]
    (config,) = _captured(argv, monkeypatch, capsys)
    assert config.federation.dataset == str(tmp_path / "train.npz")
    assert config.federation.test_path == str(tmp_path / "test.npz")
    assert config.federation.partition == "dirichlet"
