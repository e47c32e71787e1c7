"""The Flower strategy: unit tests on hand-built messages, and real Flower simulation runs.

The simulation test runs one Flower simulation (Ray actors as clients) whose ServerApp runs four
strategies one after another on the same eight nodes: MD sampling and OSMD sampling (compared
with fedsample's own engine for the same seed and data), and two with injected failures.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, as_node, client_of  # noqa: E402
from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

import fedsample  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations.flower import (  # noqa: E402
    FedsampleStrategy,
    query_reply,
    to_array_record,
    train_reply,
)
from fedsample.participation.availability import BernoulliAvailability, TraceAvailability  # noqa: E402
from fedsample.participation.policies import AGGREGATION_POLICIES, correct_weights  # noqa: E402
from fedsample.participation.procedure import select_participants  # noqa: E402
from fedsample.participation.setting import Participation  # noqa: E402
from fedsample.rng import Stream, stream_rng  # noqa: E402
from fedsample.samplers import ROUND_FIELDS, Feedback  # noqa: E402

SERVER_NODE = 0


@pytest.fixture(autouse=True)
def task_identity() -> Iterator[None]:
    with as_node(SERVER_NODE):
        yield


NODES = [901, 17, 4400, 250]  # node ids in no particular order
SIZES = [30, 10, 60, 100]
THETA = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], dtype=np.float32)}


def _trained(client: int) -> dict[str, np.ndarray]:
    """A deterministic 'trained model' for a client: theta plus a client-specific shift."""
    return {n: (v + np.float32(0.1 * (client + 1)) * np.ones_like(v)).astype(np.float32) for n, v in THETA.items()}


def _reply(message: Message, client: int, **extra: float) -> Message:
    return train_reply(message, _trained(client), num_examples=SIZES[client], **extra)  # type: ignore[arg-type]


def _strategy(sampler: Any, **kwargs: Any) -> tuple[FedsampleStrategy, list[Message]]:
    strategy = FedsampleStrategy(sampler, sizes=SIZES, **kwargs)
    return strategy, FakeGrid(NODES).configure(strategy, to_array_record(THETA))


def _expected(weights: dict[int, float], server_lr: float = 1.0) -> dict[str, np.ndarray]:
    out = {}
    for name, value in THETA.items():
        delta = sum(w * (_trained(c)[name].astype(np.float64) - value) for c, w in weights.items())
        out[name] = value + server_lr * delta
    return out


# --- configure_train -----------------------------------------------------------------------------


def test_configure_train_draws_the_engines_selection_and_one_message_per_client() -> None:
    sampler = fedsample.MDSampler()
    _, messages = _strategy(sampler, num_sampled=7, seed=11)
    state = sampler.init(fedsample.Federation.from_sizes(SIZES), 7)
    expected = sampler.sample(state, stream_rng(11, Stream.SAMPLING, 0))
    clients, weights = expected.distinct()
    assert clients.size < 7  # 7 draws from 4 clients: some client is drawn twice
    # Default mapping: the connected node ids in increasing order are clients 0, 1, 2...
    node_of = dict(enumerate(sorted(NODES)))
    assert [m.metadata.dst_node_id for m in messages] == [node_of[int(c)] for c in clients]
    assert [client_of(m) for m in messages] == clients.tolist()
    sent = [float(m.content["config"]["weight"]) for m in messages]  # type: ignore[arg-type, call-overload]
    np.testing.assert_allclose(sent, weights)
    for m in messages:
        config = m.content["config"]
        assert m.metadata.message_type == MessageType.TRAIN
        assert (config["round-index"], config["server-round"], config["seed"]) == (0, 1, 11)
        np.testing.assert_array_equal(m.content["arrays"]["w"].numpy(), THETA["w"])


def test_configure_train_sends_the_selections_instructions() -> None:
    sampler = fedsample.make_sampler("fixed-rate", rate=0.5)
    _, messages = _strategy(sampler, num_sampled=3, seed=2)
    assert messages
    assert all("batch_size" in m.content["config"] for m in messages)


def test_size_query_learns_sizes_and_client_ids() -> None:
    reported = {node: (client, size) for client, (node, size) in enumerate(zip(NODES, SIZES, strict=True))}

    def answer(message: Message) -> Message:
        assert message.metadata.message_type == MessageType.QUERY
        client, size = reported[message.metadata.dst_node_id]
        return query_reply(message, num_examples=size, client_id=client)

    strategy = FedsampleStrategy(fedsample.MDSampler(), num_sampled=2, num_nodes=4)
    grid = FakeGrid(NODES, answer)
    messages = list(strategy.configure_train(1, to_array_record(THETA), ConfigRecord(), grid))
    assert len(grid.sent) == 4  # the query reached every node (training messages are returned, not sent)
    assert strategy.sizes is not None
    assert strategy.sizes.tolist() == SIZES
    assert strategy.node_of_client is not None
    assert strategy.node_of_client.tolist() == NODES
    for m in messages:
        assert NODES[client_of(m)] == m.metadata.dst_node_id


def test_size_query_without_an_answer_is_an_error() -> None:
    def answer(message: Message) -> Message | None:
        if message.metadata.dst_node_id == 17:
            return None
        return query_reply(message, num_examples=5)

    strategy = FedsampleStrategy(fedsample.MDSampler(), num_sampled=2, num_nodes=4)
    with pytest.raises(FedsampleError, match=r"nodes \[17\]"):
        strategy.configure_train(1, to_array_record(THETA), ConfigRecord(), FakeGrid(NODES, answer))


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"policy": "drop"}, "policy"),
        ({"server_lr": 0.0}, "server_lr"),
        ({"timeout": -1.0}, "timeout"),
        ({"clients": {1: 0, 2: 2}}, "clients"),
        ({"return_probabilities": 1.5}, "return_probabilities"),
    ],
)
def test_bad_parameters_name_the_parameter(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'"):
        FedsampleStrategy(fedsample.MDSampler(), num_sampled=2, sizes=[1, 2, 3], **kwargs)


def test_the_number_of_clients_must_be_known() -> None:
    with pytest.raises(FedsampleError, match="'num_nodes'"):
        FedsampleStrategy(fedsample.MDSampler(), num_sampled=2)


# --- aggregate_train -------------------------------------------------------------------------------


def test_aggregation_uses_the_selection_weights_unnormalised_and_the_server_lr() -> None:
    # Uniform sampling without replacement weights each of the m clients p_i n / m: the weights
    # of a round do not sum to one, and the strategy must not renormalise them.
    sampler = fedsample.make_sampler("uniform")
    strategy, messages = _strategy(sampler, num_sampled=2, seed=5, server_lr=0.7)
    record_weights = {client_of(m): float(m.content["config"]["weight"]) for m in messages}  # type: ignore[arg-type, call-overload]
    assert not np.isclose(sum(record_weights.values()), 1.0)
    arrays, metrics = strategy.aggregate_train(1, [_reply(m, client_of(m)) for m in messages])
    assert arrays is not None
    assert metrics is not None
    expected = _expected(record_weights, server_lr=0.7)
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], rtol=0, atol=1e-6)
        assert arrays[name].numpy().dtype == np.float32
    assert metrics["failures"] == 0
    assert metrics["returned"] == 2
    assert metrics["weight-sum"] == pytest.approx(sum(record_weights.values()))


def _failed_round(policy: str, **kwargs: Any) -> tuple[FedsampleStrategy, list[Message], Any, Any]:
    strategy, messages = _strategy(fedsample.make_sampler("uniform"), num_sampled=4, seed=1, policy=policy, **kwargs)
    assert len(messages) == 4
    error = Message(Error(code=0, reason="client raised"), reply_to=messages[0])
    nan = train_reply(messages[1], {n: np.full_like(v, np.nan) for n, v in THETA.items()}, num_examples=5)
    good = [_reply(m, client_of(m)) for m in messages[2:3]]
    # messages[3] never answers: a timeout.
    arrays, metrics = strategy.aggregate_train(1, [error, nan, *good])
    return strategy, messages, arrays, metrics


@pytest.mark.parametrize("policy", ["ignore", "renormalise", "inverse-probability"])
def test_failures_are_excluded_counted_and_corrected_by_the_policy(policy: str) -> None:
    strategy, messages, arrays, metrics = _failed_round(policy, return_probabilities=0.8)
    # The engine's counts: the error reply and the timeout dropped out, the NaN update was rejected.
    assert (metrics["dropped"], metrics["rejected"], metrics["unavailable"], metrics["late"]) == (2, 1, 0, 0)
    assert (metrics["failures"], metrics["returned"], metrics["selected"]) == (3, 1, 4)
    record = strategy.rounds[-1]
    np.testing.assert_array_equal(record.returned, [False, False, True, False])
    rates = np.full(4, 0.8) if policy == "inverse-probability" else None
    applied = correct_weights(record.weights, record.returned, policy, rates)
    np.testing.assert_allclose(record.applied, applied)
    expected = _expected({client_of(messages[2]): float(applied[2])})
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], atol=1e-6)
    assert metrics["weight-sum"] == pytest.approx(float(applied.sum()))


def test_inverse_probability_estimates_return_rates_from_earlier_rounds() -> None:
    strategy, *_ = _failed_round("inverse-probability")
    # Round 1 had no history: every rate is the prior's pooled rate of 1, so w_i / 1.
    np.testing.assert_allclose(strategy.rounds[0].applied[2], strategy.rounds[0].weights[2])
    rates = strategy.returns.rates(strategy.rounds[0].clients)
    assert np.all(rates < 1)
    assert rates[2] > rates[0]


def test_a_round_where_nobody_returns_keeps_the_model() -> None:
    strategy, messages = _strategy(fedsample.MDSampler(), num_sampled=3, policy="renormalise", timeout=1.0)
    arrays, metrics = strategy.aggregate_train(1, [])
    assert arrays is not None
    assert metrics is not None
    for name in THETA:
        np.testing.assert_array_equal(arrays[name].numpy(), THETA[name])
    assert metrics["dropped"] == len(messages)
    assert metrics["returned"] == 0


def test_replies_with_wrong_arrays_are_malformed() -> None:
    strategy, messages = _strategy(fedsample.make_sampler("uniform"), num_sampled=2)
    wrong = train_reply(messages[0], {"w": THETA["w"]}, num_examples=3)  # 'b' missing
    shaped = train_reply(messages[1], {"w": THETA["w"].T[:1], "b": THETA["b"]}, num_examples=3)
    _, metrics = strategy.aggregate_train(1, [wrong, shaped])
    assert metrics is not None
    # Not what was asked: the strategy's own failure kind (issue 24), no longer the engine's "rejected".
    assert (metrics["malformed"], metrics["rejected"], metrics["dropped"]) == (2, 0, 0)
    assert metrics["returned"] == 0


def test_feedback_reaches_the_sampler() -> None:
    sampler = fedsample.OSMDSampler(eta=0.5)
    strategy, messages = _strategy(sampler, num_sampled=3, seed=4)
    state = strategy.sampler_state
    replies = [
        _reply(m, client_of(m), train_loss=1.0 + client_of(m), gradient_norm=2.0, local_lr=0.1, local_steps=5)
        for m in messages
    ]
    strategy.aggregate_train(1, replies)
    record = strategy.rounds[-1]
    norms = [
        np.sqrt(sum(float(np.sum((_trained(c)[n].astype(np.float64) - THETA[n]) ** 2)) for n in THETA))
        for c in record.clients
    ]
    feedback = Feedback(
        round=0,
        selection=record.selection,
        clients=record.clients,
        update_norms=np.array(norms),
        losses=1.0 + record.clients.astype(np.float64),
        gradient_norms=np.full(record.clients.size, 2.0),
        local_lr=0.1,
        local_steps=5,
    )
    expected = sampler.update(state, feedback)
    np.testing.assert_allclose(strategy.sampler_state.probabilities, expected.probabilities, rtol=1e-6)
    assert not np.allclose(strategy.sampler_state.probabilities, state.probabilities)


def test_loss_squares_from_the_replies_reach_the_sampler() -> None:
    """Oort reads the replies' train-loss-squares (its utility is n_i sqrt(loss_squares_i)), not train-loss^2."""
    sampler = fedsample.make_sampler("oort")
    strategy, messages = _strategy(sampler, num_sampled=3, seed=4)
    state = strategy.sampler_state
    replies = [_reply(m, client_of(m), train_loss=1.0, train_loss_squares=4.0 + client_of(m)) for m in messages]
    strategy.aggregate_train(1, replies)
    record = strategy.rounds[-1]
    ones = np.ones(record.clients.size)
    without = Feedback(round=0, selection=record.selection, clients=record.clients, losses=ones)
    with_squares = Feedback(
        round=0,
        selection=record.selection,
        clients=record.clients,
        losses=ones,
        loss_squares=4.0 + record.clients.astype(np.float64),
    )
    got = fedsample.dumps(strategy.sampler_state)
    assert got == fedsample.dumps(sampler.update(state, with_squares))
    assert got != fedsample.dumps(sampler.update(state, without))


