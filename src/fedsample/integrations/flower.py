"""A Flower strategy (Message API) that selects nodes with any fedsample sampler.

:class:`FedsampleStrategy` plugs a fedsample :class:`~fedsample.samplers.Sampler` into Flower's
``flwr.serverapp.strategy.Strategy``. Each round it

1. draws the selection ``S_t`` with the stream ``(seed, SAMPLING, t)``, ``t = server_round - 1``:
   the same draw as :func:`fedsample.engine.simulate` makes for the same sampler, seed and
   federation; a client drawn several times gets one message and its summed weight;
2. sends each selected node the global arrays and a config carrying its fedsample ``client-id``,
   the ``round-index`` ``t``, the ``seed`` and the selection's per-client instructions (for example
   FedSampling's ``batch_size``), so that :func:`train_locally` reproduces the engine's batches;
3. aggregates ``theta <- theta + eta_g * sum_i w_i (theta_i - theta)`` (paper 003's eq. 3) with the
   selection's weights, unchanged by default (unbiased samplers stay unbiased: the weights are not
   renormalised to sum to one);
4. treats replies that carry an error, never arrive within ``timeout``, or hold NaN/Inf arrays as
   failures: excluded from the sum, counted in the round's metrics, and corrected by ``policy``;
5. hands the round's :class:`~fedsample.samplers.Feedback` (returned clients, update norms, the
   losses and gradient norms the clients report, the update vectors when the sampler reads them)
   to ``sampler.update``, so that learning samplers (OSMD, clustered by similarity...) learn.

Client sizes (for importances ``n_i / M`` and size-based samplers) are given as ``sizes`` or
learned by a query round before the first training round: each node answers a ``query`` message
with its ``num-examples`` (and optionally its ``client-id``; see :func:`query_reply`).

Policies for the failed clients of a round (``w_i`` the selection's weights, ``R`` the returned):

``"unbiased"`` (default)
    ``w_i`` as drawn for ``i`` in ``R``; the failed clients' weight is lost. Without failures
    this is the sampler's own (unbiased, if the sampler is) aggregation.
``"renormalise"``
    ``w_i * sum_j w_j / sum_{j in R} w_j``: the weights keep their sum (biased when clients
    fail at different rates).
``"inverse-probability"``
    ``w_i / r_i`` with ``r_i`` the client's return probability, given as
    ``return_probabilities`` or estimated from the rounds so far
    (:class:`~fedsample.failures.ReturnRateEstimator`): unbiased when ``r_i`` is right.

Requires the ``flower`` extra (``pip install 'fedsample[flower]'``); the client helper
:func:`train_locally` also needs the ``torch`` extra.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample._validation import Interval, NoneOr, Options, check_param, invalid
from fedsample.data._optional import require
from fedsample.errors import FedsampleError
from fedsample.failures import ReturnRateEstimator, correct_weights
from fedsample.federation import Federation, ImportanceMode, as_sizes
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import Feedback, Sampler, Selection

require("flwr", extra="flower", package="flwr", owner="fedsample.integrations.flower")

from flwr.app import (  # noqa: E402  (after the check that names the extra to install)
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import Result, Strategy  # noqa: E402

if TYPE_CHECKING:
    from fedsample.engine.models import ModelSpec

__all__ = [
    "FAILURE_KINDS",
    "POLICIES",
    "FedsampleStrategy",
    "RoundRecord",
    "arrays_to_numpy",
    "query_reply",
    "to_array_record",
    "train_locally",
    "train_reply",
]

POLICIES: tuple[str, ...] = ("unbiased", "renormalise", "inverse-probability")
# The failures.correct_weights policy behind each of the strategy's policies.
_CORRECTION = {"unbiased": "ignore", "renormalise": "renormalise", "inverse-probability": "inverse-probability"}
FAILURE_KINDS: tuple[str, ...] = ("errors", "timeouts", "non-finite")

_log = logging.getLogger("flwr")
_OWNER = "FedsampleStrategy"
_WAIT_POLL_SECONDS = 0.1
_WAIT_LOG_SECONDS = 30.0


# --- arrays ----------------------------------------------------------------------------------


def to_array_record(params: Mapping[str, Any]) -> ArrayRecord:
    """An ``ArrayRecord`` of named arrays (numpy arrays or CPU tensors), in the mapping's order.

    The names must be the model's parameter names (for the engine's models, those of
    :meth:`~fedsample.engine.models.ModelSpec.init_params`) so that :func:`train_locally` can
    load them.
    """
    return ArrayRecord({name: Array(np.ascontiguousarray(np.asarray(value))) for name, value in params.items()})


def arrays_to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The named numpy arrays of an ``ArrayRecord``."""
    return {name: array.numpy() for name, array in record.items()}


