"""The aggregation step of :class:`~fedsample.integrations.flower.FedsampleStrategy`: the engine's
settlement of the replies, the weighted sum of the kept updates, the sampler's feedback and the
round's metrics (with the engine's failure counts, :data:`~fedsample.participation.procedure.FAILURE_COUNTS`).

Each round of the strategy, after the draw:

1. matches each reply to the message it answers (its ``reply_to_message_id``), checks what it holds
   against what the server asked for (:mod:`~fedsample.integrations.flower_replies`), and treats
   replies that carry an error (the SuperLink's own reply for a node whose heartbeat expired
   included) or never arrive within ``timeout`` (*dropped*), that do not hold what was asked
   (*malformed*), or whose update is not finite in the model's dtype or, with the optional
   ``norm_bound`` in ``"reject"`` mode, beyond it (*rejected*) as failures, like the unavailable
   clients it skipped: excluded from the sum, counted in the round's metrics, and corrected by
   ``policy``; with ``over_selection = o > 0`` it keeps the first ``m`` clients to reply (by the
   replies' ``created_at``), and the others are *late*;
2. aggregates ``theta <- theta + eta_g * sum_i w_i (theta_i - theta)`` (paper 003's eq. 3) with the
   selection's weights, unchanged by default (unbiased samplers stay unbiased: the weights are not
   renormalised to sum to one);
3. builds the round's :class:`~fedsample.samplers.Feedback` (returned clients, update norms, the
   losses, gradient norms and measured ``fit-seconds`` the clients report, the update vectors when
   the sampler reads them; read per node and bounded, :mod:`~fedsample.integrations.flower_feedback`)
   for ``sampler.update``, so that learning samplers (OSMD, clustered by similarity, Oort...) learn.
   With a finite ``timeout``, the clients that sent no reply at all (not
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
:func:`~fedsample.participation.procedure.settle_participants`, with the replies' creation times as
the reply order, and counts the engine's failures (``FAILURE_COUNTS``: ``unavailable``,
``dropped``, ``rejected``, ``late``) and the Flower strategy's own ``malformed``
(:mod:`~fedsample.integrations.flower_rounds` says which Flower outcome goes where).

The optional norm bound (``norm_bound = c``, off by default) compares each usable update's norm
``||theta_i - theta||`` with ``c`` times the lower median of the round's positive update norms: an
update beyond it is scaled down to it (``"clip"``) or refused as ``rejected`` (``"reject"``). Clipping
biases the aggregate toward small updates; rejecting is a failure under the policy (docs/flower.md).

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
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast

import numpy as np

from fedsample._arrays import BoolArray, FloatArray, readonly
from fedsample.integrations._flwr import Message, MetricRecord
from fedsample.integrations.flower_feedback import FeedbackHistory, lower_median, round_feedback
from fedsample.integrations.flower_rounds import Replies, RoundRecord, read_replies, reply_order
from fedsample.participation.estimators import ReturnRateEstimator
from fedsample.participation.procedure import Selected, settle_participants
from fedsample.participation.setting import Participation
from fedsample.samplers import Feedback, Sampler

__all__ = [
    "AggregatedRound",
    "NormBound",
    "aggregate",
    "aggregate_round",
    "bound_update_norms",
    "round_metrics",
    "settle_round",
    "update_norms",
]

_log = logging.getLogger("flwr")


@dataclass(frozen=True)
class NormBound:
    """The optional norm bound: ``multiple`` (``c``) times the round's median update norm, and what
    happens to an update beyond it (``"clip"`` it to the bound, or ``"reject"`` it)."""

    multiple: float
    action: Literal["clip", "reject"] = "clip"


class AggregatedRound(NamedTuple):
    """What :func:`aggregate_round` gives: the settled record, the new global arrays, the sampler's
    feedback, the round's metrics and the feedback history (the bounds' references)."""

    record: RoundRecord
    arrays: dict[str, np.ndarray]
    feedback: Feedback
    metrics: MetricRecord
    history: FeedbackHistory


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
    history: FeedbackHistory,
    norm_bound: NormBound | None = None,
    timeout: float | None = None,
) -> AggregatedRound:
    """One round's aggregation: the replies read, checked and settled (:func:`settle_round`), the kept
    updates summed with their weights (:func:`aggregate`), the sampler's feedback and the round's metrics.

    ``norm_bound``: the optional bound on the update norms (``None``: off). ``timeout``: the seconds
    the server waited for the replies (the timed-out clients' bound in the feedback), ``None`` when
    unbounded. ``history``: the feedback bounds' references so far.
    """
    received = read_replies(record.clients, sent, replies, theta)
    usable = [cast(dict[str, np.ndarray], received.arrays[j]) if received.usable[j] else None for j in range(len(sent))]
    norms = update_norms(theta, usable)
    factors, beyond = bound_update_norms(norms, received.usable, norm_bound)
    if beyond.any():
        assert norm_bound is not None
        for j in np.flatnonzero(beyond):
            client, action = record.clients[j], norm_bound.action
            _log.info("\t> client %d: update norm %.4g beyond the bound (%s)", client, norms[j], action)
        if norm_bound.action == "reject":
            received = dataclasses.replace(received, usable=readonly(received.usable & ~beyond))
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
    new, updates = aggregate(
        theta,
        [cast(dict[str, np.ndarray], received.arrays[j]) for j in kept],
        record.applied[kept] * factors[kept],  # a clipped update is its update scaled down
        server_lr,
        keep_updates=needs_updates,
    )
    dimension = sum(v.size for v in theta.values())
    kept_metrics = [cast(MetricRecord, received.metrics[j]) for j in kept]
    clipped_updates = [u * factors[j] if factors[j] != 1 else u for u, j in zip(updates, kept, strict=False)]
    round_feedback_, history, bounded = round_feedback(
        record,
        kept_metrics,
        norms[kept] * factors[kept],
        clipped_updates if needs_updates else None,
        dimension,
        history,
        timeout=timeout,
    )
    metrics = round_metrics(record, round_feedback_.losses)
    metrics["feedback-bounded"] = bounded
    if norm_bound is not None:
        metrics["beyond-norm-bound"] = int(beyond.sum())
    return AggregatedRound(record, new, round_feedback_, metrics, history)


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
    """The engine's settlement of a round (:func:`~fedsample.participation.procedure.settle_participants`)
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
    # The engine counts every reply that trained and is not usable as rejected; those that did not hold
    # what was asked are the strategy's own kind.
    malformed = int((selected.trains & received.malformed).sum())
    counts["rejected"] -= malformed
    counts["malformed"] = malformed
    return dataclasses.replace(
        record,
        returned=readonly(returned),
        kept=readonly(settled.kept),
        applied=readonly(settled.weights),
        failures=counts,
        timed_out=readonly(received.silent.copy()),
    )


def update_norms(theta: Mapping[str, np.ndarray], arrays: Sequence[Mapping[str, np.ndarray] | None]) -> FloatArray:
    """``||theta_i - theta||`` of each reply (NaN where ``None``), the update taken in the arrays' dtype
    as the engine does, its norm accumulated in float64."""
    norms = np.full(len(arrays), math.nan)
    for position, result in enumerate(arrays):
        if result is None:
            continue
        squared = 0.0
        for name, value in theta.items():
            wide = (result[name] - value).astype(np.float64).ravel()
            squared += float(np.dot(wide, wide))
        norms[position] = math.sqrt(squared)
    return norms


def bound_update_norms(norms: FloatArray, usable: BoolArray, bound: NormBound | None) -> tuple[FloatArray, BoolArray]:
    """Each update's scale factor under the norm bound, and which usable updates are beyond it.

    The bound is ``c`` times the lower median of the usable updates' positive norms (with two
    updates, the smaller: one huge update never raises it). ``"clip"`` scales an update beyond it
    down to it; ``"reject"`` leaves the factors at one, and the caller refuses those updates.
    """
    factors = np.ones(norms.size)
    beyond = np.zeros(norms.size, dtype=bool)
    positive = usable & (norms > 0)
    if bound is None or not positive.any():
        return factors, beyond
    limit = bound.multiple * lower_median(norms[positive])
    beyond = positive & (norms > limit)
    if bound.action == "clip":
        factors[beyond] = limit / norms[beyond]
    return factors, beyond


def aggregate(
    theta: Mapping[str, np.ndarray],
    arrays: Sequence[Mapping[str, np.ndarray]],
    weights: FloatArray,
    server_lr: float,
    *,
    keep_updates: bool,
) -> tuple[dict[str, np.ndarray], list[FloatArray]]:
    """``theta + eta_g * sum_i w_i (theta_i - theta)`` (accumulated in float64), and the flat update
    vectors when ``keep_updates``."""
    names = list(theta)
    deltas = {name: np.zeros(theta[name].shape, dtype=np.float64) for name in names}
    flat_updates = []
    for position, result in enumerate(arrays):
        pieces = []
        for name in names:
            update = result[name] - theta[name]  # in the arrays' own dtype, like the engine
            deltas[name] += weights[position] * update
            if keep_updates:
                pieces.append(update.astype(np.float64).ravel())
        if keep_updates:
            flat_updates.append(np.concatenate(pieces) if pieces else np.zeros(0))
    new = {name: (theta[name] + server_lr * deltas[name]).astype(theta[name].dtype) for name in names}
    return new, flat_updates


def round_metrics(record: RoundRecord, losses: FloatArray | None) -> MetricRecord:
    """The round's metrics: counts, the failure counts, the weight sum and the weighted train loss."""
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
    known = np.zeros(0, dtype=bool) if losses is None else np.isfinite(losses)
    if losses is not None and known.any():  # the kept clients that reported a loss
        w, values = record.weights[kept_slots][known], losses[known]
        summary["train-loss"] = float(np.dot(w, values) / w.sum()) if w.sum() > 0 else float(values.mean())
    if k - num_returned:
        _log.info("aggregate_train: %d of %d clients failed %s", k - num_returned, k, dict(record.failures))
    return summary
