"""A Flower strategy (Message API) that selects nodes with any fedsample sampler.

:class:`FedsampleStrategy` plugs a fedsample :class:`~fedsample.samplers.Sampler` into Flower's
``flwr.serverapp.strategy.Strategy``. Each round it

1. draws the selection ``S_t`` with the stream ``(seed, SAMPLING, t)``, ``t = server_round - 1``,
   among the available clients (connected nodes, and an optional availability model) exactly as
   :func:`fedsample.participation.procedure.select_participants` does: the same draw as
   :func:`fedsample.engine.simulate` makes for the same sampler, seed, federation and
   availability; a client drawn several times gets one message and its summed weight;
2. sends each selected node the global arrays and a config carrying its fedsample ``client-id``,
   the ``round-index`` ``t``, the ``seed`` and the selection's per-client instructions (for example
   the fixed-rate sampler's ``batch_size``), so that :func:`train_locally` reproduces the engine's
   batches;
3. settles the replies, aggregates the kept updates with the selection's weights and hands the
   round's :class:`~fedsample.samplers.Feedback` to ``sampler.update``
   (:func:`~fedsample.integrations.flower_aggregate.aggregate_round`, whose module says how failures,
   ``policy`` and over-selection are handled). A two-phase sampler (``optimal``,
   ``optimal-distribution``) reads every connected client's norms before step 1 instead
   (:mod:`~fedsample.integrations.flower_two_phase`).

Replies are data: every value a node sends (arrays, metrics, the answers to the size and norm
queries) is checked against what the server asked for before it touches the model or the sampler
(:mod:`~fedsample.integrations.flower_replies`); a bad reply is a failure of its node, counted
(``malformed``, ``rejected``), never an exception out of the strategy. The sampler's feedback is
read per node and bounded (:mod:`~fedsample.integrations.flower_feedback`), and an optional norm
bound (``norm_bound``, off by default) clips or rejects outsized updates.

Client sizes (for importances ``n_i / M`` and size-based samplers) are given as ``sizes`` or
learned by a query round before the first training round: each node answers a ``query`` message
with its ``num-examples`` (and optionally its ``client-id``; see :func:`query_reply`). These
sizes reach the server in clear. With a :class:`~fedsample.samplers.FedSamplingSampler` no size
does: the strategy runs the protocol of :mod:`fedsample.integrations.flower_fedsampling` instead
(each round, every node answers a randomized-response question, and draws its own kept samples
from the keep rate the answers give).

Requires the ``flower`` extra (``pip install 'fedsample[flower]'``); the client helper
:func:`train_locally` also needs the ``torch`` extra.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._params import Component, Parameter
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import Federation, ImportanceMode, as_sizes
from fedsample.integrations import flower_fedsampling as private
from fedsample.integrations._flwr import (
    ArrayRecord,
    ConfigRecord,
    Grid,
    Message,
    MetricRecord,
    Result,
    Strategy,
)
from fedsample.integrations.flower_aggregate import NormBound, aggregate_round
from fedsample.integrations.flower_client import (
    arrays_to_numpy,
    query_reply,
    to_array_record,
    train_locally,
    train_reply,
)
from fedsample.integrations.flower_feedback import FeedbackHistory
from fedsample.integrations.flower_nodes import (
    SubsetAvailability,
    check_clients,
    check_return_probabilities,
    connect_federation,
    count_clients,
)
from fedsample.integrations.flower_rounds import FAILURE_KINDS, RoundRecord
from fedsample.integrations.flower_selection import select_round
from fedsample.integrations.flower_two_phase import check_flower_phases
from fedsample.participation.availability import AlwaysAvailable, Availability
from fedsample.participation.estimators import ReturnRateEstimator
from fedsample.participation.policies import AGGREGATION_POLICIES
from fedsample.participation.procedure import FAILURE_COUNTS, Selected
from fedsample.participation.setting import Participation
from fedsample.samplers import FedSamplingSampler, Feedback, Sampler

__all__ = [
    "FAILURE_COUNTS",
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

# The engine's policies (fedsample.participation.policies), under the engine's names.
POLICIES: tuple[str, ...] = AGGREGATION_POLICIES

_log = logging.getLogger("flwr")
_OWNER = "FedsampleStrategy"


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
        How the weights of failed clients are handled: the engine's ``"ignore"`` (default here; the
        engine's default is ``"renormalise"``), ``"renormalise"`` or ``"inverse-probability"``
        (:mod:`~fedsample.integrations.flower_aggregate`).
    timeout:
        Seconds to wait for the replies of a round (and of the size query) before the missing
        ones count as failures (``dropped``, and for the sampler ``Feedback.timed_out``, waited
        ``timeout`` seconds); ``None`` waits for every reply (Flower's default of one hour).
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
        mixes it with a run's (:meth:`~fedsample.participation.setting.Participation.for_run`).
    redraws:
        Tries of the engine's redraw loop for an unavailable entry of a per-row design (MD,
        clustered...; :func:`~fedsample.samplers.row_draws.redraw_unavailable`); 0 skips
        unavailable clients as failures.
    over_selection:
        ``o >= 0``: the sampler draws ``ceil(m (1 + o))`` clients and the first ``m`` distinct
        clients to reply are kept.
    norm_bound:
        ``c >= 1``: an update whose norm ``||theta_i - theta||`` exceeds ``c`` times the lower median of
        the round's positive update norms is clipped to that bound or rejected
        (``norm_bound_action``). ``None`` (the default): off. It changes results and breaks
        unbiasedness (docs/flower.md).
    norm_bound_action:
        ``"clip"`` (default: the update is scaled down to the bound; the aggregate is biased toward
        small updates) or ``"reject"`` (the update is a ``rejected`` failure, corrected by ``policy``).

    >>> import fedsample
    >>> strategy = FedsampleStrategy(fedsample.make_sampler("md"), num_sampled=2, sizes=[30, 10, 60])
    >>> strategy.policy
    'ignore'
    """

    # The constructor's parameters and their constraints, declared once and checked in one place
    # (``sampler``, ``clients``, ``sizes``, ``return_probabilities`` and ``availability`` are checked
    # against each other and the federation by their own readers). The participation knobs are the
    # engine's, with the constraints Participation declares.
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "num_sampled": Interval(int, 1, None, closed="left"),
        "seed": Interval(int, 0, None, closed="left"),
        "server_lr": Interval(float, 0, None, closed="neither"),
        "policy": Options(POLICIES),  # one round's corrections; those with state across rounds are the engine's
        "timeout": NoneOr(Interval(float, 0, None, closed="neither")),
        "num_nodes": NoneOr(Interval(int, 1, None, closed="left")),
        "importance": Options(("size", "uniform")),
        "redraws": Participation._parameter_constraints["redraws"],
        "over_selection": Participation._parameter_constraints["over_selection"],
        "norm_bound": NoneOr(Interval(float, 1, math.inf, closed="left")),
        "norm_bound_action": Options(("clip", "reject")),
    }

    @classmethod
    def parameters(cls) -> Component:
        """The table of the declared parameters (:class:`fedsample._params.Component`): each one's default,
        read from the constructor's signature, and its constraint, from ``_parameter_constraints``."""
        signature = inspect.signature(cls.__init__).parameters
        table = {name: Parameter(signature[name].default, c) for name, c in cls._parameter_constraints.items()}
        return Component("flower", _OWNER, table)

    def __init__(
        self,
        sampler: Sampler[Any],
        *,
        num_sampled: int,
        seed: int = 0,
        server_lr: float = 1.0,
        policy: str = "ignore",
        timeout: float | None = None,
        clients: Mapping[int, int] | None = None,
        sizes: npt.ArrayLike | None = None,
        num_nodes: int | None = None,
        importance: ImportanceMode = "size",
        return_probabilities: npt.ArrayLike | float | None = None,
        availability: Availability | None = None,
        redraws: int = 10,
        over_selection: float = 0.0,
        norm_bound: float | None = None,
        norm_bound_action: str = "clip",
    ) -> None:
        arguments = locals()
        if not isinstance(sampler, Sampler):
            raise invalid("sampler", _OWNER, "a fedsample Sampler", sampler)
        check_flower_phases(sampler, _OWNER)
        self.parameters().validate(arguments)
        if availability is not None and not isinstance(availability, Availability):
            raise invalid("availability", _OWNER, "an Availability model or None", availability)
        if norm_bound is None and norm_bound_action != "clip":
            constraint = "'clip' (the default) unless 'norm_bound' is given"
            raise invalid("norm_bound_action", _OWNER, constraint, norm_bound_action)
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
        self.clients: dict[int, int] | None = None if clients is None else check_clients(clients)
        self.num_clients = count_clients(self.sizes, self.clients, num_nodes)
        # The engine's setting for these draws and for the settlement of the replies.
        self.participation = Participation(
            availability=AlwaysAvailable() if availability is None else availability,
            over_selection=float(over_selection),
            policy=cast(Any, policy),
            redraws=int(redraws),
        ).for_run(self.seed)
        self.return_probabilities: float | FloatArray | None = None
        if return_probabilities is not None:
            self.return_probabilities = check_return_probabilities(
                return_probabilities, self.num_clients, self.participation
            )
        self.norm_bound = None if norm_bound is None else NormBound(float(norm_bound), cast(Any, norm_bound_action))
        self.feedback_history = FeedbackHistory()  # the references of the feedback's bounds
        self.excluded: dict[int, str] = {}  # nodes left out of the federation for an invalid answer
        self.federation: Federation | None = None
        self.sampler_state: Any = None
        self.node_of_client: npt.NDArray[np.uint64] | None = None
        self.returns = ReturnRateEstimator(num_clients=self.num_clients)
        self.rounds: list[RoundRecord] = []
        self.computed = 0  # a two-phase round's clients that reported their norms (computed an update)
        self.malformed_reports = 0  # and the answers refused
        # The round configure_train built, its selection after availability, the global arrays, and the
        # message sent to each of the round's clients (None where none was).
        self._pending: tuple[RoundRecord, Selected, dict[str, np.ndarray], list[Message | None]] | None = None
        self._reply_timeout = self.timeout  # how long the round's replies are awaited (start may say otherwise)

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
        self._reply_timeout = wait  # the timed-out clients' waited seconds in the sampler's feedback
        try:
            return super().start(
                grid,
                initial_arrays,
                num_rounds=num_rounds,
                timeout=3600.0 if wait is None else wait,
                train_config=train_config,
                evaluate_config=evaluate_config,
                evaluate_fn=evaluate_fn,
            )
        finally:
            self._reply_timeout = self.timeout

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Draw round ``t = server_round - 1``'s selection among the available clients; one message per client.

        A client is available when its node is connected and the availability model says so
        (:func:`~fedsample.integrations.flower_selection.select_round` says how each kind of sampler
        draws); skipped clients get no message.
        """
        if self.node_of_client is None:
            self.setup(grid)
        assert self.node_of_client is not None
        record, selected, messages, self.sampler_state, phase_one = select_round(
            self.sampler,
            self.sampler_state,
            self.participation,
            self.federation,
            seed=self.seed,
            server_round=server_round,
            node_of_client=self.node_of_client,
            arrays=arrays,
            config=config,
            grid=grid,
            timeout=self.timeout,
            history=self.feedback_history,
        )
        if phase_one is not None:
            self.computed, self.malformed_reports = phase_one.computed, phase_one.malformed
            self.feedback_history = phase_one.history
        self._pending = (record, selected, arrays_to_numpy(arrays), messages)
        return [message for message in messages if message is not None]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate the kept clients with their (corrected) weights and update the sampler.

        Nothing a node sent raises here: a reply that does not hold what was asked is a failure of
        its node, and a sampler that refuses the round's feedback (a ``FedsampleError``) keeps its state.
        """
        if self._pending is None or self._pending[0].round != server_round - 1:
            owner = f"{_OWNER}.aggregate_train"
            raise invalid("server_round", owner, "the round configure_train last built", server_round)
        record, selected, theta, sent = self._pending
        self._pending = None
        record, new, round_feedback, summary, self.feedback_history = aggregate_round(
            self.sampler,
            record,
            selected,
            theta,
            sent,
            replies,
            self.participation,
            seed=self.seed,
            num_kept=self.num_sampled,
            server_lr=self.server_lr,
            given_rates=self.return_probabilities,
            estimator=self.returns,
            history=self.feedback_history,
            norm_bound=self.norm_bound,
            timeout=self._reply_timeout,
        )
        if self.sampler.two_phase:  # it read the round's norms before the draw; computation apart from upload
            summary["computed"], summary["communicated"] = self.computed, int(record.kept.sum())
            summary["malformed-reports"] = self.malformed_reports
        else:
            self.sampler_state = self._updated(round_feedback)
        self.rounds.append(record)
        return to_array_record(new), summary

    def _updated(self, feedback: Feedback) -> Any:
        """The sampler's state after the round's feedback; unchanged when the sampler refuses it (for
        example feedback="gradient" when no kept node reported a gradient norm)."""
        try:
            return self.sampler.update(self.sampler_state, feedback)
        except FedsampleError as error:  # what the nodes sent cannot end the round loop
            _log.warning("aggregate_train: the sampler refused the round's feedback, its state is unchanged: %s", error)
            return self.sampler_state

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
        is given), and the sampler's state holds no size. A node whose answer is not valid is left out
        (``excluded``), and the federation is the other nodes.
        """
        federated = connect_federation(
            grid,
            self.clients,
            self.num_clients,
            sizes=self.sizes,
            sizes_private=self.sizes_private,
            timeout=self.timeout,
        )
        self.clients, self.node_of_client, self.sizes = federated.clients, federated.node_of_client, federated.sizes
        self.excluded = federated.excluded
        if federated.original is not None:
            self._leave_out(federated.original)
        if isinstance(self.sampler, FedSamplingSampler):
            self.sampler_state = private.server_state(self.sampler)
            return
        assert self.sizes is not None
        self.federation = Federation.from_sizes(self.sizes, importance=self.importance)
        self.sampler_state = self.sampler.init(self.federation, self.participation.num_asked(self.num_sampled))

    def _leave_out(self, original: IntArray) -> None:
        """Restrict what was given per client to the federation's clients (client ``i`` was ``original[i]``)."""
        left_out = self.num_clients - original.size
        _log.warning("setup: %d of %d nodes left out of the federation", left_out, self.num_clients)
        availability = SubsetAvailability(self.participation.availability, original, self.num_clients)
        self.participation = dataclasses.replace(self.participation, availability=availability)
        if isinstance(self.return_probabilities, np.ndarray):
            self.return_probabilities = readonly(self.return_probabilities[original])
        self.num_clients = int(original.size)
        self.returns = ReturnRateEstimator(num_clients=self.num_clients)
