"""The policies for unknown rates and the availability processes from the command line: ``fedsample run
--set participation.KEY=VALUE`` and ``fedsample stats`` flags, declared once in ``[participation]``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from cli_helpers import run_cli

CONFIG = """
name = "tiny-unknown-participation"
seeds = 1

[federation]
dataset = "digits"
partition = "dirichlet"
num_clients = 10

[model]
kind = "softmax"

[training]
rounds = 4
num_sampled = 10
local_steps = 1
batch_size = 5

[[samplers]]
name = "full"

[run]
checkpoint_every = 2
"""

STATS = ["stats", "--sizes", "10,20,30,40,50", "-m", "5", "--samplers", "full", "--monte-carlo", "300"]


@pytest.mark.parametrize(
    "sets",
    [
        ["participation.policy=mifa", "participation.availability=0.5", "participation.availability_process=markov"],
        [
            "participation.policy=fedau",
            "participation.fedau_cutoff=3",
            "participation.availability=0.4",
            "participation.availability_process=cyclic",
            "participation.cyclic_period=5",
            "participation.availability_label_alpha=0.3",
        ],
    ],
)
def test_run_takes_the_new_keys_from_set(sets: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    argv = ["run", str(config), "--out", str(out), "-q", *[item for s in sets for item in ("--set", s)]]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    resolved = tomllib.loads((out / "config.toml").read_text())["participation"]
    for item in sets:
        key, _, value = item.partition("=")
        assert str(resolved[key.split(".")[1]]) == value
    # The run resumes from its checkpoint with the policy's state (the memory or the intervals).
    code, _, err = run_cli(["run", "--resume", str(out), "-q"], capsys)
    assert code == 0, err


def test_stats_reports_the_new_policies(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--availability", "0.5", "--availability-process", "markov", "--markov-off-to-on", "0.2", "--json"]
    for policy in ("fedau", "mifa", "fedvarp"):
        code, out, err = run_cli([*STATS, *flags, "--policy", policy], capsys)
        assert code == 0, err
        payload = json.loads(out[out.index("{") :])
        assert list(payload["participation"]["samplers"]["full"]["policies"]) == [policy]


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        (["--availability-process", "markof"], "Did you mean 'markov'?"),
        (["--cyclic-period", "1"], "must be an int in the range [2, 1000000000]. Got 1"),
        (["--markov-off-to-on", "0"], "must be a float in the range (0, 1]. Got 0.0"),
        (["--fedau-cutoff", "0"], "'--fedau-cutoff' parameter must be an int in the range [1, 1000000000]"),
        (["--policy", "fedvarpp"], "Did you mean 'fedvarp'?"),
        (["--availability-label-alpha", "0.1"], "left out: fedsample stats has no labels"),
    ],
)
def test_bad_values_are_one_line(extra: list[str], shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli([*STATS, "--availability", "0.5", *extra], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert shown in err


def test_bad_keys_in_a_config_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text(CONFIG)
    code, _, err = run_cli(["run", str(config), "--set", "participation.availability_process=hidden-markov"], capsys)
    assert code == 2
    assert err.count("\n") == 1, err
    assert "participation.availability_process" in err