def test_replies_from_unselected_nodes_and_second_replies_are_ignored() -> None:
    strategy, messages = _strategy(fedsample.make_sampler("uniform"), num_sampled=2, seed=8)
    chosen = {m.metadata.dst_node_id for m in messages}
    other = next(node for node in NODES if node not in chosen)
    stranger = Message(RecordDict({"config": ConfigRecord()}), dst_node_id=other, message_type=MessageType.TRAIN)
    error = Message(Error(code=0, reason="first"), reply_to=messages[0])
    replies = [error, _reply(messages[0], client_of(messages[0])), _reply(stranger, 0), _reply(messages[1], 1)]
    _, metrics = strategy.aggregate_train(1, replies)
    assert metrics is not None
    assert (metrics["dropped"], metrics["returned"], metrics["rejected"]) == (1, 1, 0)


def test_the_superlinks_reply_for_an_expired_node_is_matched_and_the_node_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # When a node's heartbeat expires, the SuperLink answers its pending message itself: an error
    # reply from the SuperLink's node id, naming the message it answers. It is the node's failure.
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.server.superlink.linkstate.utils import create_message_error_unavailable_res_message

    strategy, messages = _strategy(fedsample.make_sampler("uniform"), num_sampled=2, seed=8)
    expired = create_message_error_unavailable_res_message(messages[0].metadata, "node_unavail")
    assert expired.metadata.src_node_id == SUPERLINK_NODE_ID != messages[0].metadata.dst_node_id
    with caplog.at_level(logging.WARNING, logger="flwr"):
        _, metrics = strategy.aggregate_train(1, [expired, _reply(messages[1], client_of(messages[1]))])
    assert metrics is not None
    assert (metrics["dropped"], metrics["returned"]) == (1, 1)
    assert "ignored a reply" not in caplog.text
    np.testing.assert_array_equal(strategy.rounds[-1].returned, [False, True])


