"""FedSampling over Flower with the sizes kept on the clients: the strategy's side and the client's.

The loopback run of the protocol (a real Flower simulation) is in test_flower.py's simulation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid  # noqa: E402
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict  # noqa: E402

import fedsample  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.federation import Federation  # noqa: E402
from fedsample.integrations import flower_fedsampling as private  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, query_reply, to_array_record, train_reply  # noqa: E402
from fedsample.samplers.schemes.fedsampling_ldp import epsilon_of  # noqa: E402

NODES = [901, 17, 4400, 250]  # clients 0..3 report these node ids
SIZES = [30, 10, 60, 100]
THETA = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], dtype=np.float32)}
SAMPLER = fedsample.FedSamplingSampler(target_samples=40, size_threshold=80, probability=0.4)


pytestmark = pytest.mark.usefixtures("task_identity")  # node 0's task identity (conftest.py)


def _node_rng(client: int, message: Message) -> np.random.Generator:
    """A node's own generator: seeded here for the test; a ClientApp uses np.random.default_rng()."""
    config = message.content["config"]
    return np.random.default_rng([77, client, int(config.get("round-index", 0))])  # type: ignore[call-overload]


def _node(message: Message) -> Message:
    """What each of the four nodes answers, through the library's client helper."""
    client = NODES.index(message.metadata.dst_node_id)
    return query_reply(message, num_examples=SIZES[client], client_id=client, rng=_node_rng(client, message))


def _round(strategy: FedsampleStrategy, server_round: int = 1) -> tuple[FakeGrid, list[Message]]:
    grid = FakeGrid(NODES, _node)
    return grid, grid.configure(strategy, to_array_record(THETA), server_round)


def test_the_server_asks_for_client_ids_then_randomized_answers_and_sends_the_keep_rate() -> None:
    strategy = FedsampleStrategy(SAMPLER, num_sampled=2, num_nodes=4, seed=5)
    grid, messages = _round(strategy)
    setup, questions = grid.sent[:4], grid.sent[4:8]
    assert all(dict(m.content["config"]) == {"fedsample-query": "client-id"} for m in setup)
    question = dict(questions[0].content["config"])
    assert question == {
        "fedsample-query": "fedsampling-answer",
        "round-index": 0,
        "size-threshold": 80,
        "response-probability": 0.4,
        "epsilon": pytest.approx(epsilon_of(0.4, 80)),
    }
    assert strategy.sizes is None
    assert strategy.sampler_state.sizes.size == 0  # the server's state holds no size
    # The rate is the sampler's own, from the nodes' answers (drawn by the nodes' generators).
    answers = np.array([_node(q).content["metrics"][private.ANSWER] for q in questions])  # type: ignore[index]
    _, rate, divisor = SAMPLER.rate_from_answers(answers, strategy.sampler_state)
    assert sorted(m.metadata.dst_node_id for m in messages) == sorted(NODES)
    for m in messages:
        config = m.content["config"]
        assert config[private.RATE] == pytest.approx(rate)  # type: ignore[call-overload]
        assert config[private.DIVISOR] == pytest.approx(divisor)  # type: ignore[call-overload]
        assert "weight" not in config
        assert "batch_size" not in config
        assert m.metadata.message_type == MessageType.TRAIN


def test_the_nodes_send_no_size_in_setup_or_in_the_questions() -> None:
    strategy = FedsampleStrategy(SAMPLER, num_sampled=2, num_nodes=4)
    grid, _ = _round(strategy)
    assert len(grid.received) == 8  # four client ids, four answers
    for reply in grid.received:
        assert set(reply.content) == {"metrics"}
        assert set(reply.content["metrics"]) in ({"client-id"}, {private.ANSWER})  # type: ignore[arg-type]


