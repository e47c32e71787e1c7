"""The immutable record of one run (metrics per round and per evaluation) and the per-round metrics schema.

:data:`ROUND_METRICS` names every per-round metric once, with its type, its shape and its value
before it is recorded. The loop's buffers (:class:`RoundRecord`), the checkpoint, the
:class:`History` and the metrics files (:mod:`fedsample.experiments.metrics`) are all read from it,
so a new per-round metric is one entry here, one field of :class:`History`, and the line of the
round that computes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample.participation.rounds import FAILURE_COUNTS

__all__ = ["FAILURES", "ROUND_METRICS", "History", "RoundMetric", "RoundRecord"]

# The per-round failure counts, named once in fedsample.participation.rounds.
FAILURES = FAILURE_COUNTS


@dataclass(frozen=True)
class RoundMetric:
    """One per-round metric.

    ``integer``: int64 values (else float64); ``per_run``: one value per run and round (else one per
    round, shared by the runs simulated together); ``initial``: the value before it is recorded (and
    kept where it does not apply); ``optional``: a history or a checkpoint may lack it (the failure
    counts, recorded only by the engine's loop); ``two_phase``: recorded only for the runs of a
    two-phase sampler (:mod:`fedsample.engine.two_phase`), absent from the others' histories;
    ``system``: recorded only by a simulation with a system model (the simulated clock,
    :mod:`fedsample.participation.system`), absent from the others' histories and metrics files.
    """

    name: str
    integer: bool
    per_run: bool = True
    initial: float = 0
    optional: bool = False
    two_phase: bool = False
    system: bool = False

    @property
    def dtype(self) -> type[np.generic]:
        return np.int64 if self.integer else np.float64


# In the order of the metrics files' columns.
ROUND_METRICS: tuple[RoundMetric, ...] = (
    RoundMetric("distinct_clients", integer=True),
    RoundMetric("distinct_labels", integer=True, initial=-1),
    RoundMetric("weight_sum", integer=False),
    RoundMetric("local_lr", integer=False, per_run=False),
    RoundMetric("round_seconds", integer=False, per_run=False),
    *(RoundMetric(name, integer=True, optional=True) for name in FAILURE_COUNTS),
    # Two-phase rounds: clients that computed an update, clients that sent theirs, and the exact
    # variance of the aggregate for the round's updates (the run's sampler, MD and uniform sampling).
    RoundMetric("computed_clients", integer=True, optional=True, two_phase=True),
    RoundMetric("communicated_clients", integer=True, optional=True, two_phase=True),
    RoundMetric("aggregate_variance", integer=False, initial=math.nan, optional=True, two_phase=True),
    RoundMetric("aggregate_variance_md", integer=False, initial=math.nan, optional=True, two_phase=True),
    RoundMetric("aggregate_variance_uniform", integer=False, initial=math.nan, optional=True, two_phase=True),
    # The simulated clock: the round's simulated length, the simulated time since the start, and the
    # clients that missed the deadline (also counted in ``late``).
    RoundMetric("simulated_round_seconds", integer=False, optional=True, system=True),
    RoundMetric("simulated_seconds", integer=False, optional=True, system=True),
    RoundMetric("missed_deadline", integer=True, optional=True, system=True),
)


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


@dataclass(frozen=True, eq=False)
class History:
    """Metrics of one run.

    Per evaluation (``eval_rounds`` holds the number of rounds completed, 0 being the initial
    model): ``train_loss`` (the federated objective ``sum_i p_i L_i`` over all training data),
    ``test_loss`` and ``test_accuracy`` (over the pooled test rows; accuracy is NaN for
    regression). Per round: ``distinct_clients`` and ``distinct_labels`` of the selection (``-1``
    for regression, which has no labels), ``weight_sum`` (``sum_i w'_i(S_t)``, the weights applied
    after the participation policy), ``round_seconds`` (wall time of sampling, local training,
    aggregation and sampler update, shared by the runs trained together), and the learning rate.
    The failures of each round (:mod:`fedsample.participation.rounds`): ``unavailable`` (draws that hit an
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
    distinct_clients: IntArray
    distinct_labels: IntArray
    weight_sum: FloatArray
    local_lr: FloatArray
    round_seconds: FloatArray
    unavailable: IntArray | None = None
    dropped: IntArray | None = None
    rejected: IntArray | None = None
    late: IntArray | None = None
    computed_clients: IntArray | None = None
    communicated_clients: IntArray | None = None
    aggregate_variance: FloatArray | None = None
    aggregate_variance_md: FloatArray | None = None
    aggregate_variance_uniform: FloatArray | None = None
    simulated_round_seconds: FloatArray | None = None
    simulated_seconds: FloatArray | None = None
    missed_deadline: IntArray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("eval_rounds", "train_loss", "test_loss", "test_accuracy"):
            object.__setattr__(self, name, readonly(np.asarray(getattr(self, name))))
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
            },
            "rounds": {
                m.name: getattr(self, m.name).tolist() if m.integer else _floats(getattr(self, m.name))
                for m in ROUND_METRICS
                if getattr(self, m.name) is not None
            },
            "info": dict(self.info),
        }
