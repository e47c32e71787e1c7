"""``fedsample run``: the JSON history of one sampler and one seed, end to end on embedded data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedsample.cli import main

FAST = ["--rounds", "3", "--num-clients", "10", "-m", "3", "--local-steps", "2", "--batch-size", "5", "-q"]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["run", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_run_prints_history_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, *FAST, "--sampler", "clustered-size", "--seed", "3")
    assert code == 0
    assert err == ""
    payload = json.loads(out)
    history = payload["history"]
    assert history["sampler"] == "clustered-size"
    assert history["seed"] == 3
    assert history["num_rounds"] == 3
    assert history["evaluations"]["round"] == [0, 1, 2, 3]
    assert len(history["rounds"]["distinct_clients"]) == 3
    # clustered sampling with equal sizes never repeats a client: m distinct every round
    assert history["rounds"]["distinct_clients"] == [3, 3, 3]
    assert all(0.0 <= a <= 1.0 for a in history["evaluations"]["test_accuracy"])
    assert payload["config"]["sampler"]["name"] == "clustered-size"
    assert payload["federation"]["num_clients"] == 10


def test_run_is_deterministic_and_seed_dependent(capsys: pytest.CaptureFixture[str]) -> None:
    first = json.loads(_run(capsys, *FAST, "--seed", "1")[1])["history"]
    second = json.loads(_run(capsys, *FAST, "--seed", "1")[1])["history"]
    other = json.loads(_run(capsys, *FAST, "--seed", "2")[1])["history"]
    first.pop("info"), second.pop("info"), other.pop("info")
    for h in (first, second, other):
        h["rounds"].pop("round_seconds")
    assert first == second
    assert first["evaluations"]["train_loss"] != other["evaluations"]["train_loss"]


def test_run_writes_output_file_atomically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "history.json"
    code, out, _ = _run(capsys, *FAST, "--output", str(target))
    assert code == 0
    assert out == ""
    assert json.loads(target.read_text())["history"]["num_rounds"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]  # no temporary file left behind


def test_run_regression_data_has_no_accuracy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "--dataset", "osmd-linear", "--num-clients", "20", "--rounds", "2", "-m", "3", "--algorithm",
        "minibatch-sgd", "--lr", "0.001", "-q",
    )  # fmt: skip
    history = json.loads(out)["history"]
    assert code == 0
    assert json.loads(out)["model"]["kind"] == "linear"
    assert all(a is None for a in history["evaluations"]["test_accuracy"])


@pytest.mark.parametrize(
    ("args", "parameter", "value"),
    [
        (["--rounds", "0"], "rounds", "0"),
        (["-m", "0"], "num_sampled", "0"),
        (["--lr", "-1"], "local_lr", "-1"),
        (["--sampler", "nope"], "sampler", "'nope'"),
        (["--alpha", "0"], "alpha", "0"),
        (["--num-clients", "0"], "num_clients", "0"),
        (["--seed", "-4"], "--seed", "-4"),
        (["--dataset", "mnist"], "path", "None"),
        (["--output", "/no/such/dir/h.json"], "--output", "/no/such/dir/h.json"),
        (["--server", "fedadam", "--server-param", "tau=-1"], "tau", "-1"),
        (["--server-param", "beta"], "--server-param", "'beta'"),
        (["--server-param", "nope=1"], "server", "nope"),
        (["--algorithm", "fedprox", "--mu", "-0.5"], "mu", "-0.5"),
        (["--algorithm-param", "=3"], "--algorithm-param", "'=3'"),
        (
            ["--sampler", "fedsampling", "--partition", "lognormal", "--importance", "uniform"],
            "federation",
            "importance",
        ),
    ],
)
def test_run_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], parameter: str, value: str
) -> None:
    code, out, err = _run(capsys, *FAST, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert parameter in lines[0]
    assert value in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("server", "params", "expected"),
    [
        ("sgd", [], {"lr": 1.0}),
        ("fedavgm", ["--server-param", "beta=0.5", "--server-param", "nesterov=true"], {"beta": 0.5, "nesterov": True}),
        ("fedadam", ["--server-lr", "0.01", "--server-param", "tau=0.001"], {"lr": 0.01, "tau": 0.001}),
        ("fedyogi", ["--server-lr", "0.01"], {"lr": 0.01}),
        ("fedadagrad", ["--server-lr", "0.01"], {"lr": 0.01}),
    ],
)
def test_run_server_optimizers(
    capsys: pytest.CaptureFixture[str], server: str, params: list[str], expected: dict[str, object]
) -> None:
    """Every server optimizer runs from the command line and its settings are recorded."""
    code, out, _ = _run(capsys, *FAST, "--server", server, *params)
    assert code == 0
    recorded = json.loads(out)["config"]["server"]
    assert recorded["name"] == server
    assert {key: recorded[key] for key in expected} == expected


def test_run_scaffold_and_fedprox_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """SCAFFOLD composes with a learning sampler; FedProx records its proximal weight."""
    code, out, _ = _run(capsys, *FAST, "--algorithm", "scaffold", "--sampler", "osmd")
    assert code == 0
    payload = json.loads(out)
    assert payload["config"]["algorithm"]["name"] == "scaffold"
    assert len(payload["history"]["rounds"]["distinct_clients"]) == 3
    code, out, _ = _run(capsys, *FAST, "--algorithm", "fedprox", "--mu", "0.3")
    assert code == 0
    assert json.loads(out)["config"]["algorithm"] == {"name": "fedprox", "mu": 0.3}


def test_run_fedsampling_reports_privacy(capsys: pytest.CaptureFixture[str]) -> None:
    """A FedSampling run's summary carries the privacy accounting: per round, composed, de-linked."""
    code, out, _ = _run(capsys, *FAST, "--sampler", "fedsampling", "--algorithm", "minibatch-sgd")
    assert code == 0
    privacy = json.loads(out)["privacy"]
    assert privacy["private"] is True
    assert privacy["rounds"] == 3
    assert privacy["epsilon_per_round"] == pytest.approx(3.0)
    assert privacy["epsilon_basic_composition"] == pytest.approx(9.0)
    assert privacy["epsilon_if_delinked"] == pytest.approx(3.0)
    assert "linked across rounds" in privacy["delinked_assumption"]
    code, out, _ = _run(capsys, *FAST, "--sampler", "fedsampling", "--param", "fedsampling.probability=1")
    assert code == 0
    privacy = json.loads(out)["privacy"]  # always truthful: no finite budget, written as null
    assert privacy["private"] is False
    assert privacy["epsilon_per_round"] is None
    code, out, _ = _run(capsys, *FAST)
    assert "privacy" not in json.loads(out)


def test_run_console_script_end_to_end(tmp_path: Path) -> None:
    """The installed console script runs the default federation (embedded digits) and exits 0."""
    script = Path(sys.executable).parent / "fedsample"
    target = tmp_path / "h.json"
    done = subprocess.run(
        [str(script), "run", "--rounds", "2", "-m", "2", "--local-steps", "1", "-o", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("fedsample run: md, 2 rounds on digits")
    assert json.loads(target.read_text())["history"]["num_rounds"] == 2
