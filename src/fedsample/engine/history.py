"""The immutable record of one run (metrics per round and per evaluation) and the per-round metrics schema.

Each per-round metric is declared once, as a field of :class:`History` whose metadata
(:func:`round_metric`) holds its type, its shape and its value before it is recorded;
:data:`ROUND_METRICS` is read from those fields. The loop's buffers (:class:`RoundRecord`), the
checkpoint, the :class:`History` and the metrics files (:mod:`fedsample.experiments.results.metrics`) all
follow it, so a new per-round metric is one field of :class:`History` and the line of the round
that computes it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample.participation.procedure import FAILURE_COUNTS

__all__ = ["FAILURES", "ROUND_METRICS", "History", "RoundMetric", "RoundRecord", "round_metric"]

# The per-round failure counts, named once in fedsample.participation.procedure.
FAILURES = FAILURE_COUNTS


@dataclass(frozen=True)
class RoundMetric:
    """One per-round metric.

    ``integer``: int64 values (else float64); ``per_run``: one value per run and round (else one per
    round, shared by the runs simulated together); ``initial``: the value before it is recorded (and
    kept where it does not apply); ``optional``: a history or a checkpoint may lack it (the failure
    counts, recorded only by the engine's loop); ``two_phase``: recorded only for the runs of a
    two-phase sampler (:mod:`fedsample.engine.first_phase`), absent from the others' histories;
    ``system``: recorded only by a simulation with a system model (the simulated clock,
    :mod:`fedsample.participation.system`), absent from the others' histories and metrics files.
    ``low`` and ``high``: the range its recorded values can take (a count is never negative), read by
    the figures to keep a band inside it (:func:`fedsample.experiments.results.metrics.column_range`); a
    bound that depends on the run (the clients a round can draw) is not declared here.
    """

    name: str
    integer: bool
    per_run: bool = True
    initial: float = 0
    optional: bool = False
    two_phase: bool = False
    system: bool = False
    low: float = -math.inf
    high: float = math.inf

    @property
    def dtype(self) -> type[np.generic]:
        return np.int64 if self.integer else np.float64


_METRIC = "fedsample.round_metric"


def round_metric(
    *,
    integer: bool,
    per_run: bool = True,
    initial: float = 0,
    two_phase: bool = False,
    system: bool = False,
    low: float | None = None,
    high: float = math.inf,
) -> dict[str, Any]:
    """The metadata of a :class:`History` field that makes it a per-round metric (see :class:`RoundMetric`).

    A field with a ``None`` default is optional; the fields' order is the metrics files' columns.
    ``low`` defaults to 0 for an integer metric (every one is a count) and to ``-inf`` otherwise.
    """
    lowest = (0.0 if integer else -math.inf) if low is None else low
    spec = {"integer": integer, "per_run": per_run, "initial": initial, "two_phase": two_phase, "system": system}
    return {_METRIC: {**spec, "low": lowest, "high": high}}


class RoundRecord:
    """The per-round metrics of the runs simulated together, one array per :data:`ROUND_METRICS` entry.

    A per-run metric is an array ``(runs, rounds)``, a shared one ``(rounds,)``; the round writes
    into them (``record["weight_sum"][r, t] = ...``).
    """

    def __init__(self, num_runs: int, rounds: int) -> None:
        self.values = {
            m.name: np.full((num_runs, rounds) if m.per_run else (rounds,), m.initial, dtype=m.dtype)
            for m in ROUND_METRICS
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every array (for a checkpoint)."""
        return {name: values.copy() for name, values in self.values.items()}

    def restore(self, metrics: Mapping[str, np.ndarray]) -> None:
        """Continue from a checkpoint's arrays (an optional metric it lacks keeps its initial values)."""
        for m in ROUND_METRICS:
            if m.optional:
                self.values[m.name][...] = metrics.get(m.name, self.values[m.name])
            else:
                self.values[m.name] = metrics[m.name].copy()

    def at(self, run: int, done: int, *, two_phase: bool = False, system: bool = False) -> dict[str, int | float]:
        """Run ``run``'s values after round ``done`` (``-1`` / NaN, the metrics files' missing marks, at round 0),
        as Python numbers, in the metrics files' column order: every metric, then the failure counts, the
        two-phase and the system metrics (the two-phase and system ones only if asked)."""
        metrics = [m for m in ROUND_METRICS if not (m.two_phase and not two_phase) and not (m.system and not system)]
        ordered = sorted(metrics, key=lambda m: (m.optional, m.two_phase, m.system))  # stable: the schema's order
        row: dict[str, int | float] = {}
        for m in ordered:
            if done == 0:
                row[m.name] = -1 if m.integer else math.nan
                continue
            values = self.values[m.name]
            value = values[run, done - 1] if values.ndim == 2 else values[done - 1]
            row[m.name] = int(value) if m.integer else float(value)
        return row

    def of_run(self, run: int, *, two_phase: bool = False, system: bool = False) -> dict[str, np.ndarray]:
        """The arrays of run ``run``, as :class:`History` fields (the two-phase and system metrics only if asked)."""
        skip = {m.name for m in ROUND_METRICS if (m.two_phase and not two_phase) or (m.system and not system)}
        return {
            name: (values[run] if values.ndim == 2 else values).copy()
            for name, values in self.values.items()
            if name not in skip
        }


def _floats(values: FloatArray) -> list[float | None]:
    """JSON-safe floats (``None`` for NaN, which marks a metric that does not apply)."""
    return [None if math.isnan(v) else float(v) for v in values.tolist()]


_variance = round_metric(integer=False, initial=math.nan, two_phase=True)


@dataclass(frozen=True, eq=False)
class History:
    """Metrics of one run.

    Per evaluation (``eval_rounds`` holds the number of rounds completed, 0 being the initial
    model): ``train_loss`` (the federated objective ``sum_i p_i L_i`` over all training data),
    ``test_loss`` and ``test_accuracy`` (over the pooled test rows; accuracy is NaN for
    regression), and ``test_metrics``, the model's extra metrics by name (empty without any).
    Per round: ``distinct_clients`` and ``distinct_labels`` of the selection (``-1`` for
    regression, which has no labels), ``weight_sum`` (``sum_i w'_i(S_t)``, the weights applied
    after the participation policy), ``round_seconds`` (wall time of sampling, local training,
    aggregation and sampler update, shared by the runs trained together), and the learning rate.
    The failures of each round (:mod:`fedsample.participation.procedure`): ``unavailable`` (draws that hit an
    unavailable client), ``dropped`` (selected clients that dropped out), ``rejected`` (updates
    holding NaN or infinity) and ``late`` (over-selected clients that replied after the first
    ``m``); ``None`` when not recorded. The runs of a two-phase sampler (``optimal``,
    ``optimal-distribution``) also record ``computed_clients`` (the candidates that computed an
    update before the draw), ``communicated_clients`` (the chosen ones whose update was kept) and
    ``aggregate_variance``, ``aggregate_variance_md``, ``aggregate_variance_uniform`` (the exact
    variance of ``sum_i w_i U_i`` over the round's updates for the run's design, MD and uniform
    sampling of ``m``; NaN where it has no closed form); ``None`` for the other runs. A simulation
    with a system model (docs/system.md) records ``simulated_round_seconds`` (the round's simulated
    length), ``simulated_seconds`` (simulated time since the start) and ``missed_deadline`` (returned
    clients slower than the deadline, also counted in ``late``); ``None`` otherwise.
    """

    label: str
    sampler: str
    seed: int
    eval_rounds: IntArray
    train_loss: FloatArray
    test_loss: FloatArray
    test_accuracy: FloatArray
    distinct_clients: IntArray = field(metadata=round_metric(integer=True))
    distinct_labels: IntArray = field(metadata=round_metric(integer=True, initial=-1))
    weight_sum: FloatArray = field(metadata=round_metric(integer=False))
    local_lr: FloatArray = field(metadata=round_metric(integer=False, per_run=False))
    round_seconds: FloatArray = field(metadata=round_metric(integer=False, per_run=False))
    # The failure counts, in the order of fedsample.participation.procedure.FAILURE_COUNTS.
    unavailable: IntArray | None = field(default=None, metadata=round_metric(integer=True))
    dropped: IntArray | None = field(default=None, metadata=round_metric(integer=True))
    rejected: IntArray | None = field(default=None, metadata=round_metric(integer=True))
    late: IntArray | None = field(default=None, metadata=round_metric(integer=True))
    # Two-phase rounds: clients that computed an update, clients that sent theirs, and the exact
    # variance of the aggregate for the round's updates (the run's sampler, MD and uniform sampling).
    computed_clients: IntArray | None = field(default=None, metadata=round_metric(integer=True, two_phase=True))
    communicated_clients: IntArray | None = field(default=None, metadata=round_metric(integer=True, two_phase=True))
    aggregate_variance: FloatArray | None = field(default=None, metadata=_variance)
    aggregate_variance_md: FloatArray | None = field(default=None, metadata=_variance)
    aggregate_variance_uniform: FloatArray | None = field(default=None, metadata=_variance)
    # The simulated clock: the round's simulated length, the simulated time since the start, and the
    # clients that missed the deadline (also counted in ``late``).
    simulated_round_seconds: FloatArray | None = field(default=None, metadata=round_metric(integer=False, system=True))
    simulated_seconds: FloatArray | None = field(default=None, metadata=round_metric(integer=False, system=True))
    missed_deadline: IntArray | None = field(default=None, metadata=round_metric(integer=True, system=True))
    info: dict[str, Any] = field(default_factory=dict)
    # The model's extra evaluation metrics (fedsample.engine.user_model.Model.metrics): name -> mean over the
    # test rows at each evaluation (NaN without test rows).
    test_metrics: Mapping[str, FloatArray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("eval_rounds", "train_loss", "test_loss", "test_accuracy"):
            object.__setattr__(self, name, readonly(np.asarray(getattr(self, name))))
        metrics = {str(k): readonly(np.asarray(v, dtype=np.float64)) for k, v in self.test_metrics.items()}
        object.__setattr__(self, "test_metrics", metrics)
        for m in ROUND_METRICS:
            if m.optional and getattr(self, m.name) is not None:
                object.__setattr__(self, m.name, readonly(np.asarray(getattr(self, m.name), dtype=m.dtype)))
            elif not m.optional:
                object.__setattr__(self, m.name, readonly(np.asarray(getattr(self, m.name))))

    @property
    def num_rounds(self) -> int:
        return int(self.distinct_clients.size)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "label": self.label,
            "sampler": self.sampler,
            "seed": self.seed,
            "num_rounds": self.num_rounds,
            "evaluations": {
                "round": self.eval_rounds.tolist(),
                "train_loss": _floats(self.train_loss),
                "test_loss": _floats(self.test_loss),
                "test_accuracy": _floats(self.test_accuracy),
                **{f"test_{name}": _floats(values) for name, values in self.test_metrics.items()},
            },
            "rounds": {
                m.name: getattr(self, m.name).tolist() if m.integer else _floats(getattr(self, m.name))
                for m in ROUND_METRICS
                if getattr(self, m.name) is not None
            },
            "info": dict(self.info),
        }


# In the order of History's fields, the metrics files' columns.
ROUND_METRICS: tuple[RoundMetric, ...] = tuple(
    RoundMetric(f.name, optional=f.default is None, **f.metadata[_METRIC])
    for f in dataclasses.fields(History)
    if _METRIC in f.metadata
)
