"""The Flower strategy tells the sampler which selected clients sent no reply within its timeout (``timed_out``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, client_of, recorded_feedbacks  # noqa: E402
from flwr.app import Error, Message  # noqa: E402

import fedsample  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_reply  # noqa: E402
from fedsample.samplers import Feedback, OortSampler, UniformSampler  # noqa: E402

NODES = [901, 17, 4400, 250]
SIZES = [30, 10, 60, 100]
THETA = {"w": np.array([1.0, -2.0], dtype=np.float32)}


pytestmark = pytest.mark.usefixtures("task_identity")  # node 0's task identity (conftest.py)


def _reply(message: Message, **extra: float) -> Message:
    client = client_of(message)
    trained = {n: v + np.float32(0.1 * (client + 1)) for n, v in THETA.items()}
    return train_reply(message, trained, num_examples=SIZES[client], **extra)  # type: ignore[arg-type]


def _failed_round(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[FedsampleStrategy, list[Message], Feedback]:
    """A uniform round of 4: an error reply, a NaN reply, a good reply and a node that never replies."""
    seen = recorded_feedbacks(monkeypatch, UniformSampler)
    strategy = FedsampleStrategy(fedsample.make_sampler("uniform"), sizes=SIZES, num_sampled=4, seed=1, **kwargs)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    error = Message(Error(code=0, reason="client raised"), reply_to=messages[0])
    nan = train_reply(messages[1], {n: np.full_like(v, np.nan) for n, v in THETA.items()}, num_examples=5)
    metrics = strategy.aggregate_train(1, [error, nan, _reply(messages[2])])[1]
    assert metrics is not None
    # The failure counts are as before: the error and the missing reply are both dropped.
    assert (metrics["dropped"], metrics["rejected"], metrics["failures"]) == (2, 1, 3)
    (feedback,) = seen
    return strategy, messages, feedback


def test_a_node_that_never_replies_timed_out_and_an_error_reply_did_not(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy, messages, feedback = _failed_round(monkeypatch, timeout=7.5)
    silent = client_of(messages[3])
    record = strategy.rounds[-1]
    np.testing.assert_array_equal(record.timed_out, record.clients == silent)
    assert feedback.timed_out is not None
    assert feedback.timed_out_seconds is not None
    np.testing.assert_array_equal(feedback.timed_out, [silent])
    np.testing.assert_array_equal(feedback.timed_out_seconds, [7.5])
    np.testing.assert_array_equal(feedback.clients, [client_of(messages[2])])


def test_without_a_timeout_nobody_is_reported_timed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy, _, feedback = _failed_round(monkeypatch)
    assert feedback.timed_out is None
    assert feedback.timed_out_seconds is None
    # The round still records who sent nothing.
    assert strategy.rounds[-1].timed_out.sum() == 1


def test_with_a_timeout_and_every_reply_in_time_the_lists_are_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the engine's clock with a deadline: the fields are known, and empty."""
    seen = recorded_feedbacks(monkeypatch, UniformSampler)
    strategy = FedsampleStrategy(fedsample.make_sampler("uniform"), sizes=SIZES, num_sampled=3, seed=2, timeout=5.0)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    error = Message(Error(code=0, reason="client raised"), reply_to=messages[0])
    strategy.aggregate_train(1, [error, *(_reply(m) for m in messages[1:])])
    (feedback,) = seen
    assert feedback.timed_out is not None
    assert feedback.timed_out_seconds is not None
    assert feedback.timed_out.size == 0
    assert feedback.timed_out_seconds.size == 0


def test_oort_counts_a_node_that_never_replied_as_explored_with_the_timeout_as_its_duration() -> None:
    strategy = FedsampleStrategy(OortSampler(), sizes=SIZES, num_sampled=3, seed=4, timeout=20.0)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    replies = [_reply(m, fit_seconds=2.0 + client_of(m)) for m in messages[:2]]
    strategy.aggregate_train(1, replies)
    state = strategy.sampler_state
    silent = client_of(messages[2])
    replied = [client_of(m) for m in messages[:2]]
    assert state.explored[silent]
    assert state.durations[silent] == 20.0
    # The replies carry no loss, so no utility was reported: the straggler gets the mean over none (0).
    assert state.utility[silent] == 0.0
    assert not state.explored[replied].any()
    np.testing.assert_array_equal(state.durations[replied], [2.0 + c for c in replied])
    untouched = np.setdiff1d(np.arange(len(SIZES)), [silent, *replied])
    assert not state.explored[untouched].any()


def test_start_reports_the_timeout_it_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    """``start(timeout=...)`` overrides the strategy's wait for the round's replies, and so the bound."""
    seen = recorded_feedbacks(monkeypatch, UniformSampler)
    strategy = FedsampleStrategy(fedsample.make_sampler("uniform"), sizes=SIZES, num_sampled=2, seed=3, timeout=60.0)
    silent: list[int] = []

    def answer(message: Message) -> Message | None:
        if not silent:  # the first training message is never answered
            silent.append(client_of(message))
            return None
        return _reply(message)

    strategy.start(FakeGrid(NODES, answer), to_array_record(THETA), num_rounds=1, timeout=3.0)  # type: ignore[arg-type]
    (feedback,) = seen
    np.testing.assert_array_equal(feedback.timed_out, silent)
    np.testing.assert_array_equal(feedback.timed_out_seconds, [3.0])
    # After the run, a round driven by hand is bounded by the strategy's own timeout again.
    FakeGrid(NODES).configure(strategy, to_array_record(THETA), server_round=2)
    strategy.aggregate_train(2, [])
    np.testing.assert_array_equal(seen[-1].timed_out_seconds, np.full(seen[-1].timed_out.size, 60.0))
    assert seen[-1].timed_out.size > 0
