"""The feedback a learning sampler receives from a round of :class:`~fedsample.integrations.flower.FedsampleStrategy`:
read per node, and bounded so that one reply cannot freeze the sampler.

**Per node.** A sampler turns an update norm into a gradient scale ``||theta_i - theta|| / (eta_l sqrt(N))``
with the round's ``Feedback.local_lr`` and ``local_steps``. Each node reports its own ``local-lr`` and
``local-steps``, so each node's scale is ``s_i = ||theta_i - theta|| / (eta_i sqrt(N_i))``, and the
feedback carries the round's reference ``eta``, ``N`` (the lower median of the kept nodes' values)
with each norm restated on that reference, ``s_i eta sqrt(N)``: the sampler's division gives back
``s_i``. A node that reports neither is taken at the reference; with no node reporting, the sampler's
defaults (``eta_l = 1``, ``N = 1``) apply as before. When every node reports the same values (the
honest deployment, one ClientApp), the norms are passed unchanged.

**Bounds.** Each quantity a sampler learns from (the gradient scales ``s_i``, the reported
``gradient-norm``, ``train-loss``, the round times ``fit-seconds``) is bounded above by
``FEEDBACK_BOUND = 10`` times its reference, and ``train-loss-squares`` by ``10**2`` times its
reference (it is a square). The reference is the lower median of the positive magnitudes among the
last ``FEEDBACK_WINDOW = 100`` values the strategy accepted for that quantity and this round's
(the lower median: with two values, the smaller). A value above its bound is replaced by the bound
(its sign kept), so one reply weighs at most as much as an honest client whose feedback is ten
times the typical one; values within the bound pass unchanged, so an honest run feeds its sampler
what :func:`fedsample.engine.simulate` would. See docs/flower.md for why (MABS and Adaptive-OSMD
were frozen for good by one reply) and what the bound leaves.

This relative bound is the strategy's own, a defence against nodes it does not trust, and stays here:
the engine's clients are trusted, and bounding them so would change what a simulation learns. The
absolute bound a value must meet to be a measurement at all (finite, within ``FEEDBACK_LIMIT = 1e100``,
norms and seconds ``>= 0``; anything else counts as a client that did not return) is the samplers'
own, applied by every ``Sampler.update`` whoever calls it (``fedsample.samplers._feedback.check_feedback``):
the feedback built here passes through it like a user's.

Requires the ``flower`` extra.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.integrations._flwr import MetricRecord
from fedsample.integrations.flower_client import FIT_SECONDS
from fedsample.integrations.flower_rounds import RoundRecord, metric_value
from fedsample.samplers import Feedback

__all__ = [
    "FEEDBACK_BOUND",
    "FEEDBACK_WINDOW",
    "FeedbackHistory",
    "bound_values",
    "lower_median",
    "round_feedback",
    "round_times",
    "scaled_norms",
]

_log = logging.getLogger("flwr")

FEEDBACK_BOUND = 10.0
FEEDBACK_WINDOW = 100


@dataclass(frozen=True)
class FeedbackHistory:
    """The last :data:`FEEDBACK_WINDOW` accepted magnitudes of each bounded quantity, by name."""

    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


def lower_median(values: FloatArray) -> float:
    """The lower median (of two middle values, the smaller): one large value never moves it up."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return float(ordered[(ordered.size - 1) // 2])


def bound_values(
    history: FeedbackHistory, name: str, values: FloatArray, factor: float = FEEDBACK_BOUND
) -> tuple[FloatArray, FeedbackHistory, int]:
    """``values`` with each magnitude above ``factor`` times the reference replaced by that bound.

    The reference is the lower median of the positive finite magnitudes in ``history[name]`` and in
    ``values``. Non-finite values (unknown) pass unchanged. Returns the bounded values, the history with
    them appended (the last :data:`FEEDBACK_WINDOW` kept) and how many were bounded.
    """
    values = np.asarray(values, dtype=np.float64)
    magnitudes = np.abs(values)
    known = np.isfinite(values) & (magnitudes > 0)
    window = np.concatenate([np.asarray(history.values.get(name, ()), dtype=np.float64), magnitudes[known]])
    if window.size == 0:
        return values, history, 0
    limit = factor * lower_median(window)
    over = known & (magnitudes > limit)
    bounded = np.where(over, np.sign(values) * limit, values)
    kept = (*history.values.get(name, ()), *np.abs(bounded[known]).tolist())[-FEEDBACK_WINDOW:]
    return bounded, FeedbackHistory({**history.values, name: kept}), int(over.sum())


