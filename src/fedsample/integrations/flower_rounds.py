"""One training round of :class:`~fedsample.integrations.flower.FedsampleStrategy`, in named steps.

The strategy's ``configure_train`` calls :func:`draw_round` (the engine's
:func:`~fedsample.participation.procedure.select_participants` among the connected, available
clients); its ``aggregate_train`` calls :func:`read_replies` (match each reply to its message and
sort it into returned, dropped, malformed or rejected), then
:func:`~fedsample.integrations.flower_aggregate.settle_round` (the engine's
:func:`~fedsample.participation.procedure.settle_participants` with the replies' order,
:func:`reply_order`) and the weighted sum of :mod:`~fedsample.integrations.flower_aggregate`. The
failure counts are the engine's :data:`~fedsample.participation.procedure.FAILURE_COUNTS`:

- ``unavailable``: draws that hit an unavailable client (a disconnected node, or one the
  availability model rules out), redraws included; such a client gets no message;
- ``dropped``: a messaged client that did not return: its reply carried an error (the SuperLink's
  own reply for a node whose heartbeat expired included) or never came within the timeout; with a
  FedSampling sampler, also an asked node that sent no valid answer to the round's question;
- ``rejected``: a reply whose update holds a NaN or an infinity once converted to the global
  model's dtypes (a float64 ``1e300`` is ``inf`` in float32), or, with the strategy's optional
  ``norm_bound`` in ``"reject"`` mode, whose update norm is beyond it;
- ``late``: a returned client beyond the first ``m`` to reply under over-selection;

and the strategy's own kind, which the engine's replies cannot have (:data:`FAILURE_KINDS`):

- ``malformed``: a reply that does not hold what the server asked for
  (:mod:`~fedsample.integrations.flower_replies`): no array record, other array names, shapes or
  serializations than the model's, a dtype that is not a real floating or integer one converting to
  the model's (complex, strings, dates, structured, objects, garbage bytes, integers beyond the
  model's exact range), or a metric of the wrong type or out of its range (``local-steps``,
  ``local-lr``, ``num-examples``, the losses and norms).

Requires the ``flower`` extra.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample.integrations import flower_fedsampling as fedsampling
from fedsample.integrations._flwr import (
    ArrayRecord,
    ConfigRecord,
    Grid,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from fedsample.integrations.flower_client import MEASURE_LOSSES
from fedsample.integrations.flower_replies import check_train_metrics, read_arrays
from fedsample.participation import FAILURE_COUNTS, Participation, Selected, select_participants
from fedsample.participation.availability import Availability
from fedsample.samplers import DataLevelState, FedSamplingSampler, Sampler, Selection

__all__ = [
    "FAILURE_KINDS",
    "ConnectedAvailability",
    "Replies",
    "RoundRecord",
    "draw_round",
    "match_replies",
    "metric_value",
    "read_replies",
    "reply_metrics",
    "reply_order",
    "start_fedsampling_round",
    "train_messages",
]

_log = logging.getLogger("flwr")

# The engine's failure counts and the strategy's own: a reply that does not hold what was asked.
FAILURE_KINDS: tuple[str, ...] = (*FAILURE_COUNTS, "malformed")


@dataclass(frozen=True, eq=False)
class RoundRecord:
    """What one training round of :class:`~fedsample.integrations.flower.FedsampleStrategy` drew and received.

    ``clients``/``nodes``: the distinct selected clients (increasing) and their Flower node ids;
    ``weights``: their summed selection weights ``w_i(S_t)``; ``available``: who was available
    and so messaged; ``returned``: whose finite result arrived in time; ``kept``: whose result was
    aggregated (``returned`` but for the late clients of over-selection); ``applied``: the weights
    the aggregation used after the policy's correction (zero for the others); ``failures``: the
    failure counts (the engine's ``unavailable``, ``dropped``, ``rejected``, ``late``, and
    ``malformed``; see the module documentation); ``timed_out``: who was messaged and sent no reply
    at all within the timeout (counted among ``dropped``, like an error reply, but the server waited
    the timeout for them).
    """

    round: int
    selection: Selection
    clients: IntArray
    nodes: npt.NDArray[np.uint64]
    weights: FloatArray
    available: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    returned: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    kept: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    applied: FloatArray = field(default_factory=lambda: np.zeros(0))
    failures: Mapping[str, int] = field(default_factory=dict)
    timed_out: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))


@dataclass(frozen=True, eq=False)
class ConnectedAvailability(Availability):
    """A model's availability restricted to the clients whose node is connected this round.

    ``probabilities`` are the model's: nobody knows the probability that a node is connected.
    """

    model: Availability
    connected: BoolArray

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        ids = np.asarray(clients, dtype=np.int64)
        out: BoolArray = self.model.available(round, ids) & self.connected[ids]
        return out

    def probabilities(self, num_clients: int) -> FloatArray | None:
        return self.model.probabilities(num_clients)


def draw_round(
    sampler: Sampler[Any],
    state: Any,
    participation: Participation,
    *,
    seed: int,
    round: int,
    connected: BoolArray,
    node_of_client: npt.NDArray[np.uint64],
) -> tuple[RoundRecord, Selected, list[dict[str, float]]]:
    """The engine's selection among the connected, available clients (as a round record and as the
    engine's :class:`~fedsample.participation.procedure.Selected`), and each client's weight and instructions."""
    if not connected.all():
        availability = ConnectedAvailability(participation.availability, readonly(connected))
        participation = dataclasses.replace(participation, availability=availability)
    selected = select_participants(
        sampler, state, participation, seed=seed, round=round, num_clients=int(node_of_client.size)
    )
    selection = selected.selection
    _log.info(
        "configure_train: %s drew %d clients (%d draws), %d available",
        sampler.name,
        selected.clients.size,
        selection.num_draws,
        int(selected.available.sum()),
    )
    # A client's instructions are those of its first entry (as in the engine).
    first = np.unique(selection.clients, return_index=True)[1]
    settings = [
        {
            "weight": float(weight),
            **{name: float(values[first[j]]) for name, values in selection.instructions.items()},
        }
        for j, weight in enumerate(selected.weights)
    ]
    record = RoundRecord(
        round=round,
        selection=selection,
        clients=selected.clients,
        nodes=node_of_client[selected.clients],
        weights=selected.weights,
        available=readonly(selected.available.copy()),
        failures={"unavailable": selected.unavailable},
    )
    return record, selected, settings


def train_messages(
    record: RoundRecord,
    settings: Sequence[Mapping[str, float]],
    arrays: ArrayRecord,
    config: ConfigRecord,
    *,
    server_round: int,
    seed: int,
    measure_losses: bool = False,
) -> list[Message | None]:
    """One training message per available client of the round (``None`` for the others): the global
    arrays and a config carrying its ``client-id``, the ``round-index``, the ``seed`` and its settings;
    ``measure_losses`` asks the clients for every sample's loss (``train-loss-squares``, Oort's utility)."""
    messages: list[Message | None] = []
    for j, (client, node) in enumerate(zip(record.clients, record.nodes, strict=True)):
        if not record.available[j]:
            messages.append(None)
            continue
        message_config = ConfigRecord(dict(config))
        message_config["server-round"] = server_round
        message_config["round-index"] = record.round
        message_config["client-id"] = int(client)
        message_config["seed"] = seed
        if measure_losses:
            message_config[MEASURE_LOSSES] = True
        for name, value in settings[j].items():
            message_config[name] = value
        content = RecordDict({"arrays": arrays, "config": message_config})
        message = Message(
            content=content, dst_node_id=int(node), message_type=MessageType.TRAIN, group_id=str(server_round)
        )
        messages.append(message)
    return messages


def start_fedsampling_round(
    sampler: FedSamplingSampler,
    state: DataLevelState,
    availability: Availability,
    *,
    server_round: int,
    connected: BoolArray,
    node_of_client: npt.NDArray[np.uint64],
    grid: Grid,
    timeout: float | None,
) -> tuple[RoundRecord, Selected, list[dict[str, float]]]:
    """FedSampling's question to the available nodes, and the keep rate their answers give.

    The start of a round of :class:`~fedsample.integrations.flower.FedsampleStrategy` with a FedSampling
    sampler. The nodes that answer are the round's clients, each of weight one (it sends its return
    already weighted); the others count as ``unavailable`` (not asked) or ``dropped`` (asked,
    no valid answer).
    """
    t = server_round - 1
    num_clients = int(node_of_client.size)
    ids = np.arange(num_clients, dtype=np.int64)
    asked = ids[connected & availability.available(t, ids)]
    question = fedsampling.question_config(state, t)
    questions = [
        Message(
            content=RecordDict({"config": question}),
            dst_node_id=int(node_of_client[client]),
            message_type=MessageType.QUERY,
            group_id=str(server_round),
        )
        for client in asked
    ]
    replies = match_replies(questions, grid.send_and_receive(questions, timeout=timeout), "configure_train")
    threshold = state.size_threshold
    answers = [None if reply is None else fedsampling.read_answer(reply, threshold) for reply in replies]
    answered = np.array([answer is not None for answer in answers], dtype=bool)
    clients = asked[answered]
    values = np.array([answer for answer in answers if answer is not None], dtype=np.int64)
    estimate, rate, divisor = math.nan, math.nan, math.nan
    if clients.size:
        estimate, rate, divisor = sampler.rate_from_answers(values, state)
    everyone = np.ones(clients.size, dtype=bool)
    selected = Selected(
        selection=fedsampling.round_selection(clients, estimate, rate),
        clients=clients,
        weights=np.ones(clients.size),
        available=everyone,
        returns=everyone,
        return_probabilities=None,
        unavailable=int(num_clients - asked.size),
    )
    record = RoundRecord(
        round=t,
        selection=selected.selection,
        clients=clients,
        nodes=node_of_client[clients],
        weights=selected.weights,
        available=everyone,
        failures={"unavailable": selected.unavailable, "dropped": int((~answered).sum())},
    )
    _log.info(
        "configure_train: %d of %d asked nodes answered; estimated total %.1f, keep rate %.4g",
        clients.size,
        asked.size,
        estimate,
        rate,
    )
    return record, selected, [fedsampling.train_config(rate, divisor)] * clients.size


# --- replies ---------------------------------------------------------------------------------


def reply_metrics(content: RecordDict) -> MetricRecord:
    """The reply's metrics (its record named ``metrics``, else its first metric record)."""
    records = content.metric_records
    if "metrics" in records:
        return records["metrics"]
    return next(iter(records.values())) if records else MetricRecord()


