"""A config with a ``[system]`` table: the clock's columns in the metrics, time to target in the summary,
the figure against simulated time, a trace relative to the config file, and configs without the
table that stay as they were (no clock column, no summary column)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample.errors import FedsampleError
from fedsample.experiments.build import build_experiment
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict, config_to_dict, load_config
from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.results.metrics import SYSTEM_COLUMNS, read_metrics
from fedsample.experiments.results.summary import SUMMARY_CSV, summarize, summary_markdown
from fedsample.experiments.runner import run_experiment

pytest.importorskip("matplotlib")

ROUNDS = 6


def _config(system: dict[str, Any] | None) -> ExperimentConfig:
    data: dict[str, Any] = {
        "name": "clock",
        "seeds": [0, 1],
        "federation": {"dataset": "osmd-linear", "num_clients": 12, "sigma": 3.0, "seed": 4},
        "algorithm": {"name": "minibatch-sgd"},
        "training": {"rounds": ROUNDS, "num_sampled": 3, "local_steps": 1, "batch_size": 10, "local_lr": 0.05},
        "samplers": [{"name": "md"}, {"name": "uniform"}],
        "report": {"target_loss": 1e6},
        "run": {"checkpoint_every": 0},
    }
    if system is not None:
        data["system"] = system
    return config_from_dict(data)


def _quiet() -> ProgressLine:
    return ProgressLine(stream=io.StringIO())


def test_a_run_with_a_deadline_records_the_clock_and_time_to_target(tmp_path: Path) -> None:
    cfg = _config({"compute": 0.5, "compute_sigma": 1.5, "reference_parameters": 10.0, "deadline": 60.0})
    outcome = run_experiment(cfg, tmp_path / "run", progress=_quiet())
    table = read_metrics(outcome.run_dir)
    assert set(SYSTEM_COLUMNS) <= set(table)
    later = table["round"] > 0
    assert table["missed_deadline"][later].sum() > 0
    assert np.all(table["late"][later] >= table["missed_deadline"][later])
    assert np.all(table["simulated_round_seconds"][later] <= 60.0)
    with (outcome.run_dir / SUMMARY_CSV).open() as handle:
        rows = list(csv.DictReader(handle))
    assert all(float(row["time_to_target_loss"]) == 0.0 for row in rows)  # the initial model reaches 1e6
    assert all(float(row["simulated_seconds_final"]) > 0 for row in rows)
    assert (outcome.run_dir / "plots" / "simulated_time.png").is_file()
    assert "simulated_time.png" in (outcome.run_dir / "report.md").read_text()


def test_time_to_target_is_the_simulated_time_of_the_first_round_reaching_it(tmp_path: Path) -> None:
    outcome = run_experiment(_config({"distribution": "constant"}), tmp_path / "run", progress=_quiet())
    table = read_metrics(outcome.run_dir)
    for row in summarize(table, target_loss=float(np.nanmedian(table["train_loss"]))):
        rows = table["label"] == row.label
        assert row.time_to_target_loss is not None
        if row.seeds_reached_target_loss:
            # Constant systems and rounds of the same size: time is rounds x one round's time.
            per_round = float(np.nanmax(table["simulated_round_seconds"][rows]))
            assert row.time_to_target_loss == pytest.approx(row.rounds_to_target_loss * per_round)
    assert "simulated s to train loss" in summary_markdown(summarize(table, target_loss=1.0))


def test_without_a_system_table_nothing_changes(tmp_path: Path) -> None:
    cfg = _config(None)
    assert cfg.system is None
    assert "system" not in config_to_dict(cfg)
    outcome = run_experiment(cfg, tmp_path / "run", progress=_quiet())
    assert not set(SYSTEM_COLUMNS) & set(read_metrics(outcome.run_dir))
    header = (outcome.run_dir / SUMMARY_CSV).read_text().splitlines()[0]
    assert "time_to_target" not in header
    assert "simulated_seconds" not in header
    assert not (outcome.run_dir / "plots" / "simulated_time.png").exists()


def test_an_empty_system_table_turns_the_clock_on_and_round_trips() -> None:
    cfg = _config({})
    assert cfg.system is not None
    assert config_from_dict(config_to_dict(cfg)) == cfg
    assert build_experiment(cfg).participation.system is not None


def test_a_trace_is_relative_to_the_config_file_and_checked_before_training(tmp_path: Path) -> None:
    rows = "".join(f"{i},0.01,{1 + i},{10 + i}\n" for i in range(12))
    (tmp_path / "devices.csv").write_text("client,compute,upload,download\n" + rows)
    config = tmp_path / "c.toml"
    body = (
        'name = "t"\n[federation]\ndataset = "osmd-linear"\nnum_clients = 12\n'
        '[[samplers]]\nname = "md"\n[system]\ntrace = "devices.csv"\n'
    )
    config.write_text(body)
    cfg = load_config(config)
    assert cfg.system is not None
    assert cfg.system.trace == str(tmp_path / "devices.csv")
    assert build_experiment(cfg).participation.system is not None
    (tmp_path / "devices.csv").write_text("client,compute,upload,download\n0,1,1,1\n")
    with pytest.raises(FedsampleError, match=r"'system\.trace' parameter .* none for client 1"):
        build_experiment(load_config(config))
