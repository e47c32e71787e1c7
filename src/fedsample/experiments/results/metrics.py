"""The metrics table of a comparison: one row per (label, seed, round), on disk as Parquet and CSV.

Round 0 is the initial model (only the evaluation columns are set there) and round ``t >= 1`` the
state after ``t`` rounds. Evaluation columns are NaN on rounds without an evaluation (and test
accuracy is NaN throughout for regression); ``distinct_clients`` and ``distinct_labels`` are ``-1``
where missing (round 0, and labels for regression); the other per-round columns are NaN at round 0.
Runs of the engine also record each round's failures (:mod:`fedsample.participation.procedure`) in the
columns :data:`FAILURE_COLUMNS` (``unavailable``, ``dropped``, ``rejected``, ``late``; ``-1`` at
round 0); a table holds all four or none of them. Runs of a two-phase sampler (``optimal``,
``optimal-distribution``) add :data:`TWO_PHASE_COLUMNS` (clients that computed and that
communicated, and the exact variance of the aggregate against MD and uniform; ``-1`` / NaN where
missing). A simulation with a system model (docs/system.md) adds :data:`SYSTEM_COLUMNS` (the
round's simulated length, the simulated time since the start, the clients that missed the
deadline); without one they are absent. A model with extra evaluation metrics
(:class:`fedsample.engine.user_model.Model` ``metrics``) adds one float column ``test_<name>`` per metric
(:data:`METRIC_COLUMN`), NaN where no evaluation was made and in the rows of runs without it.
Each column's possible range is declared with it (:func:`column_range`): the losses fedsample
computes are at least 0, accuracy lies in ``[0, 1]``, counts are at least 0.

Example
-------
>>> import numpy as np
>>> from fedsample.engine.history import History
>>> run = History(label="md", sampler="md", seed=0, eval_rounds=np.array([0, 2]),
...     train_loss=np.array([2.3, 1.1]), test_loss=np.array([2.3, 1.2]), test_accuracy=np.array([0.1, 0.6]),
...     distinct_clients=np.array([5, 4]), distinct_labels=np.array([7, 6]), weight_sum=np.ones(2),
...     round_seconds=np.full(2, 0.01), local_lr=np.full(2, 0.1))
>>> table = metrics_table([run])
>>> table["round"].tolist(), table["train_loss"].tolist()
([0, 1, 2], [2.3, nan, 1.1])
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray
from fedsample.engine.history import ROUND_METRICS
from fedsample.engine.registry import METRIC_NAME
from fedsample.errors import FedsampleError

if TYPE_CHECKING:
    from fedsample.engine.history import History

__all__ = [
    "COLUMNS",
    "CSV_NAME",
    "FAILURE_COLUMNS",
    "METRIC_COLUMN",
    "PARQUET_NAME",
    "SYSTEM_COLUMNS",
    "TWO_PHASE_COLUMNS",
    "LabelSeries",
    "MetricsTable",
    "check_metrics_table",
    "column_range",
    "is_float_column",
    "label_order",
    "label_series",
    "metrics_table",
    "table_columns",
]

MetricsTable = dict[str, npt.NDArray[Any]]

PARQUET_NAME = "metrics.parquet"
CSV_NAME = "metrics.csv"

STRING_COLUMNS = ("label", "sampler")
EVALUATION_COLUMNS = ("train_loss", "test_loss", "test_accuracy")
# The range each evaluation column can take: the engine's losses (cross-entropy, squared error) are at
# least 0, accuracy is a fraction. A user's loss function may leave it (column_range's readers keep data).
EVALUATION_RANGES: dict[str, tuple[float, float]] = {
    "train_loss": (0.0, math.inf),
    "test_loss": (0.0, math.inf),
    "test_accuracy": (0.0, 1.0),
}
# The per-round columns come from the engine's one schema (fedsample.engine.history.ROUND_METRICS).
ROUND_COLUMNS = tuple(m.name for m in ROUND_METRICS if not m.optional)
FAILURE_COLUMNS = tuple(m.name for m in ROUND_METRICS if m.optional and not m.two_phase and not m.system)
# Recorded only by the runs of a two-phase sampler (NaN / -1 in the other runs' rows of a table holding them).
TWO_PHASE_COLUMNS = tuple(m.name for m in ROUND_METRICS if m.two_phase)
# Recorded only by a simulation with a system model (the simulated clock, docs/system.md).
SYSTEM_COLUMNS = tuple(m.name for m in ROUND_METRICS if m.system)
INT_COLUMNS = ("seed", "round", *(m.name for m in ROUND_METRICS if m.integer))
FLOAT_COLUMNS = (*EVALUATION_COLUMNS, *(m.name for m in ROUND_METRICS if not m.integer))
COLUMNS = (*STRING_COLUMNS, "seed", "round", *EVALUATION_COLUMNS, *ROUND_COLUMNS)
# Integer columns where -1 marks "missing" (round 0; labels of a regression task).
MISSING_INT = -1
# The column of a model's extra evaluation metric (its name as Model.metrics checks it).
METRIC_COLUMN = re.compile(f"test_{METRIC_NAME}")


def column_range(name: str) -> tuple[float, float]:
    """The ``(low, high)`` values the column ``name`` can take, as declared with it: :data:`EVALUATION_RANGES`
    for the evaluation columns, the schema's (:data:`~fedsample.engine.history.ROUND_METRICS`) for the
    per-round ones, unbounded for a model's extra metrics.

    >>> column_range("test_accuracy"), column_range("distinct_clients")
    ((0.0, 1.0), (0.0, inf))
    """
    if name in EVALUATION_RANGES:
        return EVALUATION_RANGES[name]
    for metric in ROUND_METRICS:
        if metric.name == name:
            return (float(metric.low), float(metric.high))
    return (-math.inf, math.inf)


def _metric_columns(names: Any) -> tuple[str, ...]:
    """The extra metric columns among ``names``, in their order."""
    return tuple(n for n in names if isinstance(n, str) and METRIC_COLUMN.fullmatch(n) and n not in EVALUATION_COLUMNS)


def is_float_column(name: str) -> bool:
    return name in FLOAT_COLUMNS or (METRIC_COLUMN.fullmatch(name) is not None and name not in INT_COLUMNS)


def table_columns(names: Any) -> tuple[str, ...]:
    """The columns a table with the column ``names`` must hold: the failure counts, two-phase columns if it has
    any, then its extra metric columns."""
    failures = FAILURE_COLUMNS if any(name in names for name in FAILURE_COLUMNS) else ()
    two_phase = TWO_PHASE_COLUMNS if any(name in names for name in TWO_PHASE_COLUMNS) else ()
    system = SYSTEM_COLUMNS if any(name in names for name in SYSTEM_COLUMNS) else ()
    return (*COLUMNS, *failures, *two_phase, *system, *_metric_columns(names))


def metrics_table(histories: Sequence[History]) -> MetricsTable:
    """The columnar metrics table (numpy arrays, columns in :data:`COLUMNS` order) of ``histories``."""
    if len(histories) == 0:
        raise FedsampleError(
            "The 'histories' parameter of metrics_table must hold at least one History. Got none instead.",
            parameter="histories",
        )
    failures = any(history.dropped is not None for history in histories)
    two_phase = any(history.computed_clients is not None for history in histories)
    system = any(history.simulated_seconds is not None for history in histories)
    extra = (*(FAILURE_COLUMNS if failures else ()), *(TWO_PHASE_COLUMNS if two_phase else ()))
    extra = (*extra, *(SYSTEM_COLUMNS if system else ()))
    metrics = tuple(dict.fromkeys(f"test_{name}" for history in histories for name in history.test_metrics))
    columns = (*COLUMNS, *extra, *metrics)
    parts: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in columns}
    for history in histories:
        rounds = history.num_rounds
        eval_rounds = np.asarray(history.eval_rounds, dtype=np.int64)
        if eval_rounds.size and (eval_rounds.min() < 0 or eval_rounds.max() > rounds):
            raise FedsampleError(
                f"The 'histories' parameter of metrics_table must hold evaluation rounds in [0, {rounds}]. "
                f"Got {eval_rounds.tolist()} in the run {history.label!r} seed {history.seed} instead.",
                parameter="histories",
            )
        for name in (*EVALUATION_COLUMNS, *ROUND_COLUMNS):
            expected = eval_rounds.size if name in EVALUATION_COLUMNS else rounds
            if np.shape(getattr(history, name)) != (expected,):
                raise FedsampleError(
                    f"The 'histories' parameter of metrics_table must hold {name!r} of shape ({expected},). "
                    f"Got {np.shape(getattr(history, name))} in the run {history.label!r} seed {history.seed} instead.",
                    parameter="histories",
                )
        size = rounds + 1
        parts["label"].append(np.full(size, history.label, dtype=object))
        parts["sampler"].append(np.full(size, history.sampler, dtype=object))
        parts["seed"].append(np.full(size, history.seed, dtype=np.int64))
        parts["round"].append(np.arange(size, dtype=np.int64))
        for name in EVALUATION_COLUMNS:
            column = np.full(size, np.nan)
            column[eval_rounds] = getattr(history, name)
            parts[name].append(column)
        for name in ROUND_COLUMNS:
            missing = MISSING_INT if name in INT_COLUMNS else np.nan
            column = np.full(size, missing, dtype=np.int64 if name in INT_COLUMNS else np.float64)
            column[1:] = getattr(history, name)
            parts[name].append(column)
        for name in metrics:
            column = np.full(size, np.nan)
            values = history.test_metrics.get(name.removeprefix("test_"))
            if values is not None:
                column[eval_rounds] = values
            parts[name].append(column)
        for name in extra:
            integer = name in INT_COLUMNS
            column = np.full(size, MISSING_INT if integer else np.nan, dtype=np.int64 if integer else np.float64)
            if getattr(history, name) is not None:
                column[1:] = getattr(history, name)
            parts[name].append(column)
    table = {name: np.concatenate(parts[name]) for name in columns}
    return check_metrics_table(table, subject="The 'histories' parameter of metrics_table")


def check_metrics_table(table: Mapping[str, Any], *, subject: str = "The 'table' parameter") -> MetricsTable:
    """Validate a metrics table; return it with canonical dtypes, :data:`COLUMNS` (and any failure columns) in order.

    ``subject`` starts the error message, e.g. ``"The metrics file 'run/metrics.csv'"``.
    """
    if not isinstance(table, Mapping):
        raise FedsampleError(f"{subject} must be a mapping of column names to arrays. Got {type(table).__name__}.")
    columns = table_columns(table)
    missing = [name for name in columns if name not in table]
    if missing:
        raise FedsampleError(f"{subject} must have the column {missing[0]!r}. Got the columns {list(table)} instead.")
    out: MetricsTable = {}
    for name in columns:
        values = np.array(table[name], dtype=object if name in STRING_COLUMNS else None, copy=True)
        if values.ndim != 1:
            raise FedsampleError(f"{subject} must hold 1-D columns. Got shape {values.shape} for {name!r} instead.")
        if name in STRING_COLUMNS:
            bad = [v for v in values.tolist() if not isinstance(v, str)]
            if bad:
                raise FedsampleError(f"{subject} must hold strings in the column {name!r}. Got {bad[0]!r} instead.")
        elif name in INT_COLUMNS:
            if values.dtype.kind not in "iu":
                raise FedsampleError(f"{subject} must hold integers in the column {name!r}. Got {values.dtype}.")
            values = values.astype(np.int64)
        elif values.dtype.kind not in "fiu":
            raise FedsampleError(f"{subject} must hold numbers in the column {name!r}. Got {values.dtype} instead.")
        else:
            values = values.astype(np.float64)
        out[name] = values
    lengths = {name: len(values) for name, values in out.items()}
    if len(set(lengths.values())) != 1:
        raise FedsampleError(f"{subject} must hold columns of one length. Got the lengths {lengths} instead.")
    if lengths["label"] == 0:
        raise FedsampleError(f"{subject} must hold at least one row. Got none instead.")
    if out["round"].min() < 0:
        raise FedsampleError(f"{subject} must hold rounds >= 0. Got {int(out['round'].min())} instead.")
    seen: set[tuple[str, int, int]] = set()
    for key in zip(out["label"].tolist(), out["seed"].tolist(), out["round"].tolist(), strict=True):
        if key in seen:
            raise FedsampleError(f"{subject} must hold one row per (label, seed, round). Got {key} twice.")
        seen.add(key)
    samplers: dict[str, str] = {}
    for label, sampler in zip(out["label"].tolist(), out["sampler"].tolist(), strict=True):
        if samplers.setdefault(label, sampler) != sampler:
            raise FedsampleError(
                f"{subject} must name one sampler per label. Got {samplers[label]!r} and {sampler!r} "
                f"for the label {label!r} instead."
            )
    return out


class LabelSeries(NamedTuple):
    """One column of one label as a ``seeds x rounds`` matrix (NaN where a seed has no value)."""

    seeds: IntArray
    rounds: IntArray
    values: FloatArray


def label_order(table: MetricsTable) -> list[str]:
    """The labels of ``table`` in order of first appearance."""
    return list(dict.fromkeys(table["label"].tolist()))


def label_series(table: MetricsTable, label: str, column: str) -> LabelSeries:
    """``column`` of ``label`` over the label's seeds (sorted) and rounds; ``-1`` markers become NaN."""
    rows = table["label"] == label
    seeds, seed_index = np.unique(table["seed"][rows], return_inverse=True)
    rounds, round_index = np.unique(table["round"][rows], return_inverse=True)
    values = table[column][rows].astype(np.float64)
    if column in INT_COLUMNS:
        values[values == MISSING_INT] = np.nan
    matrix = np.full((seeds.size, rounds.size), np.nan)
    matrix[seed_index, round_index] = values
    return LabelSeries(seeds.astype(np.int64), rounds.astype(np.int64), matrix)