def metric_value(metrics: MetricRecord, key: str) -> float | None:
    """The numeric metric ``key`` of a reply, or ``None`` when it is missing or not a number."""
    value = metrics.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def match_replies(sent: Sequence[Message], replies: Iterable[Message], owner: str) -> list[Message | None]:
    """The reply to each sent message, matched by ``reply_to_message_id``; ``None`` where none came.

    The grid gives each message its id when it sends it. A reply to no message of ``sent`` (a late
    one from an earlier round), and a second reply to the same message, are ignored with a warning.
    """
    slot = {message.metadata.message_id: j for j, message in enumerate(sent) if message.metadata.message_id}
    out: list[Message | None] = [None] * len(sent)
    for reply in replies:
        j = slot.get(reply.metadata.reply_to_message_id)
        if j is None or out[j] is not None:
            _log.warning(
                "%s: ignored a reply from node %d to message %r (not sent in this round, or a second reply)",
                owner,
                reply.metadata.src_node_id,
                reply.metadata.reply_to_message_id,
            )
            continue
        out[j] = reply
    return out


@dataclass(frozen=True, eq=False)
class Replies:
    """A round's replies, per distinct client of the round.

    ``arrived``: a reply without error came in time (``True`` for clients not messaged, whom the
    settlement counts as unavailable); ``silent``: messaged, and no reply came at all (within the
    timeout); ``usable``: its arrays and metrics hold what was asked, and the update is finite in the
    model's dtypes; ``malformed``: it arrived and does not hold what was asked;
    ``arrays``/``metrics``: the usable replies' contents, the arrays in the model's dtypes (``None``
    elsewhere); ``created``: the usable replies' creation times (``inf`` elsewhere, and for a
    timestamp that is not a finite number).
    """

    arrived: BoolArray
    silent: BoolArray
    usable: BoolArray
    malformed: BoolArray
    arrays: list[dict[str, np.ndarray] | None]
    metrics: list[MetricRecord | None]
    created: FloatArray


