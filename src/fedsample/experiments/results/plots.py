"""Figures of a comparison: train loss, test accuracy, distinct clients and labels per round,
and, with a simulated clock (docs/system.md), loss and accuracy against simulated time.

Needs the ``plot`` extra (matplotlib), imported only when a figure is drawn. Figures are built on
matplotlib's Agg canvas directly, without ``pyplot``, so no global backend or figure registry is
touched and nothing has to be closed.

Every label stays visible where lines coincide: each has its own colour, line style and marker
(:func:`line_styles`; the markers of the labels fall on different rounds), and the lines of an
integer metric (distinct clients, distinct labels) are shifted by a fraction of a round
(:data:`INTEGER_OFFSET`) so that equal counts lie side by side. A band never leaves the metric's
possible range (:func:`band`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._imports import require
from fedsample._io import atomic_path
from fedsample.errors import FedsampleError
from fedsample.experiments.results.metrics import (
    INT_COLUMNS,
    MetricsTable,
    check_metrics_table,
    column_range,
    label_order,
    label_series,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["INTEGER_OFFSET", "LineStyle", "band", "line_styles", "plot_metrics", "rolling_mean"]

DPI = 100
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
# About this many markers on each line (fewer with many labels: two points apart from label to
# label), each label's first on a different point.
MARKERS_PER_LINE = 12
# The lines of an integer metric spread over this fraction of a round, the first label leftmost.
INTEGER_OFFSET = 0.3


class LineStyle(NamedTuple):
    """How one label is drawn in every figure."""

    colour: Any
    linestyle: str
    marker: str


def line_styles(count: int) -> list[LineStyle]:
    """A colour, a line style and a marker per label; no two labels share the pair (style, marker)
    below 32 labels, nor a colour.

    >>> [(s.linestyle, s.marker) for s in line_styles(3)]
    [('-', 'o'), ('--', 's'), ('-.', '^')]
    """
    return [
        LineStyle(colour, LINE_STYLES[(k + k // len(MARKERS)) % len(LINE_STYLES)], MARKERS[k % len(MARKERS)])
        for k, colour in enumerate(_colours(count))
    ]


def band(column: str, values: FloatArray, kind: str) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The mean over seeds (rows of ``values``) of ``column`` per round, and a band around it.

    ``kind`` is ``"range"`` (the seeds' minimum to maximum) or ``"std"`` (the mean plus or minus one
    sample standard deviation). The band is clipped to the column's declared range
    (:func:`~fedsample.experiments.results.metrics.column_range`: accuracy in ``[0, 1]``, losses and counts at
    least 0), widened only to keep values that lie outside it (a user's loss may be negative). A
    count's ``std`` band is also clipped to the seeds' own counts of the round: the most clients a
    round can draw depends on the sampler's design (``m`` for MD and the fixed-size designs, up to
    ``n`` for independent inclusions or over-selection), which the metrics do not record, while every
    count a seed drew is one the round can take. Returns ``(mean, low, high)``.

    >>> mean, low, high = band("distinct_clients", np.array([[6.0], [6.0], [4.0]]), "std")
    >>> round(float(mean[0]), 2), round(float(low[0]), 2), float(high[0])  # 5.33 + 1.15 would pass 6
    (5.33, 4.18, 6.0)
    """
    mean, std, seed_low, seed_high = _across_seeds(values)
    low, high = (mean - std, mean + std) if kind == "std" else (seed_low, seed_high)
    if kind == "std" and column in INT_COLUMNS:
        low, high = np.fmax(low, seed_low), np.fmin(high, seed_high)
    floor, ceiling = column_range(column)
    finite = values[np.isfinite(values)]
    if finite.size:  # a value outside the declared range (a user's loss below 0) stays inside its band
        floor, ceiling = min(floor, float(finite.min())), max(ceiling, float(finite.max()))
    return mean, np.clip(low, floor, ceiling), np.clip(high, floor, ceiling)


