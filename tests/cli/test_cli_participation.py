"""Availability and failures on the command line: ``fedsample stats --dropout ...`` and
``fedsample run --set participation.dropout=...`` (failure counts in the run's metrics files)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_cli
from fedsample.experiments.results.metrics import FAILURE_COLUMNS, read_metrics

STATS = ["stats", "--sizes", "10,20,30,40,50", "-m", "2", "--samplers", "md,uniform", "--monte-carlo", "1500"]


def test_stats_reports_each_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli([*STATS, "--dropout", "0.3", "--json"], capsys)
    assert (code, err) == (0, "")
    report = json.loads(out)["participation"]
    assert report["num_rounds"] == 1500
    for name in ("md", "uniform"):
        policies = report["samplers"][name]["policies"]
        assert set(policies) == {"renormalise", "inverse-probability", "ignore"}
        assert policies["inverse-probability"]["max_abs_z"] < 4.5  # 5 clients x 2 samplers: false failure < 1e-4
        ignore = policies["ignore"]
        # "ignore" loses the failed clients' weight: E[sum w'] = 1 - d.
        assert abs(ignore["weight_sum"] - 0.7) < 4.5 * ignore["weight_sum_stderr"]
    code, text, err = run_cli([*STATS, "--availability", "0.8", "--policy", "inverse-probability"], capsys)
    assert (code, err) == (0, "")
    assert "availability and failures (1500 Monte-Carlo rounds" in text
    assert "renormalise" not in text.split("availability and failures")[1]


def test_stats_with_a_trace_needs_estimated_rates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start,end\n0,0,1000\n1,0,500\n2,100,2000\n3,0,2000\n4,0,2000\n")
    argv = [*STATS, "--availability-trace", str(trace), "--policy", "inverse-probability", "--json"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    assert "'--return-rates'" in err
    code, out, err = run_cli([*argv, "--return-rates", "estimated"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["participation"]["samplers"]["md"]["failures_per_round"]["unavailable"] > 0


@pytest.mark.parametrize(
    ("extra", "option", "shown"),
    [
        (["--availability", "0"], "--availability", "0.0"),
        (["--availability", "1.5"], "--availability", "1.5"),
        (["--dropout", "1"], "--dropout", "1.0"),
        (["--dropout", "-0.2"], "--dropout", "-0.2"),
        (["--over-selection", "-1"], "--over-selection", "-1.0"),
        (["--policy", "mean"], "--policy", "'mean'"),
        (["--return-rates", "guessed"], "--return-rates", "'guessed'"),
        (["--redraws", "-3"], "--redraws", "-3"),
        (["--availability-trace", "missing.csv"], "--availability-trace", "missing.csv"),
        (["--availability", "0.5", "--availability-trace", "t.csv"], "--availability", "0.5"),
        (["--dropout", "often"], "--dropout", "'often'"),
    ],
)
def test_stats_bad_failure_options_are_one_line(
    extra: list[str], option: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli([*STATS, *extra], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert option in err
    assert shown in err


CONFIG = """
name = "tiny-failures"
seeds = 2

[federation]
dataset = "digits"
partition = "dirichlet"
num_clients = 10

[model]
kind = "softmax"

[training]
rounds = 4
num_sampled = 4
local_steps = 1
batch_size = 5

[[samplers]]
name = "md"

[run]
checkpoint_every = 0
"""


def test_run_records_failures_in_the_metrics_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    sets = ["participation.dropout=0.3", "participation.policy=inverse-probability", "participation.availability=0.7"]
    argv = ["run", str(config), "--out", str(out), "-q", *[item for s in sets for item in ("--set", s)]]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    resolved = tomllib.loads((out / "config.toml").read_text())
    assert resolved["participation"]["dropout"] == 0.3
    assert resolved["participation"]["policy"] == "inverse-probability"
    table = read_metrics(out)
    header = (out / "metrics.csv").read_text().split("\n", 1)[0].split(",")
    for name in FAILURE_COLUMNS:
        assert name in header
        assert table[name][table["round"] == 0].tolist() == [-1, -1]
        assert np.all(table[name][table["round"] > 0] >= 0)
    assert table["dropped"][table["round"] > 0].sum() > 0
    assert table["unavailable"][table["round"] > 0].sum() > 0
