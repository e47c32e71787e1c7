"""The aggregation step of :class:`~fedsample.integrations.flower.FedsampleStrategy`: the engine's
settlement of the replies, the weighted sum of the kept updates, the sampler's feedback and the
round's metrics (with the engine's failure counts, :data:`~fedsample.participation.rounds.FAILURE_COUNTS`).

Each round of the strategy, after the draw:

1. matches each reply to the message it answers (its ``reply_to_message_id``), and treats replies
   that carry an error (the SuperLink's own reply for a node whose heartbeat expired included) or
   never arrive within ``timeout`` (*dropped*), or hold NaN/Inf arrays (*rejected*) as failures,
   like the unavailable clients it skipped: excluded from the sum, counted in the round's
   metrics, and corrected by ``policy``; with ``over_selection = o > 0`` it keeps the first ``m``
   clients to reply (by the replies' ``created_at``), and the others are *late*;
2. aggregates ``theta <- theta + eta_g * sum_i w_i (theta_i - theta)`` (paper 003's eq. 3) with the
   selection's weights, unchanged by default (unbiased samplers stay unbiased: the weights are not
   renormalised to sum to one);
3. builds the round's :class:`~fedsample.samplers.Feedback` (returned clients, update norms, the
   losses, gradient norms and measured ``fit-seconds`` the clients report, the update vectors when
   the sampler reads them) for ``sampler.update``, so that learning samplers (OSMD, clustered by
   similarity, Oort...) learn. With a finite ``timeout``, the clients that sent no reply at all (not
   those whose reply carried an error) are the feedback's ``timed_out``, each with the ``timeout`` as
   ``timed_out_seconds``: a wall-clock lower bound on its round time, where ``round_times`` are the
   replies' measured local work, so the two are on different scales (Oort reads both as durations).
   A two-phase sampler read every connected client's norms before the draw instead
   (:mod:`~fedsample.integrations.flower_two_phase`), and the round's metrics count the clients that
   ``computed`` apart from those that ``communicated`` their update.

``policy`` is one of the engine's policies (:data:`~fedsample.integrations.flower.POLICIES`, the same as
:data:`~fedsample.participation.policies.AGGREGATION_POLICIES`, documented there): ``"ignore"``
(the strategy's default: the failed clients' weight is lost, and without failures the weights are
the sampler's own), ``"renormalise"`` (the engine's default) or ``"inverse-probability"``
(``w_i / (r_i min(1, m / R))``, with ``r_i`` given as ``return_probabilities``, times ``a_i``
where unavailable clients are skipped, or estimated from the rounds so far).

The round is settled by the engine's
:func:`~fedsample.participation.rounds.settle_participants`, with the replies' creation times as
the reply order, and counts the engine's failures (``FAILURE_COUNTS``: ``unavailable``,
``dropped``, ``rejected``, ``late``; :mod:`~fedsample.integrations.flower_rounds` says which
Flower outcome goes where).

Over-selection bounds the influence of stragglers on the model, not the round's wall-clock time:
Flower's ``send_and_receive`` still waits for every reply or the timeout, and it must, since the
keep probability ``min(1, m / R)`` needs ``R``, the number of clients that return in time. The
correction is exact when the reply order is independent of the clients (as in the engine's
simulated reply times); clients that are systematically slow are kept less often.

Requires the ``flower`` extra.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from fedsample._arrays import FloatArray, readonly
from fedsample.integrations._flwr import Message, MetricRecord
from fedsample.integrations.flower_client import FIT_SECONDS
from fedsample.integrations.flower_rounds import (
    Replies,
    RoundRecord,
    metric_value,
    read_replies,
    reply_order,
)
from fedsample.participation.policies import ReturnRateEstimator
from fedsample.participation.rounds import Participation, Selected, settle_participants
from fedsample.samplers import Feedback, Sampler

__all__ = ["aggregate", "aggregate_round", "feedback", "round_metrics", "round_times", "settle_round"]

_log = logging.getLogger("flwr")


def aggregate_round(
    sampler: Sampler[Any],
    record: RoundRecord,
    selected: Selected,
    theta: Mapping[str, np.ndarray],
    sent: list[Message | None],
    replies: Iterable[Message],
    participation: Participation,
    *,
    seed: int,
    num_kept: int,
    server_lr: float,
    given_rates: float | FloatArray | None,
    estimator: ReturnRateEstimator,
    timeout: float | None = None,
) -> tuple[RoundRecord, dict[str, np.ndarray], Feedback, MetricRecord]:
    """One round's aggregation: the replies read and settled (:func:`settle_round`), the kept updates
    summed with their weights (:func:`aggregate`), the sampler's feedback and the round's metrics.

    ``timeout``: the seconds the server waited for the replies (the timed-out clients' bound in
    :func:`feedback`), ``None`` when unbounded. Returns the settled record, the new global arrays,
    the feedback and the metrics.
    """
    received = read_replies(record.clients, sent, replies, theta)
    record = settle_round(
        record,
        selected,
        received,
        participation,
        seed=seed,
        num_kept=num_kept,
        given_rates=given_rates,
        estimator=estimator,
    )
    kept = np.flatnonzero(record.kept)
    needs_updates = sampler.needs_updates
    new, update_norms, updates = aggregate(
        theta,
        [cast(dict[str, np.ndarray], received.arrays[j]) for j in kept],
        record.applied[kept],
        server_lr,
        keep_updates=needs_updates,
    )
    dimension = sum(v.size for v in theta.values())
    kept_metrics = [cast(MetricRecord, received.metrics[j]) for j in kept]
    round_feedback = feedback(
        record, kept_metrics, update_norms, updates if needs_updates else None, dimension, timeout=timeout
    )
    return record, new, round_feedback, round_metrics(record, round_feedback.losses)


def settle_round(
    record: RoundRecord,
    selected: Selected,
    received: Replies,
    participation: Participation,
    *,
    seed: int,
    num_kept: int,
    given_rates: float | FloatArray | None,
    estimator: ReturnRateEstimator,
) -> RoundRecord:
    """The engine's settlement of a round (:func:`~fedsample.participation.rounds.settle_participants`)
    with the replies' order: the kept clients, their weights by the policy, the failure counts.

    ``given_rates`` (the strategy's ``return_probabilities``) are the ``r_i`` of the
    inverse-probability policy, times ``a_i`` where unavailable clients are skipped; when they are
    ``None``, ``estimator``'s rates are. The estimator learns the round's returns either way.
    """
    rates = selected.return_probabilities  # a_i where unavailable clients are skipped, else ones
    if given_rates is not None:
        clients = record.clients
        known = np.full(clients.size, given_rates) if isinstance(given_rates, float) else given_rates[clients]
        rates = known if rates is None else known * rates
    returns = selected.returns & received.arrived
    selected = dataclasses.replace(selected, returns=returns, return_probabilities=rates)
    settled = settle_participants(
        selected,
        received.usable,
        participation,
        seed=seed,
        round=record.round,
        num_kept=num_kept,
        # Estimated from the rounds before this one, so that r_i does not depend on this round's fate;
        # the estimator sees the skipped unavailable clients fail, so a_i is in its rates.
        estimator=estimator if given_rates is None else None,
        reply_order=reply_order(received, record.nodes),
    )
    returned = selected.trains & received.usable
    if given_rates is not None:  # the estimator learns who returned all the same (late clients did)
        estimator.observe(record.clients, returned)
    counts = dict(settled.counts)
    counts["dropped"] += int(record.failures.get("dropped", 0))  # FedSampling's asked nodes that did not answer
    return dataclasses.replace(
        record,
        returned=readonly(returned),
        kept=readonly(settled.kept),
        applied=readonly(settled.weights),
        failures=counts,
        timed_out=readonly(received.silent.copy()),
    )


def aggregate(
    theta: Mapping[str, np.ndarray],
    arrays: Sequence[Mapping[str, np.ndarray]],
    weights: FloatArray,
    server_lr: float,
    *,
    keep_updates: bool,
) -> tuple[dict[str, np.ndarray], FloatArray, list[FloatArray]]:
    """``theta + eta_g * sum_i w_i (theta_i - theta)`` (accumulated in float64), each update's norm, and
    the flat update vectors when ``keep_updates``."""
    names = list(theta)
    deltas = {name: np.zeros(theta[name].shape, dtype=np.float64) for name in names}
    update_norms = np.zeros(len(arrays))
    flat_updates = []
    for position, result in enumerate(arrays):
        squared = 0.0
        pieces = []
        for name in names:
            update = result[name] - theta[name]  # in the arrays' own dtype, like the engine
            deltas[name] += weights[position] * update
            wide = update.astype(np.float64)
            squared += float(np.dot(wide.ravel(), wide.ravel()))
            if keep_updates:
                pieces.append(wide.ravel())
        update_norms[position] = math.sqrt(squared)
        if keep_updates:
            flat_updates.append(np.concatenate(pieces) if pieces else np.zeros(0))
    new = {name: (theta[name] + server_lr * deltas[name]).astype(theta[name].dtype) for name in names}
    return new, update_norms, flat_updates


def feedback(
    record: RoundRecord,
    kept_metrics: list[MetricRecord],
    update_norms: FloatArray,
    flat_updates: list[FloatArray] | None,
    dimension: int,
    *,
    timeout: float | None = None,
) -> Feedback:
    """The sampler's feedback of the round: the kept clients, their update norms and what they report.

    With a finite ``timeout`` (the seconds the server waited), the messaged clients that sent no reply
    (``record.timed_out``) are ``timed_out``, each with ``timeout`` as ``timed_out_seconds`` (both empty
    when every client replied, as the engine's clock gives them with a deadline); ``None`` without one.
    """
    kept_slots = np.flatnonzero(record.kept)
    waited: dict[str, Any] = {}
    if timeout is not None:
        late = record.clients[record.timed_out] if record.timed_out.size else np.zeros(0, dtype=np.int64)
        waited = {"timed_out": late, "timed_out_seconds": np.full(late.size, float(timeout))}
    losses = _column(kept_metrics, "train-loss")
    local_steps = _first(kept_metrics, "local-steps")
    return Feedback(
        round=record.round,
        selection=record.selection,
        clients=record.clients[kept_slots],
        update_norms=update_norms,
        updates=None
        if flat_updates is None
        else (np.stack(flat_updates) if flat_updates else np.zeros((0, dimension))),
        losses=losses,
        loss_squares=_column(kept_metrics, "train-loss-squares"),
        gradient_norms=_column(kept_metrics, "gradient-norm"),
        local_lr=_first(kept_metrics, "local-lr"),
        local_steps=None if local_steps is None else round(local_steps),
        round_times=round_times(kept_metrics),
        **waited,
    )


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


def round_metrics(record: RoundRecord, losses: FloatArray | None) -> MetricRecord:
    """The round's metrics: counts, the engine's failure counts, the weight sum and the weighted train loss."""
    k = record.clients.size
    num_returned = int(record.returned.sum())
    kept_slots = np.flatnonzero(record.kept)
    summary = MetricRecord(
        {
            "selected": int(k),
            "draws": record.selection.num_draws,
            "asked": int(record.available.sum()),
            "returned": num_returned,
            "kept": int(kept_slots.size),
            "failures": int(k - num_returned),
            **{kind: int(count) for kind, count in record.failures.items()},
            "weight-sum": float(record.applied.sum()),
        }
    )
    if losses is not None and kept_slots.size:
        w = record.weights[kept_slots]
        summary["train-loss"] = float(np.dot(w, losses) / w.sum()) if w.sum() > 0 else float(losses.mean())
    if k - num_returned:
        _log.info("aggregate_train: %d of %d clients failed %s", k - num_returned, k, dict(record.failures))
    return summary


def _column(records: list[MetricRecord], key: str) -> FloatArray | None:
    values = [metric_value(m, key) for m in records]
    if not values or any(v is None for v in values):
        return None
    return np.array(values, dtype=np.float64)


def _first(records: list[MetricRecord], key: str) -> float | None:
    for m in records:
        value = metric_value(m, key)
        if value is not None:
            return value
    return None