def test_the_returns_are_added_with_weight_one_and_the_policy_correction() -> None:
    strategy = FedsampleStrategy(
        SAMPLER, num_sampled=2, num_nodes=4, policy="inverse-probability", return_probabilities=0.8
    )
    _, messages = _round(strategy)
    shift = {m.metadata.dst_node_id: np.float32(0.01 * (i + 1)) for i, m in enumerate(messages)}
    replies = [
        train_reply(m, {n: v + shift[m.metadata.dst_node_id] for n, v in THETA.items()}, num_examples=None)
        for m in messages[1:]
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert arrays is not None
    assert metrics is not None
    total = sum(float(shift[m.metadata.dst_node_id]) for m in messages[1:]) / 0.8
    for name, value in THETA.items():
        np.testing.assert_allclose(arrays[name].numpy(), value + total, atol=1e-6)
    assert (metrics["dropped"], metrics["returned"], metrics["unavailable"]) == (1, 3, 0)
    # The sampler's state learns the round's estimate and rate, still without a size.
    assert strategy.sampler_state.round == 1
    assert strategy.sampler_state.estimate_count == 1
    assert strategy.sampler.privacy(strategy.sampler_state).rounds == 1


def test_unanswered_and_disconnected_nodes_are_left_out_of_the_estimate() -> None:
    strategy = FedsampleStrategy(SAMPLER, num_sampled=2, num_nodes=4)
    strategy.setup(FakeGrid(NODES, _node))  # type: ignore[arg-type]
    silent = {NODES[1]}

    def answer(message: Message) -> Message | None:
        return None if message.metadata.dst_node_id in silent else _node(message)

    grid = FakeGrid([node for node in NODES if node != NODES[3]], answer)  # client 3 disconnected
    messages = grid.configure(strategy, to_array_record(THETA))
    assert sorted(m.metadata.dst_node_id for m in messages) == sorted([NODES[0], NODES[2]])
    record = strategy._pending[0]  # type: ignore[index]
    assert record.clients.tolist() == [0, 2]
    assert dict(record.failures) == {"unavailable": 1, "dropped": 1}  # client 1 was asked and did not answer
    answers = [
        _node(q).content["metrics"][private.ANSWER]
        for q in grid.sent
        if q.metadata.message_type == MessageType.QUERY and q.metadata.dst_node_id not in silent
    ]  # type: ignore[index]
    expected, rate, _ = SAMPLER.rate_from_answers(np.array(answers), strategy.sampler_state)
    assert record.selection.instructions["estimated_total"][0] == pytest.approx(expected)
    assert record.selection.instructions["data_rate"][0] == pytest.approx(rate)


@pytest.mark.parametrize(
    ("sampler", "kwargs", "parameter"),
    [
        (SAMPLER, {"sizes": SIZES}, "sizes"),
        (fedsample.FedSamplingSampler(), {"num_nodes": 4}, "target_samples"),
        (fedsample.FedSamplingSampler(target_samples=5, normalize=True), {"num_nodes": 4}, "normalize"),
        (SAMPLER, {"num_nodes": 4, "policy": "renormalise"}, "policy"),
        (SAMPLER, {"num_nodes": 4, "over_selection": 0.5}, "over_selection"),
        (SAMPLER, {"num_nodes": 4, "importance": "uniform"}, "importance"),
    ],
)
def test_settings_that_need_sizes_on_the_server_are_refused(
    sampler: Any, kwargs: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'"):
        FedsampleStrategy(sampler, num_sampled=2, **kwargs)


# --- the client's side ---------------------------------------------------------------------------


def _question(**config: Any) -> Message:
    record = private.question_config(private.server_state(SAMPLER), 3)
    for key, value in config.items():
        record[key] = value
    return Message(RecordDict({"config": record}), dst_node_id=NODES[0], message_type=MessageType.QUERY)


def test_the_answer_is_the_samplers_own_mechanism_drawn_on_the_node() -> None:
    for size in (1, 30, 79, 500):
        reply = query_reply(_question(), num_examples=size, rng=np.random.default_rng(size))
        assert dict(reply.content["metrics"]) == {private.ANSWER: reply.content["metrics"][private.ANSWER]}  # type: ignore[index]
        state = SAMPLER.init(Federation.from_sizes([size]), 1)
        assert reply.content["metrics"][private.ANSWER] == SAMPLER.answers(state, np.random.default_rng(size))[0]  # type: ignore[index]


def test_the_node_refuses_a_question_beyond_its_budget_or_without_its_own_generator() -> None:
    with pytest.raises(FedsampleError, match="'max_epsilon'"):
        query_reply(_question(), num_examples=5, rng=np.random.default_rng(0), max_epsilon=1.0)
    with pytest.raises(FedsampleError, match="'rng'"):
        query_reply(_question(), num_examples=5)
    with pytest.raises(FedsampleError, match="'message'"):  # a question that understates its budget
        query_reply(_question(epsilon=0.1), num_examples=5, rng=np.random.default_rng(0))
    reply = query_reply(_question(), num_examples=5, rng=np.random.default_rng(0), max_epsilon=10.0)
    assert private.ANSWER in reply.content["metrics"]  # type: ignore[operator]


def test_the_size_and_client_id_queries_get_only_what_they_ask() -> None:
    def asking(what: str | None) -> Message:
        config = ConfigRecord() if what is None else ConfigRecord({"fedsample-query": what})
        return Message(RecordDict({"config": config}), dst_node_id=5, message_type=MessageType.QUERY)

    assert dict(query_reply(asking("client-id"), num_examples=12, client_id=3).content["metrics"]) == {"client-id": 3}
    sized = query_reply(asking("num-examples"), num_examples=12, client_id=3).content["metrics"]
    assert dict(sized) == {"num-examples": 12, "client-id": 3}
    assert isinstance(sized, MetricRecord)


def test_the_kept_count_is_binomial_and_weighs_k_over_the_divisor() -> None:
    message = Message(
        RecordDict({"config": ConfigRecord(private.train_config(0.3, 12.5))}),
        dst_node_id=5,
        message_type=MessageType.TRAIN,
    )
    kept, weight = private.kept_count(message, num_examples=40, rng=np.random.default_rng(4))
    assert kept == np.random.default_rng(4).binomial(40, 0.3)
    assert weight == pytest.approx(kept / 12.5)
    assert private.kept_count(message, num_examples=1, rng=np.random.default_rng(1)) in {(0, 0.0), (1, 1 / 12.5)}


def test_train_locally_returns_the_weighted_model_of_the_kept_samples_and_no_size() -> None:
    pytest.importorskip("torch")
    from fedsample.engine import ModelSpec, initial_params
    from fedsample.integrations.flower import arrays_to_numpy, train_locally

    model = ModelSpec("softmax", (3,), 2)
    theta = {n: v.numpy() for n, v in initial_params(model, 0).items()}
    features = np.random.default_rng(0).normal(size=(30, 3)).astype(np.float32)
    targets = np.arange(30) % 2
    base = {"client-id": 1, "round-index": 2, "seed": 9}

    def message(**config: Any) -> Message:
        content = RecordDict({"arrays": to_array_record(theta), "config": ConfigRecord({**base, **config})})
        return Message(content, dst_node_id=5, message_type=MessageType.TRAIN)

    common = {
        "model": model,
        "features": features,
        "targets": targets,
        "local_steps": 3,
        "batch_size": 4,
        "local_lr": 0.1,
    }
    reply = train_locally(message(**private.train_config(0.5, 20.0)), rng=np.random.default_rng(6), **common)
    assert "num-examples" not in reply.content["metrics"]  # type: ignore[operator]
    kept = int(np.random.default_rng(6).binomial(30, 0.5))
    # The same kept count trained as the engine's data-level instruction, then weighted k / divisor.
    plain = train_locally(message(batch_size=float(kept)), **common)
    got, full = arrays_to_numpy(reply.content["arrays"]), arrays_to_numpy(plain.content["arrays"])  # type: ignore[arg-type]
    for name, value in theta.items():
        np.testing.assert_allclose(got[name] - value, kept / 20.0 * (full[name] - value), rtol=1e-5, atol=1e-7)
    with pytest.raises(FedsampleError, match="'rng'"):
        train_locally(message(**private.train_config(0.5, 20.0)), **common)
    nothing = train_locally(message(**private.train_config(1e-9, 20.0)), rng=np.random.default_rng(1), **common)
    for name, value in arrays_to_numpy(nothing.content["arrays"]).items():  # type: ignore[arg-type]
        np.testing.assert_array_equal(value, theta[name])
    assert math.isfinite(float(reply.content["metrics"]["train-loss"]))  # type: ignore[arg-type, index]
