"""How :class:`~fedsample.integrations.flower.FedsampleStrategy` learns its federation: the nodes,
their client ids and their sizes (a query round when they are not given).

Every node must answer the query. An answer that is not valid (a ``num-examples`` that is not an
integer in ``[1, 2**40]``, a ``client-id`` that is not an integer in ``[0, n)``:
:func:`~fedsample.integrations.flower_replies.read_size_answer`) leaves its node out of the
federation, with a warning: the federation is the other nodes, numbered in the order of their
client ids, and what the strategy was given per client (``return_probabilities``, the availability
model) follows them (:class:`SubsetAvailability`).

Requires the ``flower`` extra.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample._validation import Interval, check_param, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import as_sizes
from fedsample.integrations._flwr import ConfigRecord, Grid, Message, MessageType, MetricRecord, RecordDict
from fedsample.integrations.flower_replies import SizeAnswer, read_size_answer
from fedsample.integrations.flower_rounds import match_replies, reply_metrics
from fedsample.participation.availability import Availability
from fedsample.participation.setting import Participation

__all__ = [
    "Federated",
    "SubsetAvailability",
    "check_clients",
    "check_return_probabilities",
    "connect_federation",
    "count_clients",
    "node_mapping",
    "query_nodes",
    "wait_for_nodes",
]

_log = logging.getLogger("flwr")
_OWNER = "FedsampleStrategy"
_WAIT_POLL_SECONDS = 0.1
_WAIT_LOG_SECONDS = 30.0


class Federated(NamedTuple):
    """The strategy's federation: ``{node_id: client_id}``, the node of each client, the sizes (``None``
    when private or given), the nodes left out for an invalid answer (with the problem), and each
    client's id among all the nodes (``None`` when none was left out)."""

    clients: dict[int, int]
    node_of_client: npt.NDArray[np.uint64]
    sizes: IntArray | None
    excluded: dict[int, str]
    original: IntArray | None


@dataclass(frozen=True, eq=False)
class SubsetAvailability(Availability):
    """A model's availability for a federation that left nodes out: client ``i`` is the model's client
    ``original[i]`` of ``num_original``."""

    model: Availability
    original: IntArray
    num_original: int

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray:
        return self.model.available(round, self.original[np.asarray(clients, dtype=np.int64)])

    def probabilities(self, num_clients: int) -> FloatArray | None:
        probabilities = self.model.probabilities(self.num_original)
        return None if probabilities is None else readonly(np.asarray(probabilities)[self.original])


def connect_federation(
    grid: Grid,
    clients: Mapping[int, int] | None,
    num_clients: int,
    *,
    sizes: IntArray | None,
    sizes_private: bool,
    timeout: float | None,
) -> Federated:
    """The strategy's federation (:class:`Federated`).

    Waits for the nodes, and asks them in a query round what is not given: their ``num-examples``
    (and client ids) when ``sizes`` is ``None``; with private sizes (FedSampling) only their
    ``client-id`` when ``clients`` is ``None``, and the sizes stay ``None``. A node whose answer is
    not valid is left out (see the module documentation).
    """
    nodes = wait_for_nodes(grid, clients, num_clients)
    asked = None
    if sizes_private and clients is None:
        asked = "client-id"
    elif not sizes_private and sizes is None:
        asked = "num-examples"
    answers: dict[int, SizeAnswer] = {}
    excluded: dict[int, str] = {}
    if asked is not None:
        for node, metrics in query_nodes(grid, nodes, asked, timeout).items():
            answer = read_size_answer(metrics, asked=asked, num_clients=num_clients)
            if answer.problem:
                excluded[node] = answer.problem
                _log.warning("setup: node %d left out of the federation: its answer holds %s", node, answer.problem)
            else:
                answers[node] = answer
    kept = [node for node in nodes if node not in excluded]
    if not kept:
        raise FedsampleError(
            f"The {asked} query of {_OWNER} needs a valid answer from some node. Got none: {excluded}.",
            parameter="sizes" if asked == "num-examples" else "clients",
        )
    original = node_mapping(clients, answers, nodes, kept, num_clients)
    order = sorted(kept, key=lambda node: original[node])
    mapping = {node: client for client, node in enumerate(order)}
    node_of_client = readonly(np.array(order, dtype=np.uint64))  # Flower node ids are unsigned 64-bit
    if asked == "num-examples":
        sizes = as_sizes([cast(int, answers[node].size) for node in order], owner=f"{_OWNER} (sizes reported)")
    ids = np.array([original[node] for node in order], dtype=np.int64)
    return Federated(mapping, node_of_client, sizes, excluded, readonly(ids) if excluded else None)