def test_a_reply_to_an_earlier_rounds_message_is_ignored_though_its_node_was_selected() -> None:
    # Round 1's late reply reaches round 2 from a node that round 2 selected again: it answers
    # no message of round 2, so it is not that node's result (the node's round-2 reply never came).
    strategy = _setup(fedsample.make_sampler("full"), num_sampled=4)
    grid = FakeGrid(NODES)
    first = grid.configure(strategy, _theta(), 1)
    strategy.aggregate_train(1, [_reply(m, client_of(m)) for m in first[1:]])
    second = grid.configure(strategy, _theta(), 2)
    assert first[0].metadata.dst_node_id == second[0].metadata.dst_node_id
    late = _reply(first[0], client_of(first[0]))
    _, metrics = strategy.aggregate_train(2, [late, *[_reply(m, client_of(m)) for m in second[1:]]])
    assert metrics is not None
    assert (metrics["dropped"], metrics["returned"]) == (1, 3)
    assert not strategy.rounds[-1].returned[0]


@dataclass(frozen=True, kw_only=True)
class FeedbackKeepingSampler(fedsample.MDSampler):
    """MD sampling whose update keeps the feedback it was given (and asks for the update vectors)."""

    reads: ClassVar[frozenset[str]] = ROUND_FIELDS | {"updates"}

    def update(self, state: Any, feedback: Feedback) -> Any:
        return (state, feedback)


def test_samplers_that_read_updates_get_the_update_vectors() -> None:
    strategy, messages = _strategy(FeedbackKeepingSampler(), num_sampled=3, seed=3)
    strategy.aggregate_train(1, [_reply(m, client_of(m)) for m in messages[1:]])
    _, feedback = strategy.sampler_state
    clients = [client_of(m) for m in messages[1:]]
    assert feedback.clients.tolist() == clients
    expected = [np.concatenate([(_trained(c)[n] - THETA[n]).ravel() for n in THETA]) for c in clients]
    np.testing.assert_allclose(feedback.updates, np.stack(expected))
    np.testing.assert_allclose(feedback.update_norms, np.linalg.norm(np.stack(expected), axis=1), rtol=1e-6)


# --- availability and over-selection ------------------------------------------------------------


def _theta() -> ArrayRecord:
    return to_array_record(THETA)