def scaled_norms(
    norms: FloatArray, local_lrs: Sequence[float | None], local_steps: Sequence[int | None], history: FeedbackHistory
) -> tuple[FloatArray, float | None, int | None, FeedbackHistory, int]:
    """Update norms restated on the round's reference ``eta``, ``N``, their gradient scales bounded.

    ``local_lrs`` and ``local_steps``: each node's reported values (``None`` where it reported none).
    Returns the norms for the feedback, the reference ``local_lr`` and ``local_steps`` (``None`` when
    no node reported one), the history and how many scales were bounded.
    """
    norms = np.asarray(norms, dtype=np.float64)
    given_lrs = [lr for lr in local_lrs if lr is not None]
    given_steps = [steps for steps in local_steps if steps is not None]
    lr_ref = lower_median(np.array(given_lrs)) if given_lrs else None
    steps_ref = round(lower_median(np.array(given_steps))) if given_steps else None
    reference = (lr_ref or 1.0) * math.sqrt(steps_ref or 1)
    divisors = np.array(
        [
            (lr if lr is not None else (lr_ref or 1.0)) * math.sqrt(steps if steps is not None else (steps_ref or 1))
            for lr, steps in zip(local_lrs, local_steps, strict=True)
        ],
        dtype=np.float64,
    )
    scales, history, count = bound_values(history, "gradient-scale", norms / divisors if norms.size else norms)
    changed = (divisors != reference) | (scales != norms / divisors)
    out = np.where(changed, scales * reference, norms)
    return out, lr_ref, steps_ref, history, count


def round_feedback(
    record: RoundRecord,
    kept_metrics: list[MetricRecord],
    update_norms: FloatArray,
    flat_updates: list[FloatArray] | None,
    dimension: int,
    history: FeedbackHistory,
    *,
    timeout: float | None = None,
) -> tuple[Feedback, FeedbackHistory, int]:
    """The sampler's feedback of the round: the kept clients, their update norms and what they report,
    read per node and bounded; the new history and how many values were bounded.

    With a finite ``timeout`` (the seconds the server waited), the messaged clients that sent no reply
    (``record.timed_out``) are ``timed_out``, each with ``timeout`` as ``timed_out_seconds`` (both empty
    when every client replied, as the engine's clock gives them with a deadline); ``None`` without one.
    """
    kept_slots = np.flatnonzero(record.kept)
    waited: dict[str, Any] = {}
    if timeout is not None:
        late = record.clients[record.timed_out] if record.timed_out.size else np.zeros(0, dtype=np.int64)
        waited = {"timed_out": late, "timed_out_seconds": np.full(late.size, float(timeout))}
    lrs = [metric_value(m, "local-lr") for m in kept_metrics]
    steps = [_as_int(metric_value(m, "local-steps")) for m in kept_metrics]
    norms, lr, local_steps, history, bounded = scaled_norms(update_norms, lrs, steps, history)
    updates = None
    if flat_updates is not None:  # each vector restated with its norm
        pairs = zip(flat_updates, norms, update_norms, strict=True)
        scaled = [u * (n / old) if n != old and old > 0 else u for u, n, old in pairs]
        updates = np.stack(scaled) if scaled else np.zeros((0, dimension))
    columns: list[FloatArray | None] = []
    for key, factor in (
        ("train-loss", FEEDBACK_BOUND),
        ("train-loss-squares", FEEDBACK_BOUND**2),  # a square: its bound is the square of the others'
        ("gradient-norm", FEEDBACK_BOUND),
    ):
        column, history, count = _bounded(history, key, _column(kept_metrics, key), factor)
        columns.append(column)
        bounded += count
    times, history, count = _bounded(history, FIT_SECONDS, round_times(kept_metrics), FEEDBACK_BOUND)
    bounded += count
    losses, loss_squares, gradient_norms = columns
    if bounded:
        _log.info("aggregate_train: %d feedback value(s) bounded at %g times their reference", bounded, FEEDBACK_BOUND)
    feedback = Feedback(
        round=record.round,
        selection=record.selection,
        clients=record.clients[kept_slots],
        update_norms=norms,
        updates=updates,
        local_lr=lr,
        local_steps=local_steps,
        round_times=times,
        losses=losses,
        loss_squares=loss_squares,
        gradient_norms=gradient_norms,
        **waited,
    )
    return feedback, history, bounded


def round_times(kept_metrics: list[MetricRecord]) -> FloatArray | None:
    """The kept clients' round times: the seconds each reports as ``fit-seconds`` (its measured local work).

    A value that is missing, not a number, not finite or negative (a client that measures nothing, or
    a hostile one) is NaN, "unknown", which samplers skip (the client keeps its earlier time); the
    round has no times (``None``) when no kept client reported one.
    """
    values = [metric_value(m, FIT_SECONDS) for m in kept_metrics]
    if all(v is None for v in values):
        return None
    times = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    bad = ~np.isfinite(times) | (times < 0)
    hostile = int(np.count_nonzero(bad & np.array([v is not None for v in values])))
    if hostile:
        _log.warning("aggregate_train: ignored %d invalid %r value(s) (not finite or negative)", hostile, FIT_SECONDS)
    times[bad] = math.nan
    return times


def _bounded(
    history: FeedbackHistory, name: str, values: FloatArray | None, factor: float
) -> tuple[FloatArray | None, FeedbackHistory, int]:
    if values is None:
        return None, history, 0
    return bound_values(history, name, values, factor)


def _column(records: list[MetricRecord], key: str) -> FloatArray | None:
    """Each kept node's ``key`` (NaN where it sent none); ``None`` when no kept node sent one."""
    values = [metric_value(m, key) for m in records]
    if not values or all(v is None for v in values):
        return None
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def _as_int(value: float | None) -> int | None:
    return None if value is None else round(value)
