"""How :class:`~fedsample.integrations.flower.FedsampleStrategy` learns its federation: the nodes,
their client ids and their sizes (a query round when they are not given).

Requires the ``flower`` extra.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import cast

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._validation import Interval, check_param, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import as_sizes
from fedsample.integrations._flwr import ConfigRecord, Grid, Message, MessageType, MetricRecord, RecordDict
from fedsample.integrations.flower_rounds import match_replies, metric_value, reply_metrics
from fedsample.participation.rounds import Participation

__all__ = [
    "check_clients",
    "check_return_probabilities",
    "connect_federation",
    "count_clients",
    "node_mapping",
    "query_nodes",
    "reported_sizes",
    "wait_for_nodes",
]

_log = logging.getLogger("flwr")
_OWNER = "FedsampleStrategy"
_WAIT_POLL_SECONDS = 0.1
_WAIT_LOG_SECONDS = 30.0


def connect_federation(
    grid: Grid,
    clients: Mapping[int, int] | None,
    num_clients: int,
    *,
    sizes: IntArray | None,
    sizes_private: bool,
    timeout: float | None,
) -> tuple[dict[int, int], npt.NDArray[np.uint64], IntArray | None]:
    """The strategy's federation: ``{node_id: client_id}``, the node of each client and the sizes.

    Waits for the nodes, and asks them in a query round what is not given: their ``num-examples``
    (and client ids) when ``sizes`` is ``None``; with private sizes (FedSampling) only their
    ``client-id`` when ``clients`` is ``None``, and the sizes stay ``None``.
    """
    nodes = wait_for_nodes(grid, clients, num_clients)
    reported: dict[int, MetricRecord] = {}
    if sizes_private and clients is None:
        reported = query_nodes(grid, nodes, "client-id", timeout)
    elif not sizes_private and sizes is None:
        reported = query_nodes(grid, nodes, "num-examples", timeout)
    mapping, node_of_client = node_mapping(clients, reported, nodes, num_clients)
    if not sizes_private and sizes is None:
        sizes = reported_sizes(reported, node_of_client)
    return mapping, node_of_client, sizes


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
    clients: Mapping[int, int] | None, reported: Mapping[int, MetricRecord], nodes: list[int], num_clients: int
) -> tuple[dict[int, int], npt.NDArray[np.uint64]]:
    """``{node_id: client_id}`` (given, else reported by the nodes, else by increasing node id) and its inverse."""
    if clients is not None:
        mapping = dict(clients)
    elif reported and all(metric_value(m, "client-id") is not None for m in reported.values()):
        ids = {node: round(cast(float, metric_value(m, "client-id"))) for node, m in reported.items()}
        mapping = check_clients(ids)
    else:
        mapping = {node: i for i, node in enumerate(sorted(nodes))}
    if len(mapping) != num_clients:
        raise invalid("clients", _OWNER, f"a mapping of {num_clients} nodes", len(mapping))
    node_of_client = np.empty(num_clients, dtype=np.uint64)  # Flower node ids are unsigned 64-bit
    for node, client in mapping.items():
        node_of_client[client] = node
    return mapping, readonly(node_of_client)


def reported_sizes(reported: Mapping[int, MetricRecord], node_of_client: npt.NDArray[np.uint64]) -> IntArray:
    """``n_i`` per client id, from the ``num-examples`` every node reported in the size query."""
    sizes = []
    for client, node in enumerate(node_of_client):
        value = metric_value(reported[int(node)], "num-examples")
        if value is None:
            raise FedsampleError(
                f"The size query of {_OWNER} needs 'num-examples' from every node. Got none from node "
                f"{int(node)} (client {client}) instead.",
                parameter="sizes",
            )
        sizes.append(round(value))
    return as_sizes(sizes, owner=f"{_OWNER} (sizes reported by the nodes)")


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
    if participation.policy == "inverse-probability" and participation.availability.probabilities(num_clients) is None:
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
