"""One row per label of a comparison: final and best metrics over seeds, rounds to a target, costs.

Means and standard deviations are over seeds; the standard deviation is the sample one
(``ddof=1``) and is NaN for a single seed, where it is undefined (0 would claim there is no
spread). "Final" is a seed's last evaluation and "best" its minimum loss / maximum accuracy over
evaluations; a round is evaluated for a metric where that metric is not NaN. Test accuracy is NaN
throughout for regression, and so are the accuracy columns here. The rows are written as
``summary.csv`` (every field, floats exact), ``summary.md`` and ``summary.tex`` (the tables of
:mod:`fedsample.experiments.results.tables`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._io import write_text_atomic
from fedsample.errors import FedsampleError
from fedsample.experiments.config.sections import REPORT
from fedsample.experiments.results.metrics import check_metrics_table, label_order, label_series
from fedsample.experiments.results.tables import summary_latex, summary_markdown

_CLOCK_FIELDS = ("time_to_target_accuracy", "time_to_target_loss", "simulated_seconds_final")

__all__ = [
    "SUMMARY_CSV",
    "SUMMARY_MD",
    "SUMMARY_TEX",
    "SummaryRow",
    "summarize",
    "summary_latex",
    "summary_markdown",
    "write_summary",
]

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
SUMMARY_TEX = "summary.tex"


@dataclass(frozen=True)
class SummaryRow:
    """Summary of one label (one sampler configuration) over its seeds.

    ``rounds_to_target_*`` is the mean, over the seeds that reach the target, of the first
    evaluated round where test accuracy >= ``target_accuracy`` (training loss, the federated
    objective, <= ``target_loss``); NaN when no seed reaches it or no target was given, and
    ``seeds_reached_target_*`` counts the seeds that reach it. The per-round means (distinct
    clients, weight sum ``sum_i w_i(S_t)``, seconds) are over rounds 1..T of each seed, then over seeds.

    With a simulated clock (a ``[system]`` table, docs/system.md) ``time_to_target_*`` is the same
    mean in simulated seconds (the simulated time after that round) and ``simulated_seconds_final``
    the mean simulated time of the whole run; without one these are ``None`` and absent from
    ``summary.csv``.
    """

    label: str
    sampler: str
    num_seeds: int
    num_rounds: int
    final_train_loss_mean: float
    final_train_loss_std: float
    best_train_loss_mean: float
    best_train_loss_std: float
    final_test_accuracy_mean: float
    final_test_accuracy_std: float
    best_test_accuracy_mean: float
    best_test_accuracy_std: float
    target_accuracy: float | None
    rounds_to_target_accuracy: float
    seeds_reached_target_accuracy: int
    target_loss: float | None
    rounds_to_target_loss: float
    seeds_reached_target_loss: int
    distinct_clients_mean: float
    weight_sum_mean: float
    round_seconds_mean: float
    time_to_target_accuracy: float | None = None
    time_to_target_loss: float | None = None
    simulated_seconds_final: float | None = None


def summarize(
    table: Mapping[str, Any], *, target_accuracy: float | None = None, target_loss: float | None = None
) -> list[SummaryRow]:
    """One :class:`SummaryRow` per label of the metrics ``table``, in order of first appearance."""
    checked = check_metrics_table(table, subject="The 'table' parameter of summarize")
    # The targets' constraints are the [report] table's (declared once, owner summarize).
    REPORT.validate({"target_accuracy": target_accuracy, "target_loss": target_loss})
    rows = []
    for label in label_order(checked):
        sampler = str(checked["sampler"][checked["label"] == label][0])
        loss = label_series(checked, label, "train_loss")
        accuracy = label_series(checked, label, "test_accuracy")
        final_loss, best_loss = _final(loss.values), _extreme(loss.values, np.fmin)
        final_accuracy, best_accuracy = _final(accuracy.values), _extreme(accuracy.values, np.fmax)
        to_accuracy = (
            _rounds_to(accuracy.values >= target_accuracy, accuracy.rounds) if target_accuracy is not None else None
        )
        to_loss = _rounds_to(loss.values <= target_loss, loss.rounds) if target_loss is not None else None
        clock: dict[str, float | None] = {}
        if "simulated_seconds" in checked:
            elapsed = label_series(checked, label, "simulated_seconds").values
            elapsed[:, loss.rounds == 0] = 0.0  # the initial model, before any round
            clock = {
                "time_to_target_accuracy": _time_to(accuracy.values >= target_accuracy, elapsed)
                if target_accuracy is not None
                else math.nan,
                "time_to_target_loss": _time_to(loss.values <= target_loss, elapsed)
                if target_loss is not None
                else math.nan,
                "simulated_seconds_final": _mean(_final(elapsed)),
            }
        rows.append(
            SummaryRow(
                label=label,
                sampler=sampler,
                num_seeds=int(loss.seeds.size),
                num_rounds=int(loss.rounds.max()),
                final_train_loss_mean=_mean(final_loss),
                final_train_loss_std=_std(final_loss),
                best_train_loss_mean=_mean(best_loss),
                best_train_loss_std=_std(best_loss),
                final_test_accuracy_mean=_mean(final_accuracy),
                final_test_accuracy_std=_std(final_accuracy),
                best_test_accuracy_mean=_mean(best_accuracy),
                best_test_accuracy_std=_std(best_accuracy),
                target_accuracy=None if target_accuracy is None else float(target_accuracy),
                rounds_to_target_accuracy=_reached_mean(to_accuracy),
                seeds_reached_target_accuracy=_reached_count(to_accuracy),
                target_loss=None if target_loss is None else float(target_loss),
                rounds_to_target_loss=_reached_mean(to_loss),
                seeds_reached_target_loss=_reached_count(to_loss),
                distinct_clients_mean=_per_round_mean(checked, label, "distinct_clients"),
                weight_sum_mean=_per_round_mean(checked, label, "weight_sum"),
                round_seconds_mean=_per_round_mean(checked, label, "round_seconds"),
                **clock,
            )
        )
    return rows


def write_summary(rows: Sequence[SummaryRow], run_dir: str | Path, *, bias: Any = None) -> list[Path]:
    """Write ``summary.csv`` (every field, floats exact), ``summary.md`` and ``summary.tex`` (a booktabs
    table for a paper) into ``run_dir``, atomically; ``bias``: ``bias.json``'s payload, if measured."""
    if not rows:
        raise FedsampleError("The 'rows' parameter of write_summary must hold at least one SummaryRow. Got none.")
    directory = Path(run_dir)  # made by the first write, if missing (never a run directory removed mid-run)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = [field.name for field in dataclasses.fields(SummaryRow)]
    # The clock's columns only for a run with a simulated clock: other summaries stay as they were.
    names = [n for n in names if n not in _CLOCK_FIELDS or any(getattr(row, n) is not None for row in rows)]
    writer.writerow(names)
    for row in rows:
        values = [getattr(row, name) for name in names]
        writer.writerow(["" if v is None else repr(v) if isinstance(v, float) else v for v in values])
    write_text_atomic(directory / SUMMARY_CSV, buffer.getvalue())
    write_text_atomic(directory / SUMMARY_MD, summary_markdown(rows, bias=bias) + "\n")
    write_text_atomic(directory / SUMMARY_TEX, summary_latex(rows, bias=bias) + "\n")
    return [directory / SUMMARY_CSV, directory / SUMMARY_MD, directory / SUMMARY_TEX]


