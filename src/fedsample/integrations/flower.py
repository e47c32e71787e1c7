"""A Flower strategy (Message API) that selects nodes with any fedsample sampler.

:class:`FedsampleStrategy` plugs a fedsample :class:`~fedsample.samplers.Sampler` into Flower's
``flwr.serverapp.strategy.Strategy``. Each round it

1. draws the selection ``S_t`` with the stream ``(seed, SAMPLING, t)``, ``t = server_round - 1``,
   among the available clients (connected nodes, and an optional availability model) exactly as
   :func:`fedsample.participation.rounds.select_participants` does: the same draw as
   :func:`fedsample.engine.simulate` makes for the same sampler, seed, federation and
   availability; a client drawn several times gets one message and its summed weight;
2. sends each selected node the global arrays and a config carrying its fedsample ``client-id``,
   the ``round-index`` ``t``, the ``seed`` and the selection's per-client instructions (for example
   the fixed-rate sampler's ``batch_size``), so that :func:`train_locally` reproduces the engine's
   batches;
3. aggregates ``theta <- theta + eta_g * sum_i w_i (theta_i - theta)`` (paper 003's eq. 3) with the
   selection's weights, unchanged by default (unbiased samplers stay unbiased: the weights are not
   renormalised to sum to one);
4. matches each reply to the message it answers (its ``reply_to_message_id``), and treats replies
   that carry an error (the SuperLink's own reply for a node whose heartbeat expired included),
   never arrive within ``timeout``, or hold NaN/Inf arrays as failures, like the unavailable
   clients it skipped: excluded from the sum, counted in the round's
   metrics, and corrected by ``policy``; with ``over_selection = o > 0`` it keeps the first ``m``
   clients to reply (by the replies' ``created_at``), and the others are *late*;
5. hands the round's :class:`~fedsample.samplers.Feedback` (returned clients, update norms, the
   losses and gradient norms the clients report, the update vectors when the sampler reads them)
   to ``sampler.update``, so that learning samplers (OSMD, clustered by similarity...) learn.

Client sizes (for importances ``n_i / M`` and size-based samplers) are given as ``sizes`` or
learned by a query round before the first training round: each node answers a ``query`` message
with its ``num-examples`` (and optionally its ``client-id``; see :func:`query_reply`). These
sizes reach the server in clear. With a :class:`~fedsample.samplers.FedSamplingSampler` no size
does: the strategy runs the protocol of :mod:`fedsample.integrations.flower_fedsampling` instead
(each round, every node answers a randomized-response question, and draws its own kept samples
from the keep rate the answers give).

Policies for the failed clients of a round (``w_i`` the selection's weights, ``K`` the kept
clients: those that returned in time, less the late ones; ``R`` how many returned):

``"unbiased"`` (default)
    ``w_i`` as drawn for ``i`` in ``K``; the failed clients' weight is lost. Without failures
    this is the sampler's own (unbiased, if the sampler is) aggregation.
``"renormalise"``
    ``w_i * sum_j w_j / sum_{j in K} w_j``: the weights keep their sum (biased when clients
    fail at different rates).
``"inverse-probability"``
    ``w_i / (r_i min(1, m / R))`` with ``r_i`` the client's return probability, given as
    ``return_probabilities`` (times ``a_i`` where unavailable clients are skipped) or estimated
    from the rounds so far (:class:`~fedsample.participation.availability.ReturnRateEstimator`), and
    ``min(1, m / R)`` the keep probability of over-selection: unbiased when ``r_i`` is right.

Over-selection bounds the influence of stragglers on the model, not the round's wall-clock time:
Flower's ``send_and_receive`` still waits for every reply or the timeout, and it must, since the
keep probability ``min(1, m / R)`` needs ``R``, the number of clients that return in time. The
correction is exact when the reply order is independent of the clients (as in the engine's
simulated reply times); clients that are systematically slow are kept less often.

Requires the ``flower`` extra (``pip install 'fedsample[flower]'``); the client helper
:func:`train_locally` also needs the ``torch`` extra.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray, readonly
from fedsample._validation import Interval, NoneOr, Options, check_param, invalid
from fedsample.data._optional import require
from fedsample.errors import FedsampleError
from fedsample.federation import Federation, ImportanceMode, as_sizes
from fedsample.participation.availability import AlwaysAvailable, Availability
from fedsample.participation.policies import AggregationPolicy, ReturnRateEstimator, correct_weights
from fedsample.participation.rounds import Participation, select_participants
from fedsample.samplers import FedSamplingSampler, Feedback, Sampler, Selection

require("flwr", extra="flower", package="flwr", owner="fedsample.integrations.flower")

from flwr.app import (  # noqa: E402  (after the check that names the extra to install)
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import Result, Strategy  # noqa: E402

from fedsample.integrations import flower_fedsampling as private  # noqa: E402  (needs flwr too)
from fedsample.integrations.flower_client import (  # noqa: E402
    _reply_arrays,
    arrays_to_numpy,
    query_reply,
    to_array_record,
    train_locally,
    train_reply,
)

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
_CORRECTION: dict[str, AggregationPolicy] = {
    "unbiased": "ignore",
    "renormalise": "renormalise",
    "inverse-probability": "inverse-probability",
}
# The ways a messaged client fails to return; `RoundRecord.failures` and the round's metrics also
# count the draws that hit an unavailable client and the late clients, as the engine does.
FAILURE_KINDS: tuple[str, ...] = ("errors", "timeouts", "non-finite")

_log = logging.getLogger("flwr")
_OWNER = "FedsampleStrategy"
_WAIT_POLL_SECONDS = 0.1
_WAIT_LOG_SECONDS = 30.0


# --- replies ---------------------------------------------------------------------------------


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
    ``weights``: their summed selection weights ``w_i(S_t)``; ``available``: who was available
    and so messaged; ``returned``: whose finite result arrived in time; ``kept``: whose result was
    aggregated (``returned`` but for the late clients of over-selection); ``applied``: the weights
    the aggregation used after the policy's correction (zero for the others); ``failures``: the
    count of each failure kind (``errors``, ``timeouts``, ``non-finite``), of the draws that hit an
    unavailable client (``unavailable``, redraws included, as in the engine) and of the ``late``.
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


@dataclass(frozen=True, eq=False)
class _ConnectedAvailability(Availability):
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
        ``r_i`` per client id (or one value) for the ``"inverse-probability"`` policy: the
        probability that a selected, available client returns. Estimated from the rounds so far
        (skipped unavailable clients included) when not given.
    availability:
        A :class:`~fedsample.participation.availability.Availability` model (``BernoulliAvailability``,
        ``TraceAvailability``...) asked ``available(t, clients)`` each round, on top of the
        connected nodes. Its seed is mixed with ``seed`` as :func:`~fedsample.engine.simulate`
        mixes it with a run's (:meth:`~fedsample.participation.rounds.Participation.for_run`).
    redraws:
        Tries to replace an unavailable entry of a per-row design (MD, clustered...) by a fresh
        draw from its row; 0 skips unavailable clients as failures.
    over_selection:
        ``o >= 0``: the sampler draws ``ceil(m (1 + o))`` clients and the first ``m`` distinct
        clients to reply are kept.

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
        availability: Availability | None = None,
        redraws: int = 10,
        over_selection: float = 0.0,
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
        if availability is not None and not isinstance(availability, Availability):
            raise invalid("availability", _OWNER, "an Availability model or None", availability)
        check_param("redraws", _OWNER, redraws, Interval(int, 0, 1000, closed="both"))
        check_param("over_selection", _OWNER, over_selection, Interval(float, 0, 10, closed="both"))
        # FedSampling keeps every size on its client: the server asks for randomized answers instead.
        self.sizes_private = isinstance(sampler, FedSamplingSampler)
        if isinstance(sampler, FedSamplingSampler):
            private.check_strategy(
                sampler, sizes=sizes, importance=importance, policy=policy, over_selection=float(over_selection)
            )
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
        # The engine's setting for these draws (its policy is unused: the strategy corrects below).
        self.participation = Participation(
            availability=AlwaysAvailable() if availability is None else availability,
            over_selection=float(over_selection),
            policy=_CORRECTION[policy],
            redraws=int(redraws),
        ).for_run(self.seed)
        if (
            policy == "inverse-probability"
            and self.return_probabilities is not None
            and self.participation.availability.probabilities(self.num_clients) is None
        ):
            raise invalid(
                "return_probabilities",
                _OWNER,
                "left out (estimated) with the inverse-probability policy when the availability model has no "
                "probabilities (a trace)",
                return_probabilities,
            )
        self.federation: Federation | None = None
        self.sampler_state: Any = None
        self.node_of_client: npt.NDArray[np.uint64] | None = None
        self.returns = ReturnRateEstimator(num_clients=self.num_clients)
        self.rounds: list[RoundRecord] = []
        # The round configure_train built, the global arrays, the skipped clients' a_i (or ones), and
        # the message sent to each of the round's clients (None where none was).
        self._pending: tuple[RoundRecord, dict[str, np.ndarray], FloatArray | None, list[Message | None]] | None = None

    # -- Flower's entry points ----------------------------------------------------------------

    def summary(self) -> None:
        """Log the strategy's configuration."""
        _log.info("\t├──> Sampler: %s %s", self.sampler.name, self.sampler.get_params())
        _log.info("\t├──> Clients per round: %d (seed %d)", self.num_sampled, self.seed)
        _log.info("\t├──> Server learning rate: %g, failure policy: %s", self.server_lr, self.policy)
        _log.info(
            "\t├──> Availability: connected nodes and %s, redraws: %d, over-selection: %g",
            type(self.participation.availability).__name__,
            self.participation.redraws,
            self.participation.over_selection,
        )
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
        """Draw round ``t = server_round - 1``'s selection among the available clients; one message per client.

        A client is available when its node is connected (``grid.get_node_ids()``) and the
        availability model says so; unavailable entries are redrawn or skipped as in the engine
        (:func:`~fedsample.participation.rounds.select_participants`). Skipped clients get no message.
        With a FedSampling sampler the round starts with the question of
        :mod:`~fedsample.integrations.flower_fedsampling` instead: the available nodes that answer
        it are the round's clients, and each gets the keep rate in place of a weight.
        """
        if self.node_of_client is None:
            self.setup(grid)
        assert self.node_of_client is not None
        t = server_round - 1
        online = np.fromiter((int(node) for node in grid.get_node_ids()), dtype=np.uint64)
        connected = np.isin(self.node_of_client, online)
        if self.sizes_private:
            record, settings, availability_rates = self._ask_for_answers(server_round, connected, grid)
        else:
            record, settings, availability_rates = self._draw(t, connected)
        messages: list[Message | None] = []
        for j, (client, node) in enumerate(zip(record.clients, record.nodes, strict=True)):
            if not record.available[j]:
                messages.append(None)
                continue
            message_config = ConfigRecord(dict(config))
            message_config["server-round"] = server_round
            message_config["round-index"] = t
            message_config["client-id"] = int(client)
            message_config["seed"] = self.seed
            for name, value in settings[j].items():
                message_config[name] = value
            content = RecordDict({"arrays": arrays, "config": message_config})
            messages.append(
                Message(
                    content=content, dst_node_id=int(node), message_type=MessageType.TRAIN, group_id=str(server_round)
                )
            )
        self._pending = (record, arrays_to_numpy(arrays), availability_rates, messages)
        return [message for message in messages if message is not None]

    def _draw(self, t: int, connected: BoolArray) -> tuple[RoundRecord, list[dict[str, float]], FloatArray | None]:
        """The sampler's selection among the available clients, and each client's weight and instructions."""
        assert self.node_of_client is not None
        participation = self.participation
        if not connected.all():
            availability = _ConnectedAvailability(participation.availability, readonly(connected))
            participation = dataclasses.replace(participation, availability=availability)
        selected = select_participants(
            self.sampler, self.sampler_state, participation, seed=self.seed, round=t, num_clients=self.num_clients
        )
        selection, clients, weights = selected.selection, selected.clients, selected.weights
        record = RoundRecord(
            round=t,
            selection=selection,
            clients=clients,
            nodes=self.node_of_client[clients],
            weights=weights,
            available=readonly(selected.available.copy()),
            failures={"unavailable": selected.unavailable},
        )
        _log.info(
            "configure_train: %s drew %d clients (%d draws), %d available",
            self.sampler.name,
            clients.size,
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
            for j, weight in enumerate(weights)
        ]
        return record, settings, selected.return_probabilities

    def _ask_for_answers(
        self, server_round: int, connected: BoolArray, grid: Grid
    ) -> tuple[RoundRecord, list[dict[str, float]], None]:
        """FedSampling's question to the available nodes, and the keep rate their answers give.

        The nodes that answer are the round's clients, each of weight one (it sends its return
        already weighted); the others count as ``unavailable`` (not asked) or ``unanswered``.
        """
        assert self.node_of_client is not None
        sampler = cast(FedSamplingSampler, self.sampler)
        t = server_round - 1
        ids = np.arange(self.num_clients, dtype=np.int64)
        asked = ids[connected & self.participation.availability.available(t, ids)]
        question = private.question_config(self.sampler_state, t)
        questions = [
            Message(
                content=RecordDict({"config": question}),
                dst_node_id=int(self.node_of_client[client]),
                message_type=MessageType.QUERY,
                group_id=str(server_round),
            )
            for client in asked
        ]
        replies = _match_replies(questions, grid.send_and_receive(questions, timeout=self.timeout), "configure_train")
        threshold = self.sampler_state.size_threshold
        answers = [None if reply is None else private.read_answer(reply, threshold) for reply in replies]
        answered = np.array([answer is not None for answer in answers], dtype=bool)
        clients = asked[answered]
        values = np.array([answer for answer in answers if answer is not None], dtype=np.int64)
        estimate, rate, divisor = math.nan, math.nan, math.nan
        if clients.size:
            estimate, rate, divisor = sampler.rate_from_answers(values, self.sampler_state)
        record = RoundRecord(
            round=t,
            selection=private.round_selection(clients, estimate, rate),
            clients=clients,
            nodes=self.node_of_client[clients],
            weights=np.ones(clients.size),
            available=np.ones(clients.size, dtype=bool),
            failures={"unavailable": int(self.num_clients - asked.size), "unanswered": int((~answered).sum())},
        )
        _log.info(
            "configure_train: %d of %d asked nodes answered; estimated total %.1f, keep rate %.4g",
            clients.size,
            asked.size,
            estimate,
            rate,
        )
        return record, [private.train_config(rate, divisor)] * clients.size, None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate the kept clients with their (corrected) weights and update the sampler."""
        if self._pending is None or self._pending[0].round != server_round - 1:
            owner = f"{_OWNER}.aggregate_train"
            raise invalid("server_round", owner, "the round configure_train last built", server_round)
        record, theta, availability_rates, sent = self._pending
        self._pending = None
        k = record.clients.size
        # Each reply is matched to the message it answers (its reply_to_message_id), not to its sender:
        # the SuperLink answers for a node whose heartbeat expired with an error from its own node id.
        slots = [j for j in range(k) if sent[j] is not None]
        matched = _match_replies([cast(Message, sent[j]) for j in slots], replies, "aggregate_train")
        results: list[dict[str, np.ndarray] | None] = [None] * k
        metrics: list[MetricRecord | None] = [None] * k
        created = np.full(k, np.inf)
        failures = dict.fromkeys(FAILURE_KINDS, 0)
        failures["timeouts"] = sum(reply is None for reply in matched)
        for j, reply in zip(slots, matched, strict=True):
            if reply is None:
                continue
            if reply.has_error():
                failures["errors"] += 1
                _log.info("\t> client %d failed: %s", record.clients[j], reply.error.reason)
                continue
            arrays, problem = _checked_arrays(reply.content, theta)
            if arrays is None:
                kind = "non-finite" if problem == "non-finite" else "errors"
                failures[kind] += 1
                _log.info("\t> client %d rejected: %s", record.clients[j], problem)
                continue
            results[j] = arrays
            metrics[j] = _reply_metrics(reply.content)
            created[j] = float(reply.metadata.created_at)
        returned = np.array([r is not None for r in results], dtype=bool)
        kept, keep_probability = self._first_replies(returned, created, record.nodes)
        failures["unavailable"] = int(record.failures.get("unavailable", 0))
        if "unanswered" in record.failures:  # FedSampling's nodes that did not answer the question
            failures["unanswered"] = int(record.failures["unanswered"])
        failures["late"] = int((returned & ~kept).sum())
        applied = self._corrected_weights(record, kept, availability_rates, keep_probability)
        # The estimator learns who returned (late clients did), as the engine's does.
        self.returns.observe(record.clients, returned)
        kept_slots = np.flatnonzero(kept)
        names = list(theta)
        # theta <- theta + eta_g * sum_i w_i (theta_i - theta); accumulated in float64.
        deltas = {name: np.zeros(theta[name].shape, dtype=np.float64) for name in names}
        update_norms = np.zeros(kept_slots.size)
        flat_updates = []
        for position, slot in enumerate(kept_slots):
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
        kept_metrics = [cast(MetricRecord, metrics[j]) for j in kept_slots]
        losses = _column(kept_metrics, "train-loss")
        gradient_norms = _column(kept_metrics, "gradient-norm")
        local_lr = _first(kept_metrics, "local-lr")
        local_steps = _first(kept_metrics, "local-steps")
        dimension = sum(v.size for v in theta.values())
        feedback = Feedback(
            round=record.round,
            selection=record.selection,
            clients=record.clients[kept_slots],
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
        done = dataclasses.replace(
            record,
            returned=readonly(returned),
            kept=readonly(kept),
            applied=readonly(applied),
            failures=failures,
        )
        self.rounds.append(done)
        num_returned = int(returned.sum())
        summary = MetricRecord(
            {
                "selected": int(k),
                "draws": record.selection.num_draws,
                "asked": int(record.available.sum()),
                "returned": num_returned,
                "kept": int(kept_slots.size),
                "failures": int(k - num_returned),
                **{kind: int(count) for kind, count in failures.items()},
                "weight-sum": float(applied.sum()),
            }
        )
        if losses is not None and kept_slots.size:
            w = record.weights[kept_slots]
            summary["train-loss"] = float(np.dot(w, losses) / w.sum()) if w.sum() > 0 else float(losses.mean())
        if k - num_returned:
            _log.info("aggregate_train: %d of %d clients failed %s", k - num_returned, k, failures)
        return to_array_record(new), summary

    def _first_replies(
        self, returned: BoolArray, created: FloatArray, nodes: npt.NDArray[np.uint64]
    ) -> tuple[BoolArray, float]:
        """The first ``m`` returned clients by reply time (ties by node id), and ``min(1, m / R)``."""
        num_returned = int(returned.sum())
        if self.participation.over_selection == 0 or num_returned <= self.num_sampled:
            return returned.copy(), 1.0
        order = np.lexsort((nodes, np.where(returned, created, np.inf)))
        kept = np.zeros_like(returned)
        kept[order[: self.num_sampled]] = True
        return kept, self.num_sampled / num_returned

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
        """Learn the node-to-client mapping and the sizes (a query round if needed); init the sampler.

        With a FedSampling sampler the query asks for the ``client-id`` alone (none when ``clients``
        is given), and the sampler's state holds no size.
        """
        nodes = self._wait_for_nodes(grid)
        reported: dict[int, MetricRecord] = {}
        if self.sizes_private and self.clients is None:
            reported = self._query(grid, nodes, "client-id")
        elif not self.sizes_private and self.sizes is None:
            reported = self._query(grid, nodes, "num-examples")
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
        self.clients = mapping
        self.node_of_client = readonly(node_of_client)
        if isinstance(self.sampler, FedSamplingSampler):
            self.sampler_state = private.server_state(self.sampler)
            return
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
        self.sampler_state = self.sampler.init(self.federation, self.participation.num_asked(self.num_sampled))

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

    def _query(self, grid: Grid, nodes: list[int], asked: str) -> dict[int, MetricRecord]:
        """Ask every node for ``asked`` (``num-examples``, or ``client-id`` alone); every node must answer."""
        question = ConfigRecord({"fedsample-query": asked})
        messages = [
            Message(content=RecordDict({"config": question}), dst_node_id=node, message_type=MessageType.QUERY)
            for node in nodes
        ]
        replies = _match_replies(messages, grid.send_and_receive(messages, timeout=self.timeout), "setup")
        answers = {
            node: _reply_metrics(reply.content)
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

    def _corrected_weights(
        self, record: RoundRecord, kept: BoolArray, availability_rates: FloatArray | None, keep_probability: float
    ) -> FloatArray:
        """The policy's weights for the kept clients: ``w_i / (r_i min(1, m / R))`` under inverse-probability."""
        rates = None
        if self.policy == "inverse-probability":
            if self.return_probabilities is None:
                # Estimated from the rounds before this one, so that r_i does not depend on this round's fate;
                # the estimator has seen the skipped unavailable clients fail, so a_i is in its rates.
                rates = self.returns.rates(record.clients)
            else:
                given = self.return_probabilities
                rates = np.full(record.clients.size, given) if isinstance(given, float) else given[record.clients]
                # a_i where unavailable clients are skipped (ones where they are redrawn), as in the engine.
                if availability_rates is not None:
                    rates = rates * availability_rates
            rates = rates * keep_probability
        return correct_weights(record.weights, kept, _CORRECTION[self.policy], rates)


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


def _match_replies(sent: Sequence[Message], replies: Iterable[Message], owner: str) -> list[Message | None]:
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
