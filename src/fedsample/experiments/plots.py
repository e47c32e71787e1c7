"""Figures of a comparison: training loss, test accuracy, distinct clients and labels per round,
and, with a simulated clock (docs/system.md), loss and accuracy against simulated time.

Needs the ``plot`` extra (matplotlib), imported only when a figure is drawn. Figures are built on
matplotlib's Agg canvas directly, without ``pyplot``, so no global backend or figure registry is
touched and nothing has to be closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._io import atomic_path
from fedsample.data._optional import require
from fedsample.errors import FedsampleError
from fedsample.experiments.metrics import MetricsTable, check_metrics_table, label_order, label_series

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_metrics", "rolling_mean"]

DPI = 100


def plot_metrics(
    table: Mapping[str, Any], out_dir: str | Path, *, rolling_window: int = 10, title: str | None = None
) -> list[Path]:
    """Write the PNG figures of a metrics table into ``out_dir`` and return their paths.

    ``train_loss.png`` (mean over seeds with a min-max band; raw and a trailing rolling mean over
    ``rolling_window`` evaluations), ``test_accuracy.png`` (skipped when accuracy is NaN
    throughout, i.e. regression), ``distinct_clients.png`` and ``distinct_labels.png`` (mean
    over seeds with a one-standard-deviation band; labels skipped for regression), and with a
    simulated clock (a ``simulated_seconds`` column) ``simulated_time.png``: the mean training loss
    (and test accuracy) over seeds against the mean simulated time over seeds. Each label keeps its
    colour in every figure.
    """
    checked = check_metrics_table(table, subject="The 'table' parameter of plot_metrics")
    if isinstance(rolling_window, bool) or not isinstance(rolling_window, int) or rolling_window < 1:
        raise FedsampleError(
            f"The 'rolling_window' parameter of plot_metrics must be an int in the range [1, inf). "
            f"Got {rolling_window!r} instead.",
            parameter="rolling_window",
        )
    require("matplotlib", extra="plot", package="matplotlib", owner="plot_metrics")
    directory = Path(out_dir)  # created by the first figure's write, once a run directory lists it
    labels = label_order(checked)
    colours = _colours(len(labels))
    written = []

    figure, (raw, smooth) = _figure(2, title)
    _bands(raw, checked, labels, colours, "train_loss", band="range")
    _bands(smooth, checked, labels, colours, "train_loss", band="range", window=rolling_window)
    raw.set_title("training loss (mean over seeds, min-max band)")
    smooth.set_title(f"rolling mean over {rolling_window} evaluations")
    finite = checked["train_loss"][np.isfinite(checked["train_loss"])]
    for axes in (raw, smooth):
        axes.set_ylabel("training loss (federated objective)")
        if axes.lines and (finite > 0).all():
            _log_y_axis(axes)
    written.append(_save(figure, directory / "train_loss.png"))

    if not np.isnan(checked["test_accuracy"]).all():
        figure, (axes,) = _figure(1, title)
        _bands(axes, checked, labels, colours, "test_accuracy", band="range")
        axes.set_ylabel("test accuracy")
        axes.set_title("test accuracy (mean over seeds, min-max band)")
        written.append(_save(figure, directory / "test_accuracy.png"))

    for column, what in (("distinct_clients", "clients"), ("distinct_labels", "labels")):
        if (checked[column] < 0).all():  # -1 throughout: regression has no labels
            continue
        figure, (axes,) = _figure(1, title)
        _bands(axes, checked, labels, colours, column, band="std")
        axes.set_ylabel(f"distinct {what} in the round's selection")
        axes.set_title(f"distinct {what} per round (mean over seeds, ± 1 std band)")
        written.append(_save(figure, directory / f"{column}.png"))
    if "simulated_seconds" in checked:
        accuracy = not np.isnan(checked["test_accuracy"]).all()
        figure, panels = _figure(2 if accuracy else 1, title)
        for axes, column in zip(panels, ("train_loss", "test_accuracy"), strict=False):
            _against_time(axes, checked, labels, colours, column)
        if panels[0].lines and (finite > 0).all():
            _log_y_axis(panels[0])
        written.append(_save(figure, directory / "simulated_time.png"))
    return written


def _against_time(axes: Axes, table: MetricsTable, labels: list[str], colours: list[Any], column: str) -> None:
    """Per label, ``column``'s mean over seeds at its evaluated rounds against the mean simulated time then."""
    for label, colour in zip(labels, colours, strict=True):
        series = label_series(table, label, column)
        elapsed = label_series(table, label, "simulated_seconds").values
        elapsed[:, series.rounds == 0] = 0.0  # the initial model
        shown = ~np.isnan(series.values).all(axis=0)
        if shown.any():
            axes.plot(
                np.nanmean(elapsed[:, shown], axis=0),
                np.nanmean(series.values[:, shown], axis=0),
                color=colour,
                label=label,
                linewidth=1.5,
            )
    axes.set_xlabel("simulated time (s)")
    axes.set_ylabel("training loss (federated objective)" if column == "train_loss" else "test accuracy")
    axes.set_title(f"{column.replace('_', ' ')} against simulated time (mean over seeds)")
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small")


