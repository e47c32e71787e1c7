"""``fedsample plot`` and ``fedsample report``: rebuilt files and printed paths, the installed console
script end to end, and one-line errors with exit status 2 for bad run directories."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_cli, run_script
from fedsample.engine.history import History
from fedsample.experiments.results.metrics import metrics_table, write_metrics


def _run_dir(tmp_path: Path) -> Path:
    """A regression comparison (two figures: the cheapest to draw) of two samplers and two seeds."""
    histories = [
        History(
            label=label,
            sampler=label,
            seed=seed,
            eval_rounds=np.array([0, 2, 4]),
            train_loss=np.array([1.0, 0.5, 0.3]) * (1 + 0.1 * seed),
            test_loss=np.array([1.1, 0.6, 0.4]),
            test_accuracy=np.full(3, np.nan),
            distinct_clients=np.array([3, 4, 4, 2]) + seed,
            distinct_labels=np.full(4, -1),
            weight_sum=np.ones(4),
            round_seconds=np.full(4, 0.01),
            local_lr=np.full(4, 0.05),
        )
        for label in ("md", "uniform")
        for seed in range(2)
    ]
    directory = tmp_path / "run"
    write_metrics(metrics_table(histories), directory)
    return directory


def test_plot_prints_the_figures_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = _run_dir(tmp_path)
    code, out, err = run_cli(["plot", str(directory)], capsys)
    assert (code, err) == (0, "")
    assert out.splitlines() == [str(directory / "plots" / name) for name in ("train_loss.png", "distinct_clients.png")]
    assert all(Path(line).is_file() for line in out.splitlines())
    assert not (directory / "report.md").exists()


def test_report_with_the_console_script(tmp_path: Path, fedsample_script: Path) -> None:
    directory = _run_dir(tmp_path)
    (directory / "metrics.parquet").unlink()  # the CSV alone is enough
    result = run_script(fedsample_script, "report", str(directory))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"{directory / 'report.md'}\n"
    text = (directory / "report.md").read_text(encoding="utf-8")
    assert "| md | md | 2 | 4 |" in text
    for name in ("summary.csv", "summary.md", "plots/train_loss.png", "plots/distinct_clients.png"):
        assert (directory / name).is_file()


def _malformed(tmp_path: Path) -> Path:
    directory = _run_dir(tmp_path)
    (directory / "metrics.parquet").unlink()
    path = directory / "metrics.csv"
    path.write_text(path.read_text().replace("round", "rnd", 1))
    return directory


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp_path: tmp_path / "absent", "does not exist"),
        (lambda tmp_path: tmp_path, "has no metrics.parquet or metrics.csv"),
        (_malformed, "must have the column 'round'"),
    ],
    ids=["missing-dir", "no-metrics", "malformed-metrics"],
)
def test_bad_run_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, make: object, message: str
) -> None:
    directory = make(tmp_path)  # type: ignore[operator]
    code, out, err = run_cli([command, str(directory)], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith(f"fedsample {command}: error: ")
    assert err.count("\n") == 1
    assert message in err


def test_missing_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["report"], capsys)
    assert code == 2
    assert err.count("\n") == 1


def test_report_without_matplotlib_writes_everything_but_the_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the plot extra, report.md and the summary are written, the report says why there are no
    figures, and the command notes it on stderr and exits 0."""
    directory = _run_dir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    code, out, err = run_cli(["report", str(directory)], capsys)
    assert code == 0
    assert out.strip() == str(directory / "report.md")
    assert err.count("\n") == 1
    assert "note:" in err
    assert "pip install 'fedsample[plot]'" in err
    report = (directory / "report.md").read_text()
    assert "No plots were drawn" in report
    assert "![" not in report
    assert (directory / "summary.md").is_file()
    assert not (directory / "plots").exists()