def _reply_arrays(content: RecordDict) -> ArrayRecord | None:
    records = content.array_records
    if "arrays" in records:
        return records["arrays"]
    return next(iter(records.values())) if len(records) == 1 else None


def _reply_metrics(content: RecordDict) -> MetricRecord:
    records = content.metric_records
    if "metrics" in records:
        return records["metrics"]
    return next(iter(records.values())) if records else MetricRecord()


def _metric(metrics: MetricRecord, key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- the strategy ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RoundRecord:
    """What one training round of :class:`FedsampleStrategy` drew and received.

    ``clients``/``nodes``: the distinct selected clients (increasing) and their Flower node ids;
    ``weights``: their summed selection weights ``w_i(S_t)``; ``returned``: whose result was kept;
    ``applied``: the weights the aggregation used after the policy's correction (zero for
    failures); ``failures``: the count of each failure kind (``errors``, ``timeouts``,
    ``non-finite``).
    """

    round: int
    selection: Selection
    clients: IntArray
    nodes: npt.NDArray[np.uint64]
    weights: FloatArray
    returned: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    applied: FloatArray = field(default_factory=lambda: np.zeros(0))
    failures: Mapping[str, int] = field(default_factory=dict)


class FedsampleStrategy(Strategy):
    """Flower strategy: selection by a fedsample sampler, weighted aggregation, sampler feedback.

    Parameters
    ----------
    sampler:
        Any fedsample sampler (``fedsample.make_sampler("md")``, an ``OSMDSampler(...)``...).
    num_sampled:
        ``m``, the clients drawn per round.
    seed:
        Seed of the selections (round ``t`` draws from ``stream_rng(seed, SAMPLING, t)``) and of the
        clients' local batches (sent to them as ``seed``).
    server_lr:
        ``eta_g`` in ``theta <- theta + eta_g sum_i w_i (theta_i - theta)``.
    policy:
        How the weights of failed clients are handled: ``"unbiased"``, ``"renormalise"`` or
        ``"inverse-probability"`` (see the module documentation).
    timeout:
        Seconds to wait for the replies of a round (and of the size query) before the missing
        ones count as failures; ``None`` waits for every reply (Flower's default of one hour).
    clients:
        ``{node_id: client_id}`` for the ``n`` clients (ids ``0..n-1``). By default, the ids the
        nodes report in the size query, else the connected node ids in increasing order.
    sizes:
        ``n_i`` per client id. By default learned by the size query.
    num_nodes:
        How many nodes to wait for when neither ``clients`` nor ``sizes`` says it.
    importance:
        ``"size"`` (``p_i = n_i / M``) or ``"uniform"`` (``p_i = 1 / n``).
    return_probabilities:
        ``r_i`` per client id (or one value) for the ``"inverse-probability"`` policy; estimated
        from the rounds so far when not given.

    >>> import fedsample
    >>> strategy = FedsampleStrategy(fedsample.make_sampler("md"), num_sampled=2, sizes=[30, 10, 60])
    >>> strategy.policy
    'unbiased'
    """

    def __init__(
        self,
        sampler: Sampler[Any],
        *,
        num_sampled: int,
        seed: int = 0,
        server_lr: float = 1.0,
        policy: str = "unbiased",
        timeout: float | None = None,
        clients: Mapping[int, int] | None = None,
        sizes: npt.ArrayLike | None = None,
        num_nodes: int | None = None,
        importance: ImportanceMode = "size",
        return_probabilities: npt.ArrayLike | float | None = None,
    ) -> None:
        if not isinstance(sampler, Sampler):
            raise invalid("sampler", _OWNER, "a fedsample Sampler", sampler)
        check_param("num_sampled", _OWNER, num_sampled, Interval(int, 1, None, closed="left"))
        check_param("seed", _OWNER, seed, Interval(int, 0, None, closed="left"))
        check_param("server_lr", _OWNER, server_lr, Interval(float, 0, None, closed="neither"))
        check_param("policy", _OWNER, policy, Options(POLICIES))
        check_param("timeout", _OWNER, timeout, NoneOr(Interval(float, 0, None, closed="neither")))
        check_param("num_nodes", _OWNER, num_nodes, NoneOr(Interval(int, 1, None, closed="left")))
        check_param("importance", _OWNER, importance, Options(("size", "uniform")))
        self.sampler = sampler
        self.num_sampled = int(num_sampled)
        self.seed = int(seed)
        self.server_lr = float(server_lr)
        self.policy = policy
        self.timeout = None if timeout is None else float(timeout)
        self.importance: ImportanceMode = importance
        self.sizes: IntArray | None = None if sizes is None else as_sizes(sizes, owner=_OWNER)
        self.clients: dict[int, int] | None = None if clients is None else _check_clients(clients)
        counts = {
            name: count
            for name, count in (
                ("sizes", None if self.sizes is None else self.sizes.size),
                ("clients", None if self.clients is None else len(self.clients)),
                ("num_nodes", num_nodes),
            )
            if count is not None
        }
        if not counts:
            raise invalid("num_nodes", _OWNER, "given when neither 'sizes' nor 'clients' is", None)
        if len(set(counts.values())) > 1:
            raise invalid("clients", _OWNER, "as many clients as 'sizes' and 'num_nodes' say", counts)
        self.num_clients = next(iter(counts.values()))
        self.return_probabilities: float | FloatArray | None = None
        if return_probabilities is not None:
            self.return_probabilities = _check_return_probabilities(return_probabilities, self.num_clients)
        self.federation: Federation | None = None
        self.sampler_state: Any = None
        self.node_of_client: npt.NDArray[np.uint64] | None = None
        self.returns = ReturnRateEstimator(num_clients=self.num_clients)
        self.rounds: list[RoundRecord] = []
        self._pending: tuple[RoundRecord, dict[str, np.ndarray]] | None = None

    # -- Flower's entry points ----------------------------------------------------------------

    def summary(self) -> None:
        """Log the strategy's configuration."""
        _log.info("\t├──> Sampler: %s %s", self.sampler.name, self.sampler.get_params())
        _log.info("\t├──> Clients per round: %d (seed %d)", self.num_sampled, self.seed)
        _log.info("\t├──> Server learning rate: %g, failure policy: %s", self.server_lr, self.policy)
        _log.info("\t└──> Reply timeout: %s", "none" if self.timeout is None else f"{self.timeout:g} s")

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's round loop, waiting ``timeout`` (default: the strategy's) for each round's replies."""
        wait = timeout if timeout is not None else self.timeout
        return super().start(
            grid,
            initial_arrays,
            num_rounds=num_rounds,
            timeout=3600.0 if wait is None else wait,
            train_config=train_config,
            evaluate_config=evaluate_config,
            evaluate_fn=evaluate_fn,
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Draw round ``t = server_round - 1``'s selection and build one message per distinct client."""
        if self.node_of_client is None:
            self.setup(grid)
        assert self.node_of_client is not None
        t = server_round - 1
        selection = self.sampler.sample(self.sampler_state, stream_rng(self.seed, Stream.SAMPLING, t))
        clients, weights = selection.distinct()
        nodes = self.node_of_client[clients]
        # A client's instructions are those of its first entry (as in the engine).
        first = np.unique(selection.clients, return_index=True)[1]
        record = RoundRecord(round=t, selection=selection, clients=clients, nodes=nodes, weights=weights)
        self._pending = (record, arrays_to_numpy(arrays))
        _log.info(
            "configure_train: %s drew %d clients (%d draws)", self.sampler.name, clients.size, selection.num_draws
        )
        messages = []
        for j, (client, node, weight) in enumerate(zip(clients, nodes, weights, strict=True)):
            message_config = ConfigRecord(dict(config))
            message_config["server-round"] = server_round
            message_config["round-index"] = t
            message_config["client-id"] = int(client)
            message_config["seed"] = self.seed
            message_config["weight"] = float(weight)
            for name, values in selection.instructions.items():
                message_config[name] = float(values[first[j]])
            content = RecordDict({"arrays": arrays, "config": message_config})
            message = Message(
                content=content, dst_node_id=int(node), message_type=MessageType.TRAIN, group_id=str(server_round)
            )
            messages.append(message)
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate the returned clients with their (corrected) weights and update the sampler."""
        if self._pending is None or self._pending[0].round != server_round - 1:
            owner = f"{_OWNER}.aggregate_train"
            raise invalid("server_round", owner, "the round configure_train last built", server_round)
        record, theta = self._pending
        self._pending = None
        slot_of_node = {int(node): j for j, node in enumerate(record.nodes)}
        k = record.clients.size
        results: list[dict[str, np.ndarray] | None] = [None] * k
        metrics: list[MetricRecord | None] = [None] * k
        failures = dict.fromkeys(FAILURE_KINDS, 0)
        for reply in replies:
            j = slot_of_node.get(int(reply.metadata.src_node_id))
            if j is None or metrics[j] is not None:
                _log.warning(
                    "aggregate_train: ignored a reply from node %d (not selected, or a second reply)",
                    reply.metadata.src_node_id,
                )
                continue
            if reply.has_error():
                failures["errors"] += 1
                _log.info("\t> client %d failed: %s", record.clients[j], reply.error.reason)
                metrics[j] = MetricRecord()  # answered, so not a timeout
                continue
            arrays, problem = _checked_arrays(reply.content, theta)
            if arrays is None:
                kind = "non-finite" if problem == "non-finite" else "errors"
                failures[kind] += 1
                _log.info("\t> client %d rejected: %s", record.clients[j], problem)
                metrics[j] = MetricRecord()
                continue
            results[j] = arrays
            metrics[j] = _reply_metrics(reply.content)
        failures["timeouts"] = sum(m is None for m in metrics)
        returned = np.array([r is not None for r in results], dtype=bool)
        applied = self._corrected_weights(record, returned)
        self.returns.observe(record.clients, returned)
        kept = np.flatnonzero(returned)
        names = list(theta)
        # theta <- theta + eta_g * sum_i w_i (theta_i - theta); accumulated in float64.
        deltas = {name: np.zeros(theta[name].shape, dtype=np.float64) for name in names}
        update_norms = np.zeros(kept.size)
        flat_updates = []
        for position, slot in enumerate(kept):
            result = results[slot]
            assert result is not None
            squared = 0.0
            pieces = []
            for name in names:
                update = result[name] - theta[name]  # in the arrays' own dtype, like the engine
                deltas[name] += applied[slot] * update
                wide = update.astype(np.float64)
                squared += float(np.dot(wide.ravel(), wide.ravel()))
                if self.sampler.needs_updates:
                    pieces.append(wide.ravel())
            update_norms[position] = math.sqrt(squared)
            if self.sampler.needs_updates:
                flat_updates.append(np.concatenate(pieces) if pieces else np.zeros(0))
        new = {name: (theta[name] + self.server_lr * deltas[name]).astype(theta[name].dtype) for name in names}
        kept_metrics = [cast(MetricRecord, metrics[j]) for j in kept]
        losses = _column(kept_metrics, "train-loss")
        gradient_norms = _column(kept_metrics, "gradient-norm")
        local_lr = _first(kept_metrics, "local-lr")
        local_steps = _first(kept_metrics, "local-steps")
        dimension = sum(v.size for v in theta.values())
        feedback = Feedback(
            round=record.round,
            selection=record.selection,
            clients=record.clients[kept],
            update_norms=update_norms,
            updates=(np.stack(flat_updates) if flat_updates else np.zeros((0, dimension)))
            if self.sampler.needs_updates
            else None,
            losses=losses,
            gradient_norms=gradient_norms,
            local_lr=local_lr,
            local_steps=None if local_steps is None else round(local_steps),
        )
        self.sampler_state = self.sampler.update(self.sampler_state, feedback)
        done = RoundRecord(
            round=record.round,
            selection=record.selection,
            clients=record.clients,
            nodes=record.nodes,
            weights=record.weights,
            returned=readonly(returned),
            applied=readonly(applied),
            failures=failures,
        )
        self.rounds.append(done)
        summary = MetricRecord(
            {
                "selected": int(k),
                "draws": record.selection.num_draws,
                "returned": int(kept.size),
                "failures": int(k - kept.size),
                **{kind: int(count) for kind, count in failures.items()},
                "weight-sum": float(applied.sum()),
            }
        )
        if losses is not None and kept.size:
            w = record.weights[kept]
            summary["train-loss"] = float(np.dot(w, losses) / w.sum()) if w.sum() > 0 else float(losses.mean())
        if k - kept.size:
            _log.info("aggregate_train: %d of %d clients failed %s", k - kept.size, k, failures)
        return to_array_record(new), summary

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """No federated evaluation: evaluate centrally with ``start(..., evaluate_fn=...)``."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Nothing to aggregate (see :meth:`configure_evaluate`)."""
        return None

    # -- the federation ----------------------------------------------------------------------

    def setup(self, grid: Grid) -> None:
        """Learn the node-to-client mapping and the sizes (a query round if needed); init the sampler."""
        nodes = self._wait_for_nodes(grid)
        reported: dict[int, MetricRecord] = {}
        if self.sizes is None:
            reported = self._query(grid, nodes)
        if self.clients is not None:
            mapping = self.clients
        elif reported and all(_metric(m, "client-id") is not None for m in reported.values()):
            ids = {node: round(cast(float, _metric(m, "client-id"))) for node, m in reported.items()}
            mapping = _check_clients(ids)
        else:
            mapping = {node: i for i, node in enumerate(sorted(nodes))}
        if len(mapping) != self.num_clients:
            raise invalid("clients", _OWNER, f"a mapping of {self.num_clients} nodes", len(mapping))
        node_of_client = np.empty(self.num_clients, dtype=np.uint64)  # Flower node ids are unsigned 64-bit
        for node, client in mapping.items():
            node_of_client[client] = node
        if self.sizes is None:
            sizes = []
            for client in range(self.num_clients):
                value = _metric(reported[int(node_of_client[client])], "num-examples")
                if value is None:
                    raise FedsampleError(
                        f"The size query of {_OWNER} needs 'num-examples' from every node. Got none from node "
                        f"{int(node_of_client[client])} (client {client}) instead.",
                        parameter="sizes",
                    )
                sizes.append(round(value))
            self.sizes = as_sizes(sizes, owner=f"{_OWNER} (sizes reported by the nodes)")
        self.federation = Federation.from_sizes(self.sizes, importance=self.importance)
        self.sampler_state = self.sampler.init(self.federation, self.num_sampled)
        self.clients = mapping
        self.node_of_client = readonly(node_of_client)

    def _wait_for_nodes(self, grid: Grid) -> list[int]:
        """The nodes of the federation, once all of them are connected (waiting as long as it takes, like Flower)."""
        wanted = set(self.clients) if self.clients is not None else None
        last_log = -math.inf
        while True:
            nodes = [int(node) for node in grid.get_node_ids()]
            if wanted is not None:
                if wanted <= set(nodes):
                    return sorted(wanted)
            elif len(nodes) >= self.num_clients:
                if len(nodes) > self.num_clients:
                    raise invalid(
                        "clients", _OWNER, f"given when more than {self.num_clients} nodes are connected", len(nodes)
                    )
                return sorted(nodes)
            if time.monotonic() - last_log > _WAIT_LOG_SECONDS:
                _log.info("%s: waiting for %d nodes (%d connected)", _OWNER, self.num_clients, len(nodes))
                last_log = time.monotonic()
            time.sleep(_WAIT_POLL_SECONDS)

    def _query(self, grid: Grid, nodes: list[int]) -> dict[int, MetricRecord]:
        """Ask every node for its ``num-examples`` (and ``client-id``); every node must answer."""
        question = ConfigRecord({"fedsample-query": "num-examples"})
        messages = [
            Message(content=RecordDict({"config": question}), dst_node_id=node, message_type=MessageType.QUERY)
            for node in nodes
        ]
        answers: dict[int, MetricRecord] = {}
        for reply in grid.send_and_receive(messages, timeout=self.timeout):
            if not reply.has_error():
                answers[int(reply.metadata.src_node_id)] = _reply_metrics(reply.content)
        missing = sorted(set(nodes) - set(answers))
        if missing:
            raise FedsampleError(
                f"The size query of {_OWNER} needs an answer from every node. Got none from nodes {missing} "
                "instead (pass 'sizes' to skip the query).",
                parameter="sizes",
            )
        return answers

    def _corrected_weights(self, record: RoundRecord, returned: BoolArray) -> FloatArray:
        rates = None
        if self.policy == "inverse-probability":
            if self.return_probabilities is None:
                # Estimated from the rounds before this one, so that r_i does not depend on this round's fate.
                rates = self.returns.rates(record.clients)
            elif isinstance(self.return_probabilities, float):
                rates = np.full(record.clients.size, self.return_probabilities)
            else:
                rates = self.return_probabilities[record.clients]
        return correct_weights(record.weights, returned, _CORRECTION[self.policy], rates)


def _check_clients(clients: Mapping[int, int]) -> dict[int, int]:
    try:
        mapping = {int(node): int(client) for node, client in dict(clients).items()}
    except (TypeError, ValueError) as exc:
        raise invalid("clients", _OWNER, "a mapping of node ids to client ids", clients) from exc
    if sorted(mapping.values()) != list(range(len(mapping))) or not mapping:
        raise invalid("clients", _OWNER, "a mapping onto the client ids 0..n-1, each once", sorted(mapping.values()))
    return mapping


def _check_return_probabilities(value: npt.ArrayLike | float, num_clients: int) -> float | FloatArray:
    name = "return_probabilities"
    if np.ndim(value) == 0:
        check_param(name, _OWNER, value, Interval(float, 0, 1, closed="right"))
        return float(cast(float, value))
    array = np.asarray(value, dtype=np.float64)
    if array.shape != (num_clients,) or not np.all((array > 0) & (array <= 1)):
        raise invalid(name, _OWNER, f"a probability in (0, 1] or {num_clients} of them", array)
    return readonly(array)


def _checked_arrays(content: RecordDict, theta: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray] | None, str]:
    """The reply's arrays if they match the global model's names and shapes and are finite."""
    record = _reply_arrays(content)
    if record is None:
        return None, "no ArrayRecord in the reply"
    arrays = arrays_to_numpy(record)
    if set(arrays) != set(theta):
        return None, f"arrays named {sorted(arrays)} instead of {sorted(theta)}"
    for name, value in arrays.items():
        if value.shape != theta[name].shape:
            return None, f"array {name!r} of shape {value.shape} instead of {theta[name].shape}"
        if not np.all(np.isfinite(value)):
            return None, "non-finite"
    return arrays, ""