def _setup(sampler: Any, **kwargs: Any) -> FedsampleStrategy:
    """A strategy set up with every node connected (clients 0..3 are the sorted NODES)."""
    strategy = FedsampleStrategy(sampler, sizes=SIZES, **kwargs)
    strategy.setup(FakeGrid(NODES))  # type: ignore[arg-type]
    return strategy


def test_a_disconnected_node_is_never_selected_and_counts_as_unavailable() -> None:
    # Client 3 (the node of 100 samples, p = 0.5) is disconnected; MD's draws landing on it are redrawn.
    strategy = _setup(fedsample.MDSampler(), num_sampled=12, seed=2)
    gone = sorted(NODES)[3]
    messages = FakeGrid([node for node in NODES if node != gone]).configure(strategy, _theta())
    assert gone not in {m.metadata.dst_node_id for m in messages}
    record = strategy._pending[0]  # type: ignore[index]
    assert 3 not in record.selection.clients.tolist()
    assert record.selection.num_draws == 12  # redrawn, so the round keeps its size
    # The same draw as the engine's for an availability model that excludes client 3 (every round).
    sampler = fedsample.MDSampler()
    state = sampler.init(fedsample.Federation.from_sizes(SIZES), 12)
    without = Participation(availability=TraceAvailability(np.arange(3), np.zeros(3, int), np.full(3, 99)))
    expected = select_participants(sampler, state, without, seed=2, round=0, num_clients=4)
    np.testing.assert_array_equal(record.selection.clients, expected.selection.clients)
    assert expected.unavailable > 0
    _, metrics = strategy.aggregate_train(1, [_reply(m, client_of(m)) for m in messages])
    assert metrics is not None
    assert metrics["unavailable"] == expected.unavailable
    assert strategy.rounds[-1].failures["unavailable"] == expected.unavailable


def test_a_skipped_disconnected_client_is_a_failure_without_a_message() -> None:
    # Full participation selects everyone; the disconnected client is skipped, not messaged.
    strategy = _setup(fedsample.make_sampler("full"), num_sampled=4, policy="renormalise")
    gone = sorted(NODES)[1]
    messages = FakeGrid([node for node in NODES if node != gone]).configure(strategy, _theta())
    assert [client_of(m) for m in messages] == [0, 2, 3]
    _, metrics = strategy.aggregate_train(1, [_reply(m, client_of(m)) for m in messages])
    assert metrics is not None
    assert (metrics["selected"], metrics["asked"], metrics["returned"]) == (4, 3, 3)
    assert (metrics["unavailable"], metrics["dropped"], metrics["failures"]) == (1, 0, 1)
    record = strategy.rounds[-1]
    np.testing.assert_array_equal(record.available, [True, False, True, True])
    np.testing.assert_array_equal(record.returned, [True, False, True, True])
    assert record.applied[1] == 0
    assert record.applied.sum() == pytest.approx(record.weights.sum())  # renormalised over the three


def test_an_availability_models_unavailable_clients_are_not_messaged() -> None:
    model = BernoulliAvailability(0.5, seed=1)
    strategy, messages = _strategy(
        fedsample.make_sampler("uniform"),
        num_sampled=4,
        seed=3,
        availability=model,
        policy="inverse-probability",
        return_probabilities=0.8,
    )
    # The model's fates are those simulate sees for a run of the same seed (Participation.for_run).
    available = Participation(availability=model).for_run(3).availability.available(0, np.arange(4))
    assert 0 < available.sum() < 4
    assert [client_of(m) for m in messages] == np.flatnonzero(available).tolist()
    _, metrics = strategy.aggregate_train(1, [_reply(m, client_of(m)) for m in messages])
    assert metrics is not None
    assert metrics["unavailable"] == int((~available).sum())
    record = strategy.rounds[-1]
    # Skipped unavailable clients fail with return probability a_i = 0.5: w_i / (0.8 * 0.5).
    np.testing.assert_allclose(record.applied, np.where(available, record.weights / 0.4, 0.0))


def test_known_return_probabilities_need_an_availability_model_with_probabilities() -> None:
    trace = TraceAvailability(np.arange(3), np.zeros(3, int), np.full(3, 5))
    with pytest.raises(FedsampleError, match="'return_probabilities'"):
        FedsampleStrategy(
            fedsample.MDSampler(),
            num_sampled=2,
            sizes=[1, 2, 3],
            availability=trace,
            policy="inverse-probability",
            return_probabilities=0.9,
        )


@dataclass(frozen=True, kw_only=True)
class FeedbackKeepingUniform(fedsample.UniformSampler):
    """Uniform sampling whose update keeps the feedback it was given."""

    def update(self, state: Any, feedback: Feedback) -> Any:
        return (state, feedback)


def _over_selected_round(policy: str, **kwargs: Any) -> tuple[FedsampleStrategy, Any, Any]:
    """m = 2 with o = 1: all four clients are asked; replies created at 3, 1, 2, 1 (clients 0..3)."""
    strategy, messages = _strategy(FeedbackKeepingUniform(), num_sampled=2, over_selection=1.0, policy=policy, **kwargs)
    assert [client_of(m) for m in messages] == [0, 1, 2, 3]
    replies = [_reply(m, client_of(m)) for m in messages]
    for reply, created in zip(replies, [3.0, 1.0, 2.0, 1.0], strict=True):
        reply.metadata.created_at = created
    arrays, metrics = strategy.aggregate_train(1, replies[::-1])  # the order of arrival does not matter
    return strategy, arrays, metrics


