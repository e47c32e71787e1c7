"""``fedsample run [PRESET | CONFIG]``: a comparison into a run directory, end to end on embedded data.

Checked: the run directory's contents (resolved config, Parquet and CSV metrics, summary, non-empty
PNG plots, report, runs.json, sampler states), determinism, every override, FedSampling's privacy
report, suites of comparisons, the quadratic preset, the default preset, and bad input (one line,
exit status 2, nothing half-written).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import digits_config, run_cli, run_script
from fedsample.cli import main
from fedsample.experiments.config.reading import load_config
from fedsample.experiments.presets.catalogue import PRESETS
from fedsample.experiments.results.metrics import read_metrics

CONFIG = digits_config(
    description="two samplers, two seeds, three rounds",
    tables="""
[[samplers]]
name = "md"

[[samplers]]
name = "clustered-size"
label = "clustered (size)"

[report]
target_accuracy = 0.3

[run]
checkpoint_every = 1
""",
)


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return path


def _metrics_without_timing(directory: Path) -> dict[str, np.ndarray]:
    table = read_metrics(directory)
    table.pop("round_seconds")
    return table


def test_run_directory_holds_every_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, stdout, err = run_cli(["run", str(_config(tmp_path)), "--out", str(out)], capsys)
    assert code == 0, err
    assert stdout == ""
    assert "md" in err
    assert "clustered (size)" in err
    assert "report:" in err
    names = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    expected = {
        "config.toml",
        "metrics.parquet",
        "metrics.csv",
        "summary.csv",
        "summary.md",
        "report.md",
        "runs.json",
        "plots/train_loss.png",
        "plots/test_accuracy.png",
        "plots/distinct_clients.png",
        "plots/distinct_labels.png",
    }
    assert expected <= names
    assert not any(".tmp" in name for name in names)
    assert "checkpoint.npz" not in names  # removed once the run is complete
    # the resolved config: every default filled in, and it loads back to the run's config
    resolved = tomllib.loads((out / "config.toml").read_text())
    assert resolved["training"]["lr_decay"] == 1.0
    assert resolved["algorithm"] == {"name": "fedavg"}
    assert load_config(out / "config.toml").name == "tiny"
    # per-round metrics: 2 labels x 2 seeds x (3 rounds + the initial model)
    table = read_metrics(out)
    assert len(table["round"]) == 16
    assert set(table["label"]) == {"md", "clustered (size)"}
    for png in (out / "plots").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 5000
    report = (out / "report.md").read_text()
    assert "clustered (size)" in report
    assert "plots/train_loss.png" in report
    runs = json.loads((out / "runs.json").read_text())
    assert runs["complete"] is True
    assert [(r["label"], r["seed"]) for r in runs["runs"]] == [
        ("md", 0),
        ("md", 1),
        ("clustered (size)", 0),
        ("clustered (size)", 1),
    ]
    assert all(r["privacy"] is None for r in runs["runs"])
    # the saved sampler states are read by fedsample stats
    state = out / runs["runs"][0]["state"]
    assert main(["stats", "--sampler-state", str(state), "--json"]) == 0
    capsys.readouterr()


def test_same_config_and_seed_give_identical_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(_config(tmp_path))
    for name in ("a", "b"):
        assert run_cli(["run", config, "--out", str(tmp_path / name), "-q"], capsys)[0] == 0
    first, second = _metrics_without_timing(tmp_path / "a"), _metrics_without_timing(tmp_path / "b")
    assert first.keys() == second.keys()
    for column in first:
        np.testing.assert_array_equal(first[column], second[column], err_msg=column)


def test_overrides_reach_the_resolved_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, _, err = run_cli(
        [
            "run", str(_config(tmp_path)), "--out", str(out), "-q",
            "--sampler", "osmd", "--sampler", "md", "--param", "osmd.eta=0.01",
            "--algorithm", "scaffold", "--server", "fedadam", "--server-lr", "0.01", "--server-param", "tau=0.001",
            "--seeds", "1", "--rounds", "2", "-m", "2", "--lr", "0.05", "--num-clients", "8",
            "--set", "report.rolling_window=3", "--centralized",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    config = tomllib.loads((out / "config.toml").read_text())
    assert config["samplers"][0]["name"] == "osmd"
    assert config["samplers"][0]["eta"] == 0.01
    assert config["algorithm"]["name"] == "scaffold"
    assert config["server"]["name"] == "fedadam"
    assert config["server"]["lr"] == 0.01
    assert config["server"]["tau"] == 0.001
    assert config["seeds"] == [0]
    assert config["training"]["rounds"] == 2
    assert config["training"]["num_sampled"] == 2
    assert config["training"]["local_lr"] == 0.05
    assert config["federation"]["num_clients"] == 8
    assert config["report"]["rolling_window"] == 3
    assert config["baselines"]["centralized"] is True
    assert set(read_metrics(out)["label"]) == {"osmd", "md", "centralized"}


def test_fedsampling_run_reports_its_privacy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, _, err = run_cli(
        [
            "run", str(_config(tmp_path)), "--out", str(out), "-q", "--sampler", "fedsampling",
            "--algorithm", "minibatch-sgd", "--seeds", "1",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    (run,) = json.loads((out / "runs.json").read_text())["runs"]
    privacy = run["privacy"]
    assert privacy["epsilon_per_round"] == pytest.approx(3.0)
    assert privacy["rounds"] == 3
    assert privacy["epsilon_basic_composition"] == pytest.approx(9.0)
    assert "linked across rounds" in privacy["delinked_assumption"]
    report = (out / "report.md").read_text()
    assert "rivacy" in report


def test_a_preset_suite_runs_each_part_into_its_own_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "suite"
    code, _, err = run_cli(
        ["run", "impact-md-vs-uniform", "--out", str(out), "-q", "--rounds", "1", "--seeds", "1"], capsys
    )
    assert code == 0, err
    parts = json.loads((out / "suite.json").read_text())["parts"]
    assert len(parts) == 4
    for part in parts:
        assert json.loads((out / part / "runs.json").read_text())["complete"]
    index = (out / "report.md").read_text()
    assert all(f"({part}/report.md)" in index for part in parts)


def test_the_default_preset_runs_without_a_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "default"
    code, _, err = run_cli(["run", "--out", str(out), "-q", "--rounds", "1", "--seeds", "1"], capsys)
    assert code == 0, err
    assert load_config(out / "config.toml").name == "default"


def test_the_quadratic_preset_writes_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "quadratic"
    code, _, err = run_cli(["run", "impact-quadratic", "--out", str(out), "-q"], capsys)
    assert code == 0, err
    assert (out / "quadratic.json").is_file()
    assert (out / "plots" / "quadratic.png").is_file()
    assert (out / "report.md").is_file()


def test_presets_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(PRESETS)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["no-such-preset"], "'no-such-preset'"),
        (["CONFIG", "--rounds", "0"], "training.rounds"),
        (["CONFIG", "--set", "training.round=3"], "training.round"),
        (["CONFIG", "--set", "nonsense"], "nonsense"),
        (["CONFIG", "--param", "nope.eta=1"], "'nope'"),
        (["CONFIG", "--param", "md"], "--param"),
        (["CONFIG", "--server-param", "beta"], "--server-param"),
        (["CONFIG", "--sampler", "nope"], "nope"),
        (["CONFIG", "--full"], "--full"),
        (["clustered-mnist-shards", "--full"], "--data-dir"),
        (["--resume"], "--resume"),
        (["CONFIG", "--dataset", "mnist"], "federation"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    config = str(_config(tmp_path))
    out = tmp_path / "never"
    code, stdout, err = run_cli(["run", *[config if a == "CONFIG" else a for a in args], "--out", str(out)], capsys)
    assert code == 2
    assert stdout == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_a_bad_config_file_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, CONFIG.replace("alpha = 0.5", "alpha = -1"))
    code, _, err = run_cli(["run", str(path), "--out", str(tmp_path / "x")], capsys)
    assert code == 2
    assert "federation.alpha" in err
    assert "-1" in err
    assert len(err.strip().splitlines()) == 1


def test_an_existing_run_is_not_replaced_without_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, out = str(_config(tmp_path)), tmp_path / "run"
    assert run_cli(["run", config, "--out", str(out), "-q", "--seeds", "1"], capsys)[0] == 0
    before = (out / "metrics.csv").read_bytes()
    code, _, err = run_cli(["run", config, "--out", str(out), "-q", "--seeds", "1"], capsys)
    assert code == 2
    assert "--overwrite" in err
    assert (out / "metrics.csv").read_bytes() == before
    assert run_cli(["run", config, "--out", str(out), "-q", "--seeds", "1", "--overwrite"], capsys)[0] == 0
    # a directory holding other files is never deleted
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = run_cli(["run", config, "--out", str(other), "--overwrite"], capsys)
    assert code == 2
    assert (other / "notes.txt").read_text() == "mine"


def test_resume_of_a_complete_run_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert run_cli(["run", str(_config(tmp_path)), "--out", str(out), "-q", "--seeds", "1"], capsys)[0] == 0
    before = (out / "metrics.csv").read_bytes()
    code, _, err = run_cli(["run", "--resume", str(out)], capsys)
    assert code == 0, err
    assert "nothing to resume" in err
    assert (out / "metrics.csv").read_bytes() == before


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (lambda path: None, "which does not exist"),
        (lambda path: path.write_text("not a run"), "which is not a directory"),
        (lambda path: path.mkdir(), "which holds no config.toml"),
    ],
    ids=["missing", "a-file", "no-config"],
)
def test_resume_names_the_directory_it_was_given(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[Path], object],
    found: str,
) -> None:
    """`run --resume runs/x` says what is wrong with runs/x (it said 'Got none' when runs/x did not exist),
    in one line with exit status 2, and writes nothing."""
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "runs-x")
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["run", "--resume", "runs-x"], ["run", "--resume", "--out", "runs-x"]):
        code, out, err = run_cli(argv, capsys)
        assert (code, out) == (2, "")
        assert err.count("\n") == 1, err
        assert "Traceback" not in err, err
        assert f"Got 'runs-x', {found}, instead." in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_console_script_end_to_end(tmp_path: Path, fedsample_script: Path) -> None:
    """The installed console script runs a config and exits 0."""
    out = tmp_path / "run"
    done = run_script(
        fedsample_script, "run", str(_config(tmp_path)), "--out", str(out), "--seeds", "1", "--rounds", "2", timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "tiny: done in" in done.stderr
    assert json.loads((out / "runs.json").read_text())["complete"]