def _column(records: list[MetricRecord], key: str) -> FloatArray | None:
    values = [_metric(m, key) for m in records]
    if not values or any(v is None for v in values):
        return None
    return np.array(values, dtype=np.float64)


def _first(records: list[MetricRecord], key: str) -> float | None:
    for m in records:
        value = _metric(m, key)
        if value is not None:
            return value
    return None


# --- the client side ---------------------------------------------------------------------------


def query_reply(message: Message, *, num_examples: int, client_id: int | None = None) -> Message:
    """The answer to the strategy's size query: the node's ``num-examples`` and, if given, its ``client-id``.

    In a Flower simulation the natural ``client_id`` is ``context.node_config["partition-id"]``.
    """
    check_param("num_examples", "query_reply", num_examples, Interval(int, 1, None, closed="left"))
    metrics = MetricRecord({"num-examples": int(num_examples)})
    if client_id is not None:
        check_param("client_id", "query_reply", client_id, Interval(int, 0, None, closed="left"))
        metrics["client-id"] = int(client_id)
    return Message(RecordDict({"metrics": metrics}), reply_to=message)


def train_reply(
    message: Message,
    arrays: ArrayRecord | Mapping[str, Any],
    *,
    num_examples: int,
    train_loss: float | None = None,
    gradient_norm: float | None = None,
    local_lr: float | None = None,
    local_steps: int | None = None,
) -> Message:
    """The reply to a training message, with what the strategy's sampler reads.

    ``arrays`` is the locally trained model ``theta_i`` (same names and shapes as the global one);
    ``train_loss`` the loss at the start of local training (the engine reports the first batch's),
    ``gradient_norm`` the norm of the first mini-batch gradient, ``local_lr`` and ``local_steps``
    the round's ``eta_l`` and ``N`` (samplers turn update norms into gradient scales with them).
    """
    check_param("num_examples", "train_reply", num_examples, Interval(int, 0, None, closed="left"))
    record = arrays if isinstance(arrays, ArrayRecord) else to_array_record(arrays)
    metrics = MetricRecord({"num-examples": int(num_examples)})
    for key, value in (
        ("train-loss", train_loss),
        ("gradient-norm", gradient_norm),
        ("local-lr", local_lr),
        ("local-steps", local_steps),
    ):
        if value is not None:
            metrics[key] = float(value) if key != "local-steps" else int(value)
    return Message(RecordDict({"arrays": record, "metrics": metrics}), reply_to=message)


