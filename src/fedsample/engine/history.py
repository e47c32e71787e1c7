"""The immutable record of one run: metrics per round and per evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample.participation.rounds import FAILURE_COUNTS

__all__ = ["FAILURES", "History"]

# The per-round failure counts, named once in fedsample.participation.rounds.
FAILURES = FAILURE_COUNTS


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
    ``m``); ``None`` when not recorded.
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
    round_seconds: FloatArray
    local_lr: FloatArray
    unavailable: IntArray | None = None
    dropped: IntArray | None = None
    rejected: IntArray | None = None
    late: IntArray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (
            "eval_rounds",
            "train_loss",
            "test_loss",
            "test_accuracy",
            "distinct_clients",
            "distinct_labels",
            "weight_sum",
            "round_seconds",
            "local_lr",
        ):
            object.__setattr__(self, name, readonly(np.asarray(getattr(self, name))))
        for name in FAILURES:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, readonly(np.asarray(getattr(self, name), dtype=np.int64)))

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
                "distinct_clients": self.distinct_clients.tolist(),
                "distinct_labels": self.distinct_labels.tolist(),
                "weight_sum": _floats(self.weight_sum),
                "round_seconds": _floats(self.round_seconds),
                "local_lr": _floats(self.local_lr),
                **{name: getattr(self, name).tolist() for name in FAILURES if getattr(self, name) is not None},
            },
            "info": dict(self.info),
        }