def rolling_mean(values: FloatArray, window: int) -> FloatArray:
    """Trailing mean of the last ``window`` non-NaN values of each row (shorter windows at the start).

    >>> rolling_mean(np.array([[1.0, 3.0, np.nan, 5.0]]), 2).tolist()
    [[1.0, 2.0, nan, 4.0]]
    """
    out = np.full(values.shape, np.nan)
    for row, series in enumerate(values):
        present = np.flatnonzero(~np.isnan(series))
        sums = np.concatenate([[0.0], np.cumsum(series[present])])
        ends = np.arange(1, present.size + 1)
        starts = np.maximum(ends - window, 0)
        with np.errstate(invalid="ignore"):  # inf - inf of a diverged run: no mean to show
            out[row, present] = (sums[ends] - sums[starts]) / (ends - starts)
    return out


def _figure(panels: int, title: str | None) -> tuple[Figure, list[Axes]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0 * panels, 4.2), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = [figure.add_subplot(1, panels, i + 1) for i in range(panels)]
    if title:
        figure.suptitle(title)
    return figure, axes


def _colours(count: int) -> list[Any]:
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    return [colormaps["turbo"](x) for x in np.linspace(0.05, 0.95, count)]


def _bands(
    axes: Axes,
    table: MetricsTable,
    labels: list[str],
    colours: list[Any],
    column: str,
    *,
    band: str,
    window: int | None = None,
) -> None:
    """Per label, the mean over seeds as a line and a min-max (``range``) or ``std`` band around it."""
    for label, colour in zip(labels, colours, strict=True):
        series = label_series(table, label, column)
        values = series.values if window is None else rolling_mean(series.values, window)
        shown = ~np.isnan(values).all(axis=0)
        rounds, values = series.rounds[shown], values[:, shown]
        if rounds.size == 0:
            continue
        mean, std, low, high = _across_seeds(values)
        if band == "std":
            low, high = mean - std, mean + std
        axes.plot(rounds, mean, color=colour, label=label, linewidth=1.5)
        if values.shape[0] > 1:
            axes.fill_between(rounds, low, high, color=colour, alpha=0.2, linewidth=0)
    from matplotlib.ticker import MaxNLocator

    axes.set_xlabel("round")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small")


def _log_y_axis(axes: Axes) -> None:
    """A log y-axis labelled with plain numbers ("0.6") rather than "6 x 10^-1"."""
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        # LogFormatter decides which ticks get a label (all of them only over a narrow range).
        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:.3g}" if super().__call__(x, pos) else ""

    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(PlainLogFormatter())
    axes.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


def _across_seeds(values: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Mean, sample standard deviation (NaN for one seed), min and max over the seeds present per round."""
    present = ~np.isnan(values)
    counts = present.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean = np.where(present, values, 0.0).sum(axis=0) / counts
        spread = np.where(present, (values - mean) ** 2, 0.0).sum(axis=0) / np.where(counts > 1, counts - 1, 0)
    low = np.fmin.reduce(values, axis=0)
    high = np.fmax.reduce(values, axis=0)
    return mean, np.sqrt(spread), low, high


def _save(figure: Figure, path: Path) -> Path:
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png", dpi=DPI)
    return path