def train_locally(
    message: Message,
    *,
    model: ModelSpec,
    features: npt.ArrayLike,
    targets: npt.ArrayLike,
    local_steps: int,
    batch_size: int,
    local_lr: float,
    lr_decay: float = 1.0,
) -> Message:
    """Train on this client's data with the engine's local SGD and return :func:`train_reply`'s message.

    The batches are those :func:`fedsample.engine.simulate` draws for the same client, round and
    seed (read from the message's ``client-id``, ``round-index`` and ``seed``), ``N = local_steps``
    steps of ``min(B, n_i)`` distinct samples with ``B = batch_size`` (or the selection's
    ``batch_size`` instruction), at ``eta_l = local_lr * lr_decay**t``, on the batched backend;
    so a Flower run and a simulation of the same seed and data give the same models.
    """
    torch = require("torch", extra="torch", package="torch", owner="train_locally")
    from fedsample.engine.backends import BatchedBackend
    from fedsample.engine.batching import plan_batches

    config = message.content.config_records.get("config", ConfigRecord())
    try:
        client = int(cast(int, config["client-id"]))
        t = int(cast(int, config["round-index"]))
        seed = int(cast(int, config["seed"]))
    except KeyError as exc:
        raise invalid("message", "train_locally", "a FedsampleStrategy training message", exc.args[0]) from None
    x = torch.as_tensor(np.array(features))
    if x.is_floating_point():
        x = x.to(torch.float32)
    y = torch.as_tensor(np.array(targets)).to(torch.float32 if model.task == "regression" else torch.long)
    size = int(x.shape[0])
    if size == 0 or y.shape[0] != size:
        raise invalid("targets", "train_locally", f"one target per row of 'features' ({size})", int(y.shape[0]))
    batch = max(round(float(cast(float, config["batch_size"]))), 1) if "batch_size" in config else batch_size
    # The engine's batch rule over pooled offsets; here the pool holds this client alone, so every
    # other client id spans no rows, and the batch stream is keyed by (seed, round, client) as there.
    offsets = np.zeros(client + 2, dtype=np.int64)
    offsets[client + 1] = size
    plan = plan_batches(
        seeds=np.array([seed], dtype=np.int64),
        round_index=t,
        clients=np.array([client], dtype=np.int64),
        offsets=offsets,
        steps=local_steps,
        batch_size=batch_size,
        slot_batch_sizes=np.array([batch], dtype=np.int64),
    )
    theta = arrays_to_numpy(_reply_arrays(message.content) or ArrayRecord())
    start = {name: torch.as_tensor(np.array(value)).to(torch.float32).unsqueeze(0) for name, value in theta.items()}
    lr = local_lr * lr_decay**t
    result = BatchedBackend(model).train(start, features=x, targets=y, plan=plan, steps=local_steps, local_lr=lr)
    trained = {name: (start[name] + result.updates[name])[0].numpy() for name in start}
    return train_reply(
        message,
        trained,
        num_examples=size,
        train_loss=float(result.first_loss[0]),
        gradient_norm=float(result.gradient_norms[0]),
        local_lr=lr,
        local_steps=local_steps,
    )