def test_over_selection_keeps_the_first_replies_by_created_at_and_marks_the_rest_late() -> None:
    strategy, arrays, metrics = _over_selected_round("ignore")
    record = strategy.rounds[-1]
    # Clients 1 and 3 replied first (both at 1.0), though they arrived last; 2 and 0 are late.
    np.testing.assert_array_equal(record.kept, [False, True, False, True])
    np.testing.assert_array_equal(record.returned, [True, True, True, True])
    assert (metrics["returned"], metrics["kept"], metrics["late"], metrics["failures"]) == (4, 2, 2, 0)
    np.testing.assert_allclose(record.applied, np.where(record.kept, record.weights, 0.0))
    _, feedback = strategy.sampler_state
    assert feedback.clients.tolist() == [1, 3]  # late clients give the sampler no feedback
    expected = _expected({1: float(record.weights[1]), 3: float(record.weights[3])})  # the kept clients only
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], atol=1e-6)


def test_over_selection_ties_are_broken_by_node_id() -> None:
    strategy, messages = _strategy(fedsample.make_sampler("uniform"), num_sampled=1, over_selection=1.0, seed=0)
    assert len(messages) == 2
    replies = [_reply(m, client_of(m)) for m in messages]
    for reply in replies:
        reply.metadata.created_at = 5.0
    arrays, _ = strategy.aggregate_train(1, replies)
    record = strategy.rounds[-1]
    first = int(np.argmin(record.nodes))
    assert record.kept.tolist() == [j == first for j in range(2)]
    assert arrays is not None
    expected = _expected({int(record.clients[first]): float(record.weights[first])})
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], atol=1e-6)


def test_inverse_probability_with_over_selection_divides_by_the_keep_probability() -> None:
    strategy, messages = _strategy(
        fedsample.make_sampler("uniform"),
        num_sampled=2,
        over_selection=1.0,
        policy="inverse-probability",
        return_probabilities=0.8,
    )
    assert len(messages) == 4
    error = Message(Error(code=0, reason="client raised"), reply_to=messages[0])
    replies = [_reply(m, client_of(m)) for m in messages[1:]]
    for reply, created in zip(replies, [2.0, 3.0, 1.0], strict=True):
        reply.metadata.created_at = created
    arrays, metrics = strategy.aggregate_train(1, [error, *replies])
    record = strategy.rounds[-1]
    np.testing.assert_array_equal(record.kept, [False, True, False, True])
    assert (metrics["returned"], metrics["late"], metrics["dropped"]) == (3, 1, 1)  # type: ignore[index]
    # R = 3 returned, m = 2 kept: w_i / (r_i * min(1, m / R)) = w_i / (0.8 * 2 / 3).
    np.testing.assert_allclose(record.applied, np.where(record.kept, record.weights / (0.8 * 2 / 3), 0.0))
    assert arrays is not None
    expected = _expected({int(record.clients[j]): float(record.applied[j]) for j in (1, 3)})
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], atol=1e-6)


@pytest.mark.parametrize("name", ["md", "uniform", "poisson", "fixed-rate", "osmd", "clustered-size"])
def test_everyone_available_without_over_selection_leaves_the_selections_unchanged(name: str) -> None:
    # An availability model under which everyone is always available, and o = 0: the draws are the
    # sampler's own, round after round, so a strategy without these options is unchanged too.
    sampler = fedsample.make_sampler(name)
    strategy = _setup(sampler, num_sampled=2, seed=9, availability=BernoulliAvailability(1.0), over_selection=0.0)
    state = sampler.init(fedsample.Federation.from_sizes(SIZES), 2)
    for server_round in (1, 2, 3):
        messages = FakeGrid(NODES).configure(strategy, _theta(), server_round)
        expected = sampler.sample(state, stream_rng(9, Stream.SAMPLING, server_round - 1))
        record = strategy._pending[0]  # type: ignore[index]
        np.testing.assert_array_equal(record.selection.clients, expected.clients)
        np.testing.assert_array_equal(record.selection.weights, expected.weights)
        assert [client_of(m) for m in messages] == np.unique(expected.clients).tolist()
        assert record.failures["unavailable"] == 0
        strategy.aggregate_train(server_round, [_reply(m, client_of(m)) for m in messages])
        state = strategy.sampler_state


def test_importing_fedsample_does_not_import_flower() -> None:
    code = "import sys, fedsample, fedsample.integrations; assert 'flwr' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})


def test_query_reply_and_train_reply_carry_the_metrics() -> None:
    message = Message(RecordDict({"config": ConfigRecord()}), dst_node_id=5, message_type=MessageType.QUERY)
    answer = query_reply(message, num_examples=12, client_id=3)
    assert dict(answer.content["metrics"]) == {"num-examples": 12, "client-id": 3}
    reply = train_reply(
        message,
        ArrayRecord({"w": Array(np.zeros(2, dtype=np.float32))}),
        num_examples=4,
        train_loss=0.5,
        local_steps=3,
    )
    assert dict(reply.content["metrics"]) == {"num-examples": 4, "train-loss": 0.5, "local-steps": 3}
    assert isinstance(reply.content["metrics"], MetricRecord)


# --- a real Flower simulation ------------------------------------------------------------------------

NUM_NODES, ROUNDS, STEPS, BATCH, LR, SEED = 8, 3, 5, 16, 0.1, 3
# FedSampling's phase: no client holds M = 400 or more samples (none is clipped), alpha = 1/2.
PRIVATE_ROUNDS, PRIVATE_THRESHOLD, PRIVATE_ALPHA = 10, 400, 0.5
NODE_SECRET = 2026  # the nodes' own seed, which the server never sees


def _federation() -> Any:
    from fedsample.data.builders import FederationSpec, build_federation

    # Eight digits clients of unequal sizes (81 to 386 samples): MD sampling is far from uniform.
    spec = FederationSpec(dataset="digits", partition="lognormal", num_clients=NUM_NODES, lognormal_sigma=1.0, seed=0)
    return build_federation(spec)