def wait_for_nodes(grid: Grid, clients: Mapping[int, int] | None, num_clients: int) -> list[int]:
    """The nodes of the federation, once all of them are connected (waiting as long as it takes, like Flower)."""
    wanted = set(clients) if clients is not None else None
    last_log = -math.inf
    while True:
        nodes = [int(node) for node in grid.get_node_ids()]
        if wanted is not None:
            if wanted <= set(nodes):
                return sorted(wanted)
        elif len(nodes) >= num_clients:
            if len(nodes) > num_clients:
                raise invalid("clients", _OWNER, f"given when more than {num_clients} nodes are connected", len(nodes))
            return sorted(nodes)
        if time.monotonic() - last_log > _WAIT_LOG_SECONDS:
            _log.info("%s: waiting for %d nodes (%d connected)", _OWNER, num_clients, len(nodes))
            last_log = time.monotonic()
        time.sleep(_WAIT_POLL_SECONDS)


def query_nodes(grid: Grid, nodes: list[int], asked: str, timeout: float | None) -> dict[int, MetricRecord]:
    """Ask every node for ``asked`` (``num-examples``, or ``client-id`` alone); every node must answer."""
    question = ConfigRecord({"fedsample-query": asked})
    messages = [
        Message(content=RecordDict({"config": question}), dst_node_id=node, message_type=MessageType.QUERY)
        for node in nodes
    ]
    replies = match_replies(messages, grid.send_and_receive(messages, timeout=timeout), "setup")
    answers = {
        node: reply_metrics(reply.content)
        for node, reply in zip(nodes, replies, strict=True)
        if reply is not None and not reply.has_error()
    }
    missing = sorted(set(nodes) - set(answers))
    if missing:
        raise FedsampleError(
            f"The {asked} query of {_OWNER} needs an answer from every node. Got none from nodes {missing} "
            "instead (pass 'sizes' and 'clients' to skip the query).",
            parameter="sizes" if asked == "num-examples" else "clients",
        )
    return answers


def node_mapping(
    clients: Mapping[int, int] | None,
    answers: Mapping[int, SizeAnswer],
    nodes: list[int],
    kept: list[int],
    num_clients: int,
) -> dict[int, int]:
    """The ``kept`` nodes' client ids among all ``nodes``: given, else reported by every kept node (each
    id once), else the nodes in increasing order (repeated reported ids fall back to it, with a warning)."""
    if clients is not None:
        if len(clients) != num_clients:
            raise invalid("clients", _OWNER, f"a mapping of {num_clients} nodes", len(clients))
        return {node: int(clients[node]) for node in kept}
    reported = {node: answers[node].client_id for node in kept if node in answers}
    if len(reported) == len(kept) and all(client is not None for client in reported.values()):
        if len(set(reported.values())) == len(kept):
            return {node: int(cast(int, client)) for node, client in reported.items()}
        _log.warning("setup: the nodes reported repeated client ids; the node ids' order gives them instead")
    rank = {node: i for i, node in enumerate(sorted(nodes))}
    return {node: rank[node] for node in kept}


def check_clients(clients: Mapping[int, int]) -> dict[int, int]:
    """``{node_id: client_id}`` as plain ints, onto the client ids ``0..n-1``, each once."""
    try:
        mapping = {int(node): int(client) for node, client in dict(clients).items()}
    except (TypeError, ValueError) as exc:
        raise invalid("clients", _OWNER, "a mapping of node ids to client ids", clients) from exc
    if sorted(mapping.values()) != list(range(len(mapping))) or not mapping:
        raise invalid("clients", _OWNER, "a mapping onto the client ids 0..n-1, each once", sorted(mapping.values()))
    return mapping


def count_clients(sizes: IntArray | None, clients: Mapping[int, int] | None, num_nodes: int | None) -> int:
    """``n``, as ``sizes``, ``clients`` and ``num_nodes`` say (at least one of them, all alike)."""
    counts = {
        name: count
        for name, count in (
            ("sizes", None if sizes is None else sizes.size),
            ("clients", None if clients is None else len(clients)),
            ("num_nodes", num_nodes),
        )
        if count is not None
    }
    if not counts:
        raise invalid("num_nodes", _OWNER, "given when neither 'sizes' nor 'clients' is", None)
    if len(set(counts.values())) > 1:
        raise invalid("clients", _OWNER, "as many clients as 'sizes' and 'num_nodes' say", counts)
    return int(next(iter(counts.values())))


def check_return_probabilities(
    value: npt.ArrayLike | float, num_clients: int, participation: Participation
) -> float | FloatArray:
    """One probability in ``(0, 1]``, or one per client; refused with the inverse-probability policy when
    the availability model has no ``a_i`` to multiply them by (a trace)."""
    if participation.aggregation.needs_return_rates and participation.availability.probabilities(num_clients) is None:
        raise invalid(
            "return_probabilities",
            _OWNER,
            "left out (estimated) with the inverse-probability policy when the availability model has no "
            "probabilities (a trace)",
            value,
        )
    name = "return_probabilities"
    if np.ndim(value) == 0:
        check_param(name, _OWNER, value, Interval(float, 0, 1, closed="right"))
        return float(cast(float, value))
    array = np.asarray(value, dtype=np.float64)
    if array.shape != (num_clients,) or not np.all((array > 0) & (array <= 1)):
        raise invalid(name, _OWNER, f"a probability in (0, 1] or {num_clients} of them", array)
    return readonly(array)
