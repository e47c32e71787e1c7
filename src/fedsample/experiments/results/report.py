"""Summary, plots and a Markdown report of a run directory, rebuilt from its saved files.

A run directory holds ``metrics.parquet`` / ``metrics.csv`` (:mod:`fedsample.experiments.results.metrics`)
and, written by the runner, ``config.toml`` (the resolved experiment config; its ``[report]``
table may set ``target_accuracy``, ``target_loss`` and ``rolling_window``) and ``runs.json`` (each
run's label, sampler, seed, parameters and privacy report). Both are optional here.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsample._imports import MissingDependencyError
from fedsample._io import write_text_atomic
from fedsample.errors import FedsampleError
from fedsample.experiments.results.bias import BIAS_FILE, bias_markdown
from fedsample.experiments.results.metrics_files import read_metrics
from fedsample.experiments.results.plots import plot_metrics
from fedsample.experiments.results.summary import SUMMARY_TEX, summarize
from fedsample.experiments.results.tables import summary_markdown, summary_notes, write_summary
from fedsample.experiments.rundir.directory import updating_run_directory
from fedsample.serialization import load_json

__all__ = [
    "CONFIG_NAME",
    "REPORT_NAME",
    "RUNS_NAME",
    "ReportSettings",
    "read_bias",
    "rebuild_plots",
    "write_report",
]

CONFIG_NAME = "config.toml"
RUNS_NAME = "runs.json"
REPORT_NAME = "report.md"
PLOTS_DIR = "plots"

_PLOT_CAPTIONS = {
    "train_loss.png": "Train loss",
    "test_accuracy.png": "Test accuracy",
    "distinct_clients.png": "Distinct clients per round",
    "distinct_labels.png": "Distinct labels per round",
    "simulated_time.png": "Training loss and test accuracy against simulated time",
}


@dataclass(frozen=True)
class ReportSettings:
    """The ``[report]`` table of ``config.toml`` (defaults when absent)."""

    target_accuracy: float | None = None
    target_loss: float | None = None
    rolling_window: int = 10


def rebuild_plots(run_dir: str | Path) -> list[Path]:
    """Redraw ``RUN_DIR/plots/*.png`` from the saved metrics; return the paths written."""
    directory = Path(run_dir)
    table = read_metrics(directory)
    config, _ = _read_config(directory)
    settings = _report_settings(config, directory / CONFIG_NAME)
    with updating_run_directory(directory):  # listed in its manifest, for --overwrite
        return plot_metrics(
            table, directory / PLOTS_DIR, rolling_window=settings.rolling_window, title=_name(config, directory)
        )


def write_report(run_dir: str | Path) -> Path:
    """Rebuild ``summary.csv``, ``summary.md``, ``summary.tex``, the plots and ``report.md`` of ``run_dir``;
    return the report's path."""
    directory = Path(run_dir)
    with updating_run_directory(directory):  # what is written is listed in its manifest, for --overwrite
        return _write_report(directory)


def _write_report(directory: Path) -> Path:
    table = read_metrics(directory)
    config, config_text = _read_config(directory)
    settings = _report_settings(config, directory / CONFIG_NAME)
    runs = _read_runs(directory / RUNS_NAME)
    # Read before anything is written: a bad bias.json leaves the directory as it was.
    measured = read_bias(directory)
    bias = bias_markdown(measured) if measured is not None else []
    rows = summarize(table, target_accuracy=settings.target_accuracy, target_loss=settings.target_loss)
    write_summary(rows, directory, bias=measured)
    title = _name(config, directory)
    try:
        plots = plot_metrics(table, directory / PLOTS_DIR, rolling_window=settings.rolling_window, title=title)
        missing_plots = None
    except MissingDependencyError as exc:  # matplotlib absent: everything but the figures
        plots, missing_plots = [], str(exc)

    lines = [f"# {title}", ""]
    description = config.get("description")
    if isinstance(description, str) and description.strip():
        lines += [description.strip(), ""]
    lines += ["## Settings", ""]
    if config_text is None:
        lines += [f"No `{CONFIG_NAME}` was saved with this run.", ""]
    else:
        lines += ["```toml", config_text.rstrip("\n"), "```", ""]
    lines += ["## Summary", "", summary_markdown(rows, bias=measured), ""]
    for note in summary_notes(rows, bias=measured):
        lines += [note, ""]
    lines += [f"The same table for a paper (LaTeX, booktabs): [{SUMMARY_TEX}]({SUMMARY_TEX}).", ""]
    lines += ["## Plots", ""]
    if missing_plots is not None:
        lines += [f"No plots were drawn: {missing_plots}", ""]
    if plots:
        lines += [
            "Each sampler keeps its colour, line style and marker in every figure; the lines of distinct clients "
            "and labels are shifted apart by a fraction of a round, so that equal counts stay visible. Bands stay "
            "inside what the metric can take (accuracy in [0, 1], losses and counts at least 0, a count's "
            "± 1 sd band within the seeds' own counts of the round).",
            "",
        ]
    for path in plots:
        relative = path.relative_to(directory).as_posix()
        lines += [f"![{_PLOT_CAPTIONS.get(path.name, path.stem)}]({relative})", ""]
    lines += _privacy_section(runs)
    lines += bias  # bias.json is written by the runner with [report] measure_bias = true
    lines += ["## Reproduce", ""]
    if config_text is None:
        lines += [f"Without `{CONFIG_NAME}` this run cannot be re-run from its directory.", ""]
    else:
        lines += ["```sh", f"fedsample run {(directory / CONFIG_NAME).as_posix()}", "```", ""]
    target = directory / REPORT_NAME
    write_text_atomic(target, "\n".join(lines))
    return target


def read_bias(run_dir: str | Path) -> Any:
    """The measured bias of ``run_dir`` (``bias.json``'s payload, :mod:`fedsample.experiments.results.bias`);
    ``None`` when the run did not measure it."""
    path = Path(run_dir) / BIAS_FILE
    return _read_json(path, "bias") if path.is_file() else None


def _read_config(directory: Path) -> tuple[dict[str, Any], str | None]:
    """The parsed ``config.toml`` and its text (``{}`` and ``None`` when absent)."""
    path = directory / CONFIG_NAME
    if not path.is_file():
        return {}, None
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text), text
    # ValueError: not UTF-8, not TOML, or an int of more than 4300 digits; RecursionError: nested too deep.
    except (OSError, ValueError, RecursionError) as exc:
        raise FedsampleError(f"The config file {str(path)!r} could not be read as TOML: {exc}.") from exc


def _report_settings(config: dict[str, Any], path: Path) -> ReportSettings:
    table = config.get("report", {})
    if not isinstance(table, dict):
        raise FedsampleError(f"The config file {str(path)!r} must hold [report] as a table. Got {table!r} instead.")
    accuracy, loss, window = table.get("target_accuracy"), table.get("target_loss"), table.get("rolling_window", 10)

    def real(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

    def bad(key: str, constraint: str, value: object) -> FedsampleError:
        return FedsampleError(
            f"The config file {str(path)!r} must set [report] {key} to {constraint}. Got {value!r} instead."
        )

    if accuracy is not None and not (real(accuracy) and 0 <= accuracy <= 1):
        raise bad("target_accuracy", "a float in the range [0, 1]", accuracy)
    if loss is not None and not (real(loss) and loss >= 0):
        raise bad("target_loss", "a finite float in the range [0, inf)", loss)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise bad("rolling_window", "an int in the range [1, inf)", window)
    return ReportSettings(
        target_accuracy=None if accuracy is None else float(accuracy),
        target_loss=None if loss is None else float(loss),
        rolling_window=window,
    )


def _name(config: dict[str, Any], directory: Path) -> str:
    name = config.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    return f"fedsample comparison: {directory.resolve().name}"


def _read_json(path: Path, what: str) -> Any:
    try:
        return load_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # as _read_config's
        raise FedsampleError(f"The {what} file {str(path)!r} could not be read as JSON: {exc}.") from exc


def _read_runs(path: Path) -> list[dict[str, Any]]:
    """The ``runs`` list of ``runs.json`` (empty when the file is absent)."""
    if not path.is_file():
        return []
    payload = _read_json(path, "runs")
    runs = payload.get("runs") if isinstance(payload, dict) else None
    if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
        raise FedsampleError(f"The runs file {str(path)!r} must hold an object with a 'runs' list of objects.")
    for run in runs:
        if run.get("privacy") is not None and not isinstance(run["privacy"], dict):
            raise FedsampleError(
                f"The runs file {str(path)!r} must hold each run's 'privacy' as an object or null. "
                f"Got {run['privacy']!r} for the run {run.get('label')!r} instead."
            )
    return runs


def _privacy_section(runs: list[dict[str, Any]]) -> list[str]:
    """A table of the privacy reports of ``runs`` (one row per label and report; seeds merged)."""
    groups: dict[tuple[str, str], tuple[dict[str, Any], list[str]]] = {}
    for run in runs:
        privacy = run.get("privacy")
        if privacy is None:
            continue
        key = (str(run.get("label", "")), json.dumps(privacy, sort_keys=True))
        groups.setdefault(key, (privacy, []))[1].append(str(run.get("seed", "?")))
    if not groups:
        return []
    lines = [
        "## Privacy",
        "",
        "| label | seeds | mechanism | ε per round | rounds | ε composed (basic) | ε if de-linked |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    assumptions = []
    for (label, _), (privacy, seeds) in groups.items():
        cells = [
            label.replace("|", "\\|"),
            ", ".join(seeds),
            str(privacy.get("mechanism", "")).replace("|", "\\|"),
            _epsilon(privacy.get("epsilon_per_round")),
            str(privacy.get("rounds", "")),
            _epsilon(privacy.get("epsilon_basic_composition")),
            _epsilon(privacy.get("epsilon_if_delinked")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
        assumption = privacy.get("delinked_assumption")
        if assumption and assumption not in assumptions:
            assumptions.append(assumption)
    lines.append("")
    lines += ["ε composed: basic composition over the rounds; ∞: the run is not private.", ""]
    if assumptions:
        lines += ["ε if de-linked holds only under the assumption: " + "; ".join(map(str, assumptions)) + ".", ""]
    return lines


def _epsilon(value: object) -> str:
    if value is None:
        return "∞"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.3g}"
    return str(value)