def _final(matrix: FloatArray) -> FloatArray:
    """Each seed's value at its last evaluated round (NaN if it has none)."""
    evaluated = ~np.isnan(matrix)
    last = matrix.shape[1] - 1 - np.argmax(evaluated[:, ::-1], axis=1)
    return np.where(evaluated.any(axis=1), matrix[np.arange(matrix.shape[0]), last], np.nan)


def _extreme(matrix: FloatArray, reduce: np.ufunc) -> FloatArray:
    # fmin / fmax skip NaN and give NaN only for an all-NaN row, without a warning.
    return np.asarray(reduce.reduce(matrix, axis=1), dtype=np.float64)


def _rounds_to(hit: Any, rounds: Any) -> FloatArray:
    """Per seed, the first round where ``hit`` holds (NaN where it never does)."""
    first = np.argmax(hit, axis=1)
    return np.where(hit.any(axis=1), rounds[first], np.nan).astype(np.float64)


def _time_to(hit: Any, elapsed: FloatArray) -> float:
    """The mean over the seeds that reach it of the simulated time at the first round where ``hit`` holds."""
    first = np.argmax(hit, axis=1)
    times = np.where(hit.any(axis=1), elapsed[np.arange(elapsed.shape[0]), first], np.nan)
    return _mean(times[~np.isnan(times)])


def _reached_mean(rounds: FloatArray | None) -> float:
    return math.nan if rounds is None else _mean(rounds[~np.isnan(rounds)])


def _reached_count(rounds: FloatArray | None) -> int:
    return 0 if rounds is None else int((~np.isnan(rounds)).sum())


def _per_round_mean(table: Any, label: str, column: str) -> float:
    series = label_series(table, label, column)
    values = series.values[:, series.rounds >= 1]
    present = ~np.isnan(values)
    counts = present.sum(axis=1)
    per_seed = np.where(present, values, 0.0).sum(axis=1) / np.maximum(counts, 1)
    return _mean(per_seed[counts > 0])


def _mean(values: FloatArray) -> float:
    if values.size == 0:
        return math.nan
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf from a diverged run gives NaN, as it should
        return float(np.mean(values))


def _std(values: FloatArray) -> float:
    if values.size < 2:
        return math.nan
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.std(values, ddof=1))