def read_replies(
    clients: IntArray, sent: Sequence[Message | None], replies: Iterable[Message], theta: Mapping[str, np.ndarray]
) -> Replies:
    """Match each reply to the message it answers and check its arrays and metrics against what was
    asked (:mod:`~fedsample.integrations.flower_replies`): the arrays are the model's names, shapes and
    convertible dtypes, finite once converted; the metrics are in their ranges."""
    k = len(sent)
    # Each reply is matched to the message it answers (its reply_to_message_id), not to its sender:
    # the SuperLink answers for a node whose heartbeat expired with an error from its own node id.
    slots = [j for j in range(k) if sent[j] is not None]
    matched = match_replies([cast(Message, sent[j]) for j in slots], replies, "aggregate_train")
    arrived = np.ones(k, dtype=bool)
    silent = np.zeros(k, dtype=bool)
    usable = np.zeros(k, dtype=bool)
    malformed = np.zeros(k, dtype=bool)
    arrays: list[dict[str, np.ndarray] | None] = [None] * k
    metrics: list[MetricRecord | None] = [None] * k
    created = np.full(k, np.inf)
    for j, reply in zip(slots, matched, strict=True):
        if reply is None:
            arrived[j], silent[j] = False, True
            continue
        if reply.has_error():
            arrived[j] = False
            _log.info("\t> client %d failed: %s", clients[j], reply.error.reason)
            continue
        result, kind, problem = read_arrays(reply.content, theta)
        reported = reply_metrics(reply.content)
        if result is not None:
            problem = check_train_metrics(reported)
            kind = "malformed" if problem else ""
        if kind:
            malformed[j] = kind == "malformed"
            _log.info("\t> client %d %s: %s", clients[j], kind, problem)
            continue
        usable[j] = True
        arrays[j] = result
        metrics[j] = reported
        created[j] = _timestamp(reply.metadata.created_at)
    return Replies(arrived, silent, usable, malformed, arrays, metrics, created)


def _timestamp(value: object) -> float:
    """A reply's creation time (read from the node's clock), ``inf`` (last) when not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.inf
    try:
        number = float(value)
    except OverflowError:
        return math.inf
    return number if math.isfinite(number) else math.inf


def reply_order(replies: Replies, nodes: npt.NDArray[np.uint64]) -> IntArray:
    """The round's clients in the order their usable replies were created (ties by node id; the others last)."""
    order: IntArray = np.lexsort((nodes, np.where(replies.usable, replies.created, np.inf)))
    return order
