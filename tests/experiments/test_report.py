"""The report of a run directory: settings, summary table, figures that exist, privacy only when a
run has it, reproduce line; config and runs files that are absent or malformed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fedsample import _io
from fedsample.engine.history import History
from fedsample.errors import FedsampleError
from fedsample.experiments.results import report
from fedsample.experiments.results.metrics import metrics_table, read_metrics, write_metrics
from fedsample.experiments.results.report import rebuild_plots, write_report
from fedsample.experiments.results.summary import summarize, summary_markdown

CONFIG = """\
name = "digits: md vs poisson"
description = "Two samplers, three seeds."

[report]
target_accuracy = 0.6
target_loss = 0.5
rolling_window = 2
"""

PRIVACY = {
    "mechanism": "randomized response on the clipped client size (paper 004, eq. 1)",
    "private": True,
    "size_threshold": 100,
    "response_probability": 0.75,
    "epsilon_per_round": 1.0986,
    "rounds": 6,
    "epsilon_basic_composition": 6.5916,
    "epsilon_if_delinked": 1.0986,
    "delinked_assumption": "answers of a client cannot be linked across rounds (client anonymity)",
}


def _history(label: str, seed: int, *, regression: bool = False) -> History:
    eval_rounds = np.arange(0, 7, 2)
    loss = np.array([2.0, 1.0, 0.6, 0.4]) + 0.05 * seed
    return History(
        label=label,
        sampler=label.split("-")[0],
        seed=seed,
        eval_rounds=eval_rounds,
        train_loss=loss,
        test_loss=loss + 0.1,
        test_accuracy=np.full(4, np.nan) if regression else 1.0 - loss / 2.5,
        distinct_clients=np.array([3, 4, 5, 4, 3, 5]),
        distinct_labels=np.full(6, -1) if regression else np.array([6, 7, 8, 7, 6, 9]),
        weight_sum=np.ones(6),
        round_seconds=np.full(6, 0.02),
        local_lr=np.full(6, 0.1),
    )


def _run_dir(tmp_path: Path, *, regression: bool = False) -> Path:
    histories = [
        _history(label, seed, regression=regression) for label in ("md", "fedsampling-rr") for seed in range(3)
    ]
    directory = tmp_path / "run"
    write_metrics(metrics_table(histories), directory)
    return directory


def _no_plots(*args: object, **kwargs: object) -> list[Path]:
    """Stands in for plot_metrics where a test is about the text (rendering dominates the time)."""
    return []


def _runs_json(directory: Path, privacy: dict[str, object] | None) -> None:
    runs = [
        {"label": label, "sampler": label, "seed": seed, "params": {}, "privacy": privacy if label != "md" else None}
        for label in ("md", "fedsampling-rr")
        for seed in range(3)
    ]
    (directory / "runs.json").write_text(json.dumps({"runs": runs, "info": {}}))


def test_full_report(tmp_path: Path) -> None:
    directory = _run_dir(tmp_path)
    (directory / "config.toml").write_text(CONFIG)
    _runs_json(directory, PRIVACY)
    path = write_report(directory)
    assert path == directory / "report.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# digits: md vs poisson\n\nTwo samplers, three seeds.\n")
    assert "```toml\n" + CONFIG + "```" in text
    rows = summarize(read_metrics(directory), target_accuracy=0.6, target_loss=0.5)
    assert summary_markdown(rows) in text
    assert "rounds to accuracy ≥ 0.6" in text
    assert (directory / "summary.md").read_text(encoding="utf-8") == summary_markdown(rows) + "\n"
    assert (directory / "summary.csv").is_file()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert links == [
        "plots/train_loss.png",
        "plots/test_accuracy.png",
        "plots/distinct_clients.png",
        "plots/distinct_labels.png",
    ]
    assert all((directory / link).is_file() for link in links)
    privacy = text[text.index("## Privacy") : text.index("## Reproduce")]
    assert "| fedsampling-rr | 0, 1, 2 | randomized response" in privacy  # seeds with one report share a row
    assert "| 1.1 | 6 | 6.59 | 1.1 |" in privacy
    assert "answers of a client cannot be linked across rounds" in privacy
    assert "| md |" not in privacy
    assert f"fedsample run {directory.as_posix()}/config.toml" in text
    assert not list(directory.rglob("*.tmp"))


def test_report_without_config_or_runs(tmp_path: Path) -> None:
    directory = _run_dir(tmp_path, regression=True)
    text = write_report(directory).read_text(encoding="utf-8")
    assert text.startswith("# fedsample comparison: run\n")
    assert "No `config.toml` was saved" in text
    assert "## Privacy" not in text
    assert "accuracy" not in text.split("## Summary")[1].split("\n\n")[1]  # regression: no accuracy columns
    links = re.findall(r"\]\((plots/[^)]+)\)", text)
    assert links == ["plots/train_loss.png", "plots/distinct_clients.png"]
    assert sorted(p.name for p in directory.iterdir()) == [
        "metrics.csv",
        "metrics.parquet",
        "plots",
        "report.md",
        "summary.csv",
        "summary.md",
        "summary.tex",
    ]


def test_no_privacy_section_when_every_report_is_null(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "plot_metrics", _no_plots)
    directory = _run_dir(tmp_path, regression=True)
    _runs_json(directory, None)
    (directory / "config.toml").write_text('name = "x"\n')
    text = write_report(directory).read_text(encoding="utf-8")
    assert "## Privacy" not in text
    assert "ε" not in text


def test_non_private_runs_show_infinite_epsilon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "plot_metrics", _no_plots)
    directory = _run_dir(tmp_path, regression=True)
    public = {**PRIVACY, "private": False, "epsilon_per_round": None, "epsilon_basic_composition": None}
    _runs_json(directory, {**public, "epsilon_if_delinked": None})
    text = write_report(directory).read_text(encoding="utf-8")
    assert "| ∞ | 6 | ∞ | ∞ |" in text


def test_rebuild_plots_uses_the_config_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[object, ...]] = []

    def record(table: object, out_dir: Path, *, rolling_window: int, title: str) -> list[Path]:
        calls.append((out_dir, rolling_window, title))
        return [out_dir / "train_loss.png"]

    monkeypatch.setattr(report, "plot_metrics", record)  # drawing itself: test_plots.py and the CLI tests
    directory = _run_dir(tmp_path, regression=True)
    (directory / "config.toml").write_text(CONFIG)
    assert rebuild_plots(directory) == [directory / "plots" / "train_loss.png"]
    assert calls == [(directory / "plots", 2, "digits: md vs poisson")]
    assert sorted(p.name for p in directory.iterdir()) == ["config.toml", "metrics.csv", "metrics.parquet"]


@pytest.mark.parametrize(
    ("config", "runs", "match"),
    [
        ("name = ", None, "could not be read as TOML"),
        ("report = 3\n", None, r"must hold \[report\] as a table"),
        ("[report]\nrolling_window = 0\n", None, r"rolling_window to an int in the range \[1, inf\)\. Got 0"),
        ("[report]\ntarget_accuracy = 2\n", None, "target_accuracy to a float in the range"),
        ("[report]\ntarget_loss = 'low'\n", None, r"target_loss to a finite float in the range \[0, inf\)\. Got 'low'"),
        ("[report]\ntarget_loss = -1\n", None, r"target_loss to a finite float in the range \[0, inf\)\. Got -1"),
        (None, "{not json", "could not be read as JSON"),
        (None, '{"runs": 3}', "'runs' list of objects"),
        (None, '{"runs": [{"label": "md", "privacy": 1}]}', "'privacy' as an object or null"),
    ],
)
def test_bad_config_or_runs_file_is_one_line(tmp_path: Path, config: str | None, runs: str | None, match: str) -> None:
    directory = _run_dir(tmp_path, regression=True)
    if config is not None:
        (directory / "config.toml").write_text(config)
    if runs is not None:
        (directory / "runs.json").write_text(runs)
    with pytest.raises(FedsampleError, match=match) as caught:
        write_report(directory)
    assert "\n" not in str(caught.value)
    assert str(directory) in str(caught.value)


def test_a_failed_rewrite_keeps_the_previous_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "plot_metrics", _no_plots)  # figures' atomic writes: test_plots.py
    directory = _run_dir(tmp_path, regression=True)
    write_report(directory)
    before = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}

    def failing_fsync(descriptor: int) -> None:
        raise OSError("I/O error")

    monkeypatch.setattr(_io.os, "fsync", failing_fsync)
    with pytest.raises(FedsampleError, match="I/O error"):  # one line naming the file (fedsample._io.WriteError)
        write_report(directory)
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == before


SMALL_RUN = """
name = "md-vs-oort"
seeds = 2

