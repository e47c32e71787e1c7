"""The norm-reporting protocol of a two-phase sampler (``optimal``, ``optimal-distribution``) in Flower.

A round of :class:`~fedsample.integrations.flower.FedsampleStrategy` with a two-phase sampler
(:attr:`fedsample.samplers.Sampler.two_phase`) starts with a first message to the round's
candidates: the connected clients available under the strategy's availability model, all of them or
the sampler's draw among them (``optimal``'s ``candidates``, as in the engine:
:func:`~fedsample.samplers.two_phase.draw_candidates` with the stream ``(seed, SAMPLING, t, 1)``).
The message carries the global arrays and a training config with ``report-norms``. Each client trains as
for a training message (:func:`~fedsample.integrations.flower.train_locally`: the engine's batches
for its ``client-id``, ``round-index`` and ``seed``) and answers with the norms only
(``update-norm`` ``||theta_i - theta||`` and ``gradient-norm``), no arrays. The answers reach the
sampler's :meth:`~fedsample.samplers.Sampler.update` before the draw, the strategy draws the round
from them as usual, and only the chosen clients get the training message and send their update
(they train again with the same batches, so the update is the one whose norm they reported).
A client that does not answer, or answers without a finite norm, is no candidate of the round.
Power-of-Choice's pow-d and cpow-d (candidates reporting their loss at the global model) are refused:
the Flower client answers a first message by training, not by evaluating (docs/flower.md).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray
from fedsample._validation import invalid
from fedsample.integrations._flwr import ArrayRecord, ConfigRecord, Grid, Message, MessageType, RecordDict
from fedsample.integrations.flower_client import REPORT_NORMS
from fedsample.integrations.flower_rounds import match_replies, metric_value, reply_metrics
from fedsample.samplers import Feedback, Sampler
from fedsample.samplers.two_phase import candidates_rng, draw_candidates, first_phase_of

__all__ = ["report_round"]

_log = logging.getLogger("flwr")


def report_round(
    sampler: Sampler[Any],
    state: Any,
    importances: FloatArray,
    *,
    server_round: int,
    seed: int,
    available: BoolArray,
    node_of_client: npt.NDArray[np.uint64],
    arrays: ArrayRecord,
    config: ConfigRecord,
    grid: Grid,
    timeout: float | None,
) -> tuple[Any, int]:
    """Phase 1 of round ``t = server_round - 1``: the sampler's state after its candidates' reports.

    ``available`` flags the clients that can be asked (connected and available). Returns the new
    state and the number of clients that computed (answered with a finite norm).
    """
    t = server_round - 1
    if first_phase_of(sampler).report != "updates":
        owner = "FedsampleStrategy"
        raise invalid("sampler", owner, "a two-phase sampler whose candidates report norms (not losses)", sampler)
    candidates = draw_candidates(sampler, state, np.flatnonzero(available), candidates_rng(seed, t), importances)
    asked = np.asarray(candidates.clients, dtype=np.int64)
    messages = []
    for client in asked:
        message_config = ConfigRecord(dict(config))
        message_config.update(
            {"server-round": server_round, "round-index": t, "client-id": int(client), "seed": seed, REPORT_NORMS: True}
        )
        messages.append(
            Message(
                content=RecordDict({"arrays": arrays, "config": message_config}),
                dst_node_id=int(node_of_client[client]),
                message_type=MessageType.TRAIN,
                group_id=str(server_round),
            )
        )
    replies = match_replies(messages, grid.send_and_receive(messages, timeout=timeout), "configure_train")
    clients, update_norms, gradient_norms = [], [], []
    local_lr, local_steps = None, None
    for client, reply in zip(asked, replies, strict=True):
        if reply is None or reply.has_error():
            continue
        metrics = reply_metrics(reply.content)
        norm = metric_value(metrics, "update-norm")
        if norm is None or not np.isfinite(norm) or norm < 0:
            continue
        gradient = metric_value(metrics, "gradient-norm")
        clients.append(int(client))
        update_norms.append(norm)
        gradient_norms.append(np.nan if gradient is None else gradient)
        local_lr = metric_value(metrics, "local-lr") or local_lr
        steps = metric_value(metrics, "local-steps")
        local_steps = int(steps) if steps else local_steps
    ids = np.array(clients, dtype=np.int64)
    report = Feedback(
        round=t,
        selection=candidates,
        clients=ids,
        update_norms=np.array(update_norms, dtype=np.float64),
        gradient_norms=np.array(gradient_norms, dtype=np.float64),
        local_lr=local_lr,
        local_steps=local_steps,
    )
    _log.info("configure_train: %d of %d asked clients reported their norms", ids.size, asked.size)
    return sampler.update(state, report), int(ids.size)
