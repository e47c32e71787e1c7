"""The Flower strategy feeds the sampler the clients' measured durations as round times (Oort's T_i)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, client_of  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402

import fedsample  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_reply  # noqa: E402
from fedsample.integrations.flower_client import FIT_SECONDS  # noqa: E402
from fedsample.samplers import Feedback  # noqa: E402

NODES = [901, 17, 4400, 250]
SIZES = [30, 10, 60, 100]
THETA = {"w": np.array([1.0, -2.0], dtype=np.float32)}


pytestmark = pytest.mark.usefixtures("task_identity")  # node 0's task identity (conftest.py)


def _oort_round() -> tuple[FedsampleStrategy, Any, list[Message]]:
    strategy = FedsampleStrategy(fedsample.make_sampler("oort"), sizes=SIZES, num_sampled=3, seed=4)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    return strategy, strategy.sampler_state, messages


def _trained(client: int) -> dict[str, np.ndarray]:
    return {n: v + np.float32(0.1 * (client + 1)) for n, v in THETA.items()}


def _raw_reply(message: Message, client: int, seconds: object) -> Message:
    """A reply whose fit-seconds metric is written as is (a hostile client's, not train_reply's)."""
    metrics = MetricRecord({"num-examples": SIZES[client], "train-loss": 1.0})
    if seconds is not None:
        metrics[FIT_SECONDS] = seconds  # type: ignore[assignment]
    return Message(RecordDict({"arrays": to_array_record(_trained(client)), "metrics": metrics}), reply_to=message)


def test_the_replies_fit_seconds_are_the_samplers_round_times() -> None:
    """Oort's durations after the round are the seconds the kept clients reported (its system penalty reads them)."""
    strategy, state, messages = _oort_round()
    seconds = {c: 2.0 + 3.0 * c for c in range(len(SIZES))}
    replies = [
        train_reply(m, _trained(client_of(m)), num_examples=SIZES[client_of(m)], fit_seconds=seconds[client_of(m)])
        for m in messages
    ]
    strategy.aggregate_train(1, replies)
    record = strategy.rounds[-1]
    kept = record.clients[record.kept]
    durations = strategy.sampler_state.durations
    np.testing.assert_array_equal(durations[kept], [seconds[int(c)] for c in kept])
    assert np.all(np.isinf(np.delete(durations, kept)))  # the others are still unknown
    timed = Feedback(
        round=0,
        selection=record.selection,
        clients=kept,
        update_norms=np.zeros(kept.size),
        round_times=np.array([seconds[int(c)] for c in kept]),
    )
    assert fedsample.dumps(strategy.sampler_state) != fedsample.dumps(
        strategy.sampler.update(state, Feedback(round=0, selection=record.selection, clients=kept))
    )
    assert np.array_equal(strategy.sampler.update(state, timed).durations, durations)


@pytest.mark.parametrize("hostile", [-1.0, math.inf, math.nan, [1.0, 2.0], None])
def test_a_missing_or_invalid_fit_seconds_leaves_that_clients_time_unknown(hostile: object) -> None:
    strategy, _, messages = _oort_round()
    honest = client_of(messages[0])
    replies = [_raw_reply(m, client_of(m), 5.0 if client_of(m) == honest else hostile) for m in messages]
    strategy.aggregate_train(1, replies)
    durations = strategy.sampler_state.durations
    assert durations[honest] == 5.0
    others = [client_of(m) for m in messages[1:]]
    assert np.all(np.isinf(durations[others]))  # Oort's "not yet measured"


def test_no_fit_seconds_at_all_gives_no_round_times() -> None:
    strategy, _, messages = _oort_round()
    strategy.aggregate_train(1, [_raw_reply(m, client_of(m), None) for m in messages])
    assert np.all(np.isinf(strategy.sampler_state.durations))


@pytest.mark.parametrize("seconds", [-0.5, math.inf, math.nan])
def test_train_reply_refuses_a_bad_fit_seconds(seconds: float) -> None:
    message = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=5, message_type="train")
    with pytest.raises(FedsampleError, match="fit_seconds"):
        train_reply(message, ArrayRecord(), num_examples=1, fit_seconds=seconds)


def test_train_locally_reports_its_measured_fit_seconds() -> None:
    pytest.importorskip("torch")
    from fedsample.engine import ModelSpec, initial_params
    from fedsample.integrations.flower import train_locally

    model = ModelSpec("mlp", (3,), 4, hidden=5)
    theta = {n: v.numpy() for n, v in initial_params(model, 0).items()}
    rng = np.random.default_rng(0)
    features, targets = rng.normal(size=(12, 3)).astype(np.float32), rng.integers(0, 4, 12)
    config = ConfigRecord({"client-id": 2, "round-index": 0, "seed": 7})
    message = Message(
        RecordDict({"arrays": to_array_record(theta), "config": config}), dst_node_id=5, message_type="train"
    )
    reply = train_locally(
        message, model=model, features=features, targets=targets, local_steps=3, batch_size=4, local_lr=0.1
    )
    seconds = reply.content["metrics"][FIT_SECONDS]
    assert isinstance(seconds, float)
    assert 0.0 < seconds < 60.0