[federation]
dataset = "digits"
partition = "dirichlet"
num_clients = 12
alpha = 0.3

[model]
kind = "mlp"
hidden = 16

[training]
rounds = 3
num_sampled = 3
local_steps = 2
batch_size = 10

[[samplers]]
name = "md"

[[samplers]]
name = "oort"
label = "oort_1%"
"""


def test_a_run_writes_summary_tex_through_its_manifest_and_the_console_speaks_like_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedsample.cli import main

    config, directory = tmp_path / "small.toml", tmp_path / "run"
    config.write_text(SMALL_RUN)
    assert main(["run", str(config), "--out", str(directory)]) == 0
    console = capsys.readouterr().err
    listed = json.loads((directory / "manifest.json").read_text())["files"]
    assert "summary.tex" in listed
    tex = (directory / "summary.tex").read_text(encoding="utf-8")
    assert "\\toprule" in tex
    assert "oort\\_1\\%" in tex  # the label escaped
    summary = (directory / "summary.md").read_text(encoding="utf-8")
    report_text = (directory / "report.md").read_text(encoding="utf-8")
    assert "[summary.tex](summary.tex)" in report_text
    header, _, *rows = summary.splitlines()
    titles = [cell.strip() for cell in header.strip("|").split("|")]
    assert "final train loss" in titles
    assert "seconds / round" not in titles  # both samplers trained in one batch: a note, not a column
    assert "Wall time:" in report_text
    assert "final train loss" in console
    assert "objective" not in console
    assert "biased (not measured)" in console  # Oort flagged without measure_bias
    for row in rows:  # the console shows the report's cells
        cells = dict(zip(titles, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
        line = next(line for line in console.splitlines() if line.strip().startswith(cells["label"] + " "))
        for title in ("final train loss", "final test accuracy", "bias"):
            assert cells[title] in line
    assert {cells.split("|")[-2].strip() for cells in rows} == {"0 (unbiased)", "biased (not measured)"}