def plot_metrics(
    table: Mapping[str, Any], out_dir: str | Path, *, rolling_window: int = 10, title: str | None = None
) -> list[Path]:
    """Write the PNG figures of a metrics table into ``out_dir`` and return their paths.

    ``train_loss.png`` (mean over seeds with a min-max band; raw and a trailing rolling mean over
    ``rolling_window`` evaluations), ``test_accuracy.png`` (skipped when accuracy is NaN
    throughout, i.e. regression), ``distinct_clients.png`` and ``distinct_labels.png`` (mean
    over seeds with a one-standard-deviation band, the lines shifted apart by a fraction of a round;
    labels skipped for regression), and with a simulated clock (a ``simulated_seconds`` column)
    ``simulated_time.png``: the mean train loss (and test accuracy) over seeds against the mean
    simulated time over seeds. Each label keeps its colour, line style and marker in every figure;
    every band stays inside its metric's possible range (:func:`band`).
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
    styles = line_styles(len(labels))
    written = []

    figure, (raw, smooth) = _figure(2, title)
    _bands(raw, checked, labels, styles, "train_loss", kind="range")
    _bands(smooth, checked, labels, styles, "train_loss", kind="range", window=rolling_window)
    raw.set_title("train loss (mean over seeds, min-max band)")
    smooth.set_title(f"rolling mean over {rolling_window} evaluations")
    finite = checked["train_loss"][np.isfinite(checked["train_loss"])]
    for axes in (raw, smooth):
        axes.set_ylabel("train loss (the federated objective)")
        if axes.lines and (finite > 0).all():
            _log_y_axis(axes)
    written.append(_save(figure, directory / "train_loss.png"))

    if not np.isnan(checked["test_accuracy"]).all():
        figure, (axes,) = _figure(1, title)
        _bands(axes, checked, labels, styles, "test_accuracy", kind="range")
        axes.set_ylabel("test accuracy")
        axes.set_title("test accuracy (mean over seeds, min-max band)")
        written.append(_save(figure, directory / "test_accuracy.png"))

    for column, what in (("distinct_clients", "clients"), ("distinct_labels", "labels")):
        if (checked[column] < 0).all():  # -1 throughout: regression has no labels
            continue
        figure, (axes,) = _figure(1, title)
        _bands(axes, checked, labels, styles, column, kind="std")
        axes.set_ylabel(f"distinct {what} in the round's selection")
        axes.set_title(f"distinct {what} per round (mean over seeds, ± 1 sd band)")
        if len(labels) > 1:
            axes.set_xlabel(f"round (lines shifted by up to ±{INTEGER_OFFSET / 2:g} round to stay apart)")
        written.append(_save(figure, directory / f"{column}.png"))
    if "simulated_seconds" in checked:
        accuracy = not np.isnan(checked["test_accuracy"]).all()
        figure, panels = _figure(2 if accuracy else 1, title)
        for axes, column in zip(panels, ("train_loss", "test_accuracy"), strict=False):
            _against_time(axes, checked, labels, styles, column)
        if panels[0].lines and (finite > 0).all():
            _log_y_axis(panels[0])
        written.append(_save(figure, directory / "simulated_time.png"))
    return written


def _against_time(axes: Axes, table: MetricsTable, labels: list[str], styles: list[LineStyle], column: str) -> None:
    """Per label, ``column``'s mean over seeds at its evaluated rounds against the mean simulated time then."""
    for index, (label, style) in enumerate(zip(labels, styles, strict=True)):
        series = label_series(table, label, column)
        elapsed = label_series(table, label, "simulated_seconds").values
        elapsed[:, series.rounds == 0] = 0.0  # the initial model
        shown = ~np.isnan(series.values).all(axis=0)
        if shown.any():
            times = np.nanmean(elapsed[:, shown], axis=0)
            _line(axes, times, np.nanmean(series.values[:, shown], axis=0), style, label, index, len(labels))
    axes.set_xlabel("simulated time (s)")
    axes.set_ylabel("train loss (the federated objective)" if column == "train_loss" else "test accuracy")
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
    styles: list[LineStyle],
    column: str,
    *,
    kind: str,
    window: int | None = None,
) -> None:
    """Per label, the mean over seeds as a line and a min-max (``range``) or ``std`` band around it
    (:func:`band`); an integer metric's lines shifted apart by up to :data:`INTEGER_OFFSET` / 2 rounds."""
    for index, (label, style) in enumerate(zip(labels, styles, strict=True)):
        series = label_series(table, label, column)
        values = series.values if window is None else rolling_mean(series.values, window)
        shown = ~np.isnan(values).all(axis=0)
        rounds, values = series.rounds[shown].astype(np.float64), values[:, shown]
        if rounds.size == 0:
            continue
        if column in INT_COLUMNS and len(labels) > 1:
            rounds = rounds + INTEGER_OFFSET * (index / (len(labels) - 1) - 0.5)
        mean, low, high = band(column, values, kind)
        _line(axes, rounds, mean, style, label, index, len(labels))
        if values.shape[0] > 1:
            axes.fill_between(rounds, low, high, color=style.colour, alpha=0.2, linewidth=0)
    from matplotlib.ticker import MaxNLocator

    axes.set_xlabel("round")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small")


def _line(axes: Axes, x: FloatArray, y: FloatArray, style: LineStyle, label: str, index: int, count: int) -> None:
    """One label's line in its style, about :data:`MARKERS_PER_LINE` markers on it, starting at a
    different point for each label so that coinciding lines still show every marker."""
    step = max(1, math.ceil(x.size / MARKERS_PER_LINE), 2 * count)
    axes.plot(
        x,
        y,
        color=style.colour,
        linestyle=style.linestyle,
        marker=style.marker,
        markevery=((index * min(step, x.size)) // count, step),
        markersize=5,
        label=label,
        linewidth=1.5,
    )


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