def _client_app(data: Any, model: Any) -> Any:
    from flwr.clientapp import ClientApp

    from fedsample.integrations.flower import train_locally

    offsets = np.asarray(data.train_indptr)
    app = ClientApp()

    def rows(context: Context) -> tuple[int, slice]:
        client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        return client, slice(int(offsets[client]), int(offsets[client + 1]))

    def node_rng(client: int, message: Message, purpose: int) -> np.random.Generator:
        """The node's own generator: a real ClientApp seeds it from the OS (np.random.default_rng());
        a secret of the test's makes the run reproducible."""
        t = int(message.content["config"].get("round-index", 0))  # type: ignore[call-overload]
        return np.random.default_rng([NODE_SECRET, client, t, purpose])

    @app.query()
    def query(message: Message, context: Context) -> Message:
        client, part = rows(context)
        rng = node_rng(client, message, 0)
        return query_reply(message, num_examples=part.stop - part.start, client_id=client, rng=rng)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        client, part = rows(context)
        config = message.content["config"]
        # Failures injected by the test's train config: raise, or answer with NaN.
        if client in list(config.get("raise-clients", [-1])):  # type: ignore[call-overload]
            raise RuntimeError(f"client {client} fails on purpose")
        reply = train_locally(
            message,
            model=model,
            features=data.train_features[part],
            targets=data.train_targets[part],
            local_steps=STEPS,
            batch_size=BATCH,
            local_lr=LR,
            rng=node_rng(client, message, 1),
        )
        if client in list(config.get("nan-clients", [-1])):  # type: ignore[call-overload]
            arrays = {n: np.full_like(a.numpy(), np.nan) for n, a in reply.content["arrays"].items()}
            return train_reply(message, arrays, num_examples=part.stop - part.start)
        return reply

    return app


class RecordingGrid:
    """A Grid that keeps every message the server receives (the strategy receives through send_and_receive)."""

    def __init__(self, grid: Any) -> None:
        self.grid = grid
        self.received: list[Message] = []

    def get_node_ids(self) -> Any:
        return self.grid.get_node_ids()

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Message]:
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        self.received.extend(replies)
        return replies


