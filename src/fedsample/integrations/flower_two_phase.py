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
A client that does not answer, or whose answer is not valid (no finite ``update-norm >= 0``, or a
``gradient-norm``, ``local-lr`` or ``local-steps`` out of its range:
:func:`~fedsample.integrations.flower_replies.read_norm_report`), is no candidate of the round; the
invalid answers are counted (``malformed-reports``). The norms reach the sampler read per node and
bounded as a round's feedback is (:mod:`~fedsample.integrations.flower_feedback`).
Power-of-Choice's pow-d and cpow-d (candidates reporting their loss at the global model) are refused:
the Flower client answers a first message by training, not by evaluating (docs/flower.md). So are,
when the strategy is built (:func:`check_flower_phases`), a sampler with an initial phase (DivFL's
``initial_report``, ``high-loss``'s ``initial_evaluation``: every client's vector or loss before the
first selection) and one that reads full-batch gradients (DivFL's ``representative="gradient"``):
the replies carry norms and updates only.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray
from fedsample._validation import invalid
from fedsample.errors import FedsampleError
from fedsample.integrations._flwr import ArrayRecord, ConfigRecord, Grid, Message, MessageType, RecordDict
from fedsample.integrations.flower_client import REPORT_NORMS
from fedsample.integrations.flower_feedback import FeedbackHistory, bound_values, scaled_norms
from fedsample.integrations.flower_replies import NormReport, read_norm_report
from fedsample.integrations.flower_rounds import match_replies, reply_metrics
from fedsample.samplers import Feedback, Sampler
from fedsample.samplers.two_phase import candidates_rng, draw_candidates, first_phase_of, initial_phase_of

__all__ = ["PhaseOne", "check_flower_phases", "report_round"]

_log = logging.getLogger("flwr")


class PhaseOne(NamedTuple):
    """What the first phase of a two-phase round gives: the sampler's new state, how many clients
    computed (answered with valid norms), how many answers were malformed, and the feedback history."""

    state: Any
    computed: int
    malformed: int
    history: FeedbackHistory


def check_flower_phases(sampler: Sampler[Any], owner: str) -> None:
    """Refuse a sampler whose reports a Flower client cannot send: an initial phase of every client's
    vector or loss, or full-batch gradients (one line naming the setting that turns it off)."""
    if initial_phase_of(sampler) is not None:
        setting = "initial_evaluation=False" if hasattr(sampler, "initial_evaluation") else "initial_report=False"
        constraint = (
            "a sampler without an initial phase (the Flower clients answer a first message by training and "
            f"sending norms, not vectors or losses: build it with {setting})"
        )
        raise invalid("sampler", owner, constraint, sampler)
    if "gradients" in sampler.reads:
        constraint = "a sampler that reads no full-batch gradients (the replies carry updates: representative='update')"
        raise invalid("sampler", owner, constraint, sampler)


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
    history: FeedbackHistory,
) -> PhaseOne:
    """Phase 1 of round ``t = server_round - 1``: the sampler's state after its candidates' reports.

    ``available`` flags the clients that can be asked (connected and available); ``history`` holds the
    feedback bounds' references so far.
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
    clients: list[int] = []
    reports: list[NormReport] = []
    malformed = 0
    for client, reply in zip(asked, replies, strict=True):
        if reply is None or reply.has_error():
            continue
        report, problem = read_norm_report(reply_metrics(reply.content))
        if report is None:
            malformed += 1
            _log.info("\t> client %d's norms refused: %s", client, problem)
            continue
        clients.append(int(client))
        reports.append(report)
    norms, local_lr, local_steps, history, _ = scaled_norms(
        np.array([r.update_norm for r in reports], dtype=np.float64),
        [r.local_lr for r in reports],
        [r.local_steps for r in reports],
        history,
    )
    gradients = np.array([np.nan if r.gradient_norm is None else r.gradient_norm for r in reports], dtype=np.float64)
    gradients, history, _ = bound_values(history, "gradient-norm", gradients)
    ids = np.array(clients, dtype=np.int64)
    feedback = Feedback(
        round=t,
        selection=candidates,
        clients=ids,
        update_norms=norms,
        gradient_norms=gradients,
        local_lr=local_lr,
        local_steps=local_steps,
    )
    _log.info("configure_train: %d of %d asked clients reported their norms", ids.size, asked.size)
    try:
        state = sampler.update(state, feedback)
    except FedsampleError as error:  # what the nodes sent cannot end the round loop
        _log.warning("configure_train: the sampler refused the round's norms, its state is unchanged: %s", error)
    return PhaseOne(state, int(ids.size), malformed, history)