@pytest.fixture(scope="module")
def simulation() -> dict[str, Any]:
    """One Flower simulation with four strategies run one after another on the same eight nodes."""
    pytest.importorskip("ray", reason="Flower's simulation needs the flwr[simulation] extra")
    import ray.cloudpickle
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fedsample.engine import ModelSpec, initial_params

    # The client app is defined here: Ray's workers receive it by value, not by importing this file.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    data = _federation()
    model = ModelSpec("mlp", (64,), 10, hidden=16)
    start = {n: v.numpy() for n, v in initial_params(model, 0).items()}
    sizes = np.diff(np.asarray(data.train_indptr))
    md_first = fedsample.MDSampler().sample(
        fedsample.MDSampler().init(fedsample.Federation.from_sizes(sizes), 4), stream_rng(SEED + 1, Stream.SAMPLING, 0)
    )
    failing = np.unique(md_first.clients)
    assert failing.size >= 2
    out: dict[str, Any] = {"data": data, "model": model, "start": start, "failing": failing[:2].tolist()}
    phases: list[tuple[str, FedsampleStrategy, ConfigRecord, int]] = [
        (
            "md",
            FedsampleStrategy(fedsample.MDSampler(), num_sampled=4, seed=SEED, num_nodes=NUM_NODES),
            ConfigRecord(),
            ROUNDS,
        ),
        (
            "osmd",
            FedsampleStrategy(fedsample.OSMDSampler(eta=0.05), num_sampled=3, seed=SEED, num_nodes=NUM_NODES),
            ConfigRecord(),
            ROUNDS,
        ),
        (
            "renormalise",
            FedsampleStrategy(
                fedsample.MDSampler(), num_sampled=4, seed=SEED + 1, num_nodes=NUM_NODES, policy="renormalise"
            ),
            ConfigRecord({"raise-clients": [int(failing[0])], "nan-clients": [int(failing[1])]}),
            2,
        ),
        (
            "fedsampling",
            FedsampleStrategy(
                fedsample.FedSamplingSampler(
                    target_samples=300, size_threshold=PRIVATE_THRESHOLD, probability=PRIVATE_ALPHA
                ),
                num_sampled=1,
                seed=SEED,
                num_nodes=NUM_NODES,
            ),
            ConfigRecord(),
            PRIVATE_ROUNDS,
        ),
    ]
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        for name, strategy, config, rounds in phases:
            recording = RecordingGrid(grid)
            result = strategy.start(recording, to_array_record(start), num_rounds=rounds, train_config=config)  # type: ignore[arg-type]
            out[name] = (strategy, result)
            out[f"{name}-received"] = recording.received

    # One Ray actor with both cores: on a small machine, two would each spend seconds importing torch.
    backend = {"client_resources": {"num_cpus": 2}, "init_args": {"num_cpus": 2, "include_dashboard": False}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLWR_TELEMETRY_ENABLED", "0")
        run_simulation(server, _client_app(data, model), num_supernodes=NUM_NODES, backend_config=backend)
    return out


def _engine(simulation: dict[str, Any], sampler: Any, num_sampled: int) -> Any:
    import torch

    from fedsample.engine import RunSpec, TrainingConfig, simulate

    config = TrainingConfig(
        rounds=ROUNDS, num_sampled=num_sampled, local_steps=STEPS, batch_size=BATCH, local_lr=LR, eval_every=ROUNDS
    )
    model = simulation["model"]
    params = {n: torch.as_tensor(v) for n, v in simulation["start"].items()}
    return simulate(simulation["data"], model, [RunSpec(sampler, seed=SEED)], config, params=params)[0]


def test_flower_md_selections_and_model_match_the_engine(simulation: dict[str, Any]) -> None:
    assert "md" in simulation, "the ServerApp did not finish the MD strategy"
    strategy, result = simulation["md"]
    sampler = fedsample.MDSampler()
    sizes = np.diff(np.asarray(simulation["data"].train_indptr))
    assert strategy.sizes.tolist() == sizes.tolist()  # learned by the size query
    state = sampler.init(fedsample.Federation.from_sizes(sizes), 4)
    assert len(strategy.rounds) == ROUNDS
    for t, record in enumerate(strategy.rounds):
        expected = sampler.sample(state, stream_rng(SEED, Stream.SAMPLING, t))
        np.testing.assert_array_equal(record.selection.clients, expected.clients)
        assert record.returned.all()
    engine = _engine(simulation, sampler, 4)
    for name, value in engine.params.items():
        np.testing.assert_allclose(result.arrays[name].numpy(), value, rtol=0, atol=1e-5)


def test_flower_osmd_learns_like_the_engine(simulation: dict[str, Any]) -> None:
    assert "osmd" in simulation, "the ServerApp did not finish the OSMD strategy"
    strategy, result = simulation["osmd"]
    sampler = fedsample.OSMDSampler(eta=0.05)
    engine = _engine(simulation, sampler, 3)
    # The learned distributions agree, so every selection along the way did too.
    np.testing.assert_allclose(strategy.sampler_state.probabilities, engine.sampler_state.probabilities, atol=1e-6)
    assert not np.allclose(engine.sampler_state.probabilities, 1 / NUM_NODES)
    for name, value in engine.params.items():
        np.testing.assert_allclose(result.arrays[name].numpy(), value, rtol=0, atol=1e-5)


def test_flower_failed_clients_are_rejected_and_the_round_completes(simulation: dict[str, Any]) -> None:
    assert "renormalise" in simulation, "the ServerApp did not finish the failing strategy"
    strategy, result = simulation["renormalise"]
    raised, nan = simulation["failing"]
    first = strategy.rounds[0]
    assert first.failures["dropped"] >= 1  # the client that raised
    assert first.failures["rejected"] >= 1  # the NaN update
    returned = dict(zip(first.clients.tolist(), first.returned.tolist(), strict=True))
    assert returned[raised] is False
    assert returned[nan] is False
    assert first.returned.any()
    # Renormalised: the weights of the clients that returned keep the round's sum.
    assert first.applied.sum() == pytest.approx(first.weights.sum())
    metrics = result.train_metrics_clientapp[1]
    assert metrics["failures"] == first.failures["dropped"] + first.failures["rejected"]
    assert len(result.train_metrics_clientapp) == 2  # both rounds completed
    for array in result.arrays.values():
        assert np.all(np.isfinite(array.numpy()))


def test_flower_fedsampling_server_receives_no_size_and_answers_follow_the_mechanism(
    simulation: dict[str, Any],
) -> None:
    """Every message the server received in the FedSampling phase, read for sizes and for the answers' law."""
    from fedsample.integrations import flower_fedsampling as private
    from fedsample.samplers import estimate_total

    assert "fedsampling" in simulation, "the ServerApp did not finish the FedSampling strategy"
    strategy, result = simulation["fedsampling"]
    received: list[Message] = simulation["fedsampling-received"]
    sizes = np.diff(np.asarray(simulation["data"].train_indptr))
    assert sizes.max() < PRIVATE_THRESHOLD  # no size clipped: a truthful answer is the size itself
    names = set(simulation["start"])
    allowed = {
        "client-id",
        private.ANSWER,
        "train-loss",
        "train-loss-squares",
        "gradient-norm",
        "local-lr",
        "local-steps",
    }
    answers: dict[str, list[tuple[int, int]]] = {}
    for reply in received:
        assert not reply.has_error()
        assert not reply.content.config_records
        for record in reply.content.metric_records.values():
            assert set(record) <= allowed, f"the server received {sorted(record)}"
        for record in reply.content.array_records.values():
            assert set(record) == names
        metrics = reply.content.metric_records.get("metrics", MetricRecord())
        if private.ANSWER in metrics:
            client = strategy.clients[int(reply.metadata.src_node_id)]
            answers.setdefault(reply.metadata.group_id, []).append((client, int(metrics[private.ANSWER])))  # type: ignore[arg-type]
    assert strategy.sizes is None
    assert sorted(answers) == sorted(str(r) for r in range(1, PRIVATE_ROUNDS + 1))
    # The server's estimate of each round is the estimator of the answers it received.
    for record in strategy.rounds:
        got = np.array([answer for _, answer in answers[str(record.round + 1)]])
        assert got.size == NUM_NODES
        assert record.selection.instructions["estimated_total"][0] == pytest.approx(
            estimate_total(got, PRIVATE_ALPHA, PRIVATE_THRESHOLD)
        )
        assert record.returned.all()
    # The answers' law (004, eq. 1): y = n with probability alpha, else uniform on 1..M-1. Two
    # statistics of the 80 answers, each within 4 standard errors. By chance the count fails with
    # probability 7.0e-5 (exact binomial tail), the sum with about 6.3e-5 (normal approximation of
    # a sum of 80 bounded terms): both together below 2e-4.
    pairs = np.array([pair for per_round in answers.values() for pair in per_round])
    n, y = sizes[pairs[:, 0]].astype(np.float64), pairs[:, 1].astype(np.float64)
    m, alpha = PRIVATE_THRESHOLD, PRIVATE_ALPHA
    assert np.all((y >= 1) & (y <= m - 1))
    # (1) how many answers are the size: Binomial(80, alpha + (1 - alpha) / (M - 1));
    hit = alpha + (1 - alpha) / (m - 1)
    count = float(np.sum(y == n))
    assert abs(count - y.size * hit) <= 4 * math.sqrt(y.size * hit * (1 - hit)), count
    # (2) their sum: E[y] = alpha n + (1 - alpha) M / 2 and
    # Var[y] = (1 - alpha) M (M - 2) / 12 + alpha (1 - alpha) (n - M / 2)^2.
    mean = alpha * n + (1 - alpha) * m / 2
    variance = (1 - alpha) * m * (m - 2) / 12 + alpha * (1 - alpha) * (n - m / 2) ** 2
    assert abs(float(np.sum(y - mean))) <= 4 * math.sqrt(float(np.sum(variance)))
    # Training happened on the clients' kept samples, and the model moved.
    moved = [not np.allclose(result.arrays[name].numpy(), simulation["start"][name]) for name in names]
    assert any(moved)
    assert all(np.all(np.isfinite(result.arrays[name].numpy())) for name in names)


# --- a deployment: SuperLink and SuperNodes as separate processes on loopback ---------------------

APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "flower-app"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_flower_deployment_round_completes_when_a_supernode_is_killed(tmp_path: Path) -> None:
    """The example app on a SuperLink and three SuperNodes; SuperNode 0 is SIGKILLed mid-round.

    The strategy's timeout lets the round finish without it: the missing reply is a failure, the
    two others are aggregated, and the next round runs on the survivors. The killed node stays
    listed until its heartbeat expires (up to 60 s after its last heartbeat in Flower 1.41); then
    the SuperLink answers its pending message with an error of its own, which is matched to the
    node's message and counted as the node dropping out, not ignored.
    """
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "flower-superlink").exists():
        pytest.skip("the flower-superlink executable is not installed next to the interpreter")
    port = _free_port()
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        # The app's dependencies are this environment's: no `uv sync` of the app into a fresh one.
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    processes: list[subprocess.Popen[bytes]] = []

    def launch(args: list[str], log: str) -> subprocess.Popen[bytes]:
        with (tmp_path / log).open("wb") as handle:
            process = subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        processes.append(process)
        return process

    def wait_for(log: str, text: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while text not in (tmp_path / log).read_text(errors="replace"):
            assert time.monotonic() < deadline, f"{text!r} not in {log} after {seconds} s"
            time.sleep(0.1)

    results = tmp_path / "results.json"
    try:
        launch(
            [
                str(bin_dir / "flower-superlink"),
                "--insecure",
                "--disable-runtime-dependency-installation",
                "--port",
                str(port),
                "--database",
                str(tmp_path / "state.db"),
            ],
            "superlink.log",
        )
        nodes = []
        for i in range(3):  # one after another: concurrent registrations can race in the SuperLink
            node_config = f"partition-id={i} num-partitions=3"
            command = [str(bin_dir / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}"]
            command += ["--port", str(_free_port()), "--node-config", node_config]
            nodes.append(launch(command, f"supernode{i}.log"))
            wait_for(f"supernode{i}.log", "SuperNode ID", 60)
        run_config = (
            "num-clients=3 sampler='full' num-sampled=3 num-server-rounds=2 timeout=60.0 train-delay=2.0 "
            f"policy='renormalise' results-path='{results}'"
        )
        subprocess.run(
            [str(bin_dir / "flwr"), "run", str(APP_DIR), "loopback", "--run-config", run_config],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        # Mid-round: SuperNode 0 has received its training message and is running the ClientApp.
        wait_for("supernode0.log", "Receiving: train message", 120)
        os.killpg(nodes[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 240
        while not results.exists():
            assert time.monotonic() < deadline, "the ServerApp did not finish after the SuperNode was killed"
            time.sleep(0.5)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    summary = json.loads(results.read_text())
    first, second = summary["rounds"]
    assert first["clients"] == [0, 1, 2]
    assert first["returned"] == [False, True, True]  # client 0 (partition 0) died mid-round
    assert sum(first["failures"].values()) == 1
    assert summary["train_metrics"]["1"]["failures"] == 1
    assert summary["train_metrics"]["1"]["weight-sum"] == pytest.approx(1.0)  # renormalised over the survivors
    assert second["returned"] == [False, True, True]
    # Round 2 either no longer lists the node (unavailable) or gets the SuperLink's error for it.
    assert second["failures"]["dropped"] + second["failures"]["unavailable"] == 1
    assert summary["evaluate_metrics"]["2"]["test-accuracy"] > summary["evaluate_metrics"]["0"]["test-accuracy"]


def test_the_constructor_parameters_are_declared_once() -> None:
    """Every declared parameter is a keyword of the constructor whose default satisfies its constraint,
    and every other keyword is one that is checked against the federation by its own reader."""
    import inspect

    signature = inspect.signature(FedsampleStrategy.__init__).parameters
    declared = FedsampleStrategy._parameter_constraints
    table = FedsampleStrategy.parameters()
    assert list(table.parameters) == list(declared)
    for name, constraint in declared.items():
        assert signature[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert table.parameters[name].default == signature[name].default
        if signature[name].default is not inspect.Parameter.empty:
            assert constraint.is_satisfied_by(signature[name].default), name
    others = set(signature) - set(declared) - {"self"}
    assert others == {"sampler", "clients", "sizes", "return_probabilities", "availability", "privacy"}
    assert FedsampleStrategy._parameter_constraints["policy"].values == AGGREGATION_POLICIES  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("num_sampled", 0),
        ("seed", -1),
        ("num_nodes", 0),
        ("importance", "size-squared"),
        ("redraws", 1001),
        ("over_selection", 11.0),
        ("policy", "unbiased"),  # the strategy's name for "ignore" before issue 13
    ],
)
def test_each_declared_constraint_is_enforced(name: str, value: object) -> None:
    kwargs: dict[str, Any] = {"num_sampled": 2, "sizes": [1, 2, 3], name: value}
    with pytest.raises(FedsampleError, match=rf"'{name}' parameter of FedsampleStrategy must be .*Got {value!r}"):
        FedsampleStrategy(fedsample.MDSampler(), **kwargs)
