"""The Flower strategy with a two-phase sampler: a first message asks every connected client for its
norms, the sampler reads them before the draw, only the chosen clients get the training message, and
the round's metrics count computation apart from communication."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, client_of  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Message  # noqa: E402

import fedsample  # noqa: E402
from fedsample.engine import ModelSpec, initial_params  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_locally, train_reply  # noqa: E402
from fedsample.integrations.flower_client import REPORT_NORMS, norm_reply  # noqa: E402

NODES = [901, 17, 4400, 250, 33]
SIZES = [30, 10, 60, 100, 20]
# Client 1 reports a zero norm: with m = 2 and four positive norms, optimal sampling never draws it.
NORMS = [0.5, 0.0, 2.0, 1.0, 3.0]
THETA = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], dtype=np.float32)}


pytestmark = pytest.mark.usefixtures("task_identity")  # node 0's task identity (conftest.py)


def _answer(message: Message) -> Message:
    """A client: the norms when asked for them, else theta plus a client-specific shift."""
    client = client_of(message)
    if message.content["config"].get(REPORT_NORMS, False):  # type: ignore[call-overload]
        return norm_reply(message, update_norm=NORMS[client], gradient_norm=2 * NORMS[client], local_lr=0.1)
    trained = {n: v + np.float32(0.1 * (client + 1)) for n, v in THETA.items()}
    return train_reply(message, trained, num_examples=SIZES[client])


@pytest.mark.parametrize("mode", ["oracle", "protocol"])
def test_the_round_asks_every_client_for_norms_then_trains_the_chosen_ones(mode: str) -> None:
    sampler = fedsample.make_sampler("optimal", mode=mode)
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=3)
    grid = FakeGrid(NODES, _answer)
    for server_round in (1, 2, 3):
        grid.sent.clear()
        messages = grid.configure(strategy, to_array_record(THETA), server_round)
        asked = [m for m in grid.sent if m.content["config"].get(REPORT_NORMS, False)]  # type: ignore[call-overload]
        assert sorted(client_of(m) for m in asked) == list(range(len(NODES)))
        assert all(not m.content.array_records for m in grid.received[-len(NODES) :])  # norms only, no arrays
        state = strategy.sampler_state
        np.testing.assert_array_equal(state.norms, NORMS)
        chosen = [client_of(m) for m in messages]
        assert 1 not in chosen  # a zero norm: q = 0
        assert not any(m.content["config"].get(REPORT_NORMS, False) for m in messages)  # type: ignore[call-overload]
        _, metrics = strategy.aggregate_train(server_round, [_answer(m) for m in messages])
        assert metrics is not None
        assert metrics["computed"] == len(NODES)
        assert metrics["communicated"] == len(chosen)
        assert strategy.sampler_state is state  # nothing read after the round
    # The weights of the chosen clients are p_i / q_i for the q the reported norms give.
    q = sampler.inclusion(strategy.sampler_state)
    p = np.asarray(SIZES) / sum(SIZES)
    for message in messages:
        client = client_of(message)
        assert float(message.content["config"]["weight"]) == pytest.approx(p[client] / q[client])  # type: ignore[arg-type, call-overload]


def test_a_client_that_does_not_report_is_no_candidate_in_protocol_mode() -> None:
    sampler = fedsample.make_sampler("optimal", mode="protocol")
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=5)

    def silent_zero(message: Message) -> Message | None:
        return (
            None if client_of(message) == 0 and message.content["config"].get(REPORT_NORMS, False) else _answer(message)
        )  # type: ignore[call-overload]

    grid = FakeGrid(NODES, silent_zero)
    messages = grid.configure(strategy, to_array_record(THETA), 1)
    assert strategy.sampler_state.candidates.tolist() == [1, 2, 3, 4]
    assert 0 not in [client_of(m) for m in messages]
    _, metrics = strategy.aggregate_train(1, [_answer(m) for m in messages])
    assert metrics is not None
    assert metrics["computed"] == len(NODES) - 1


def test_train_locally_answers_the_norm_question_with_the_norm_of_the_update_it_would_send() -> None:
    model = ModelSpec("mlp", (3,), 4, hidden=5)
    theta = {n: v.numpy() for n, v in initial_params(model, 0).items()}
    rng = np.random.default_rng(0)
    features, targets = rng.normal(size=(12, 3)).astype(np.float32), rng.integers(0, 4, 12)
    config = {"client-id": 2, "round-index": 4, "seed": 7}
    common = {"model": model, "features": features, "targets": targets, "local_steps": 3, "batch_size": 4}

    def message(extra: dict[str, Any]) -> Message:
        from flwr.app import RecordDict

        content = RecordDict({"arrays": to_array_record(theta), "config": ConfigRecord({**config, **extra})})
        return Message(content=content, dst_node_id=5, message_type="train")

    sent = train_locally(message({}), local_lr=0.1, **common)
    reported = train_locally(message({REPORT_NORMS: True}), local_lr=0.1, **common)
    assert not reported.content.array_records
    arrays = sent.content["arrays"]
    assert isinstance(arrays, ArrayRecord)
    update = np.sqrt(sum(float(np.sum((arrays[n].numpy() - theta[n]) ** 2)) for n in theta))
    metrics = reported.content["metrics"]
    assert metrics["update-norm"] == pytest.approx(update, rel=1e-5)
    assert metrics["gradient-norm"] == pytest.approx(sent.content["metrics"]["gradient-norm"])


def test_the_candidate_set_is_drawn_among_the_available_clients_and_weighted_by_its_inclusion() -> None:
    # Client 3 is never available: it is asked nothing. K = 2 of the 4 others are candidates, each with
    # the weight p_i N_a / K = 2 p_i that makes the two stages unbiased, and only those two are asked.
    availability = fedsample.participation.BernoulliAvailability(probability=np.array([1.0, 1.0, 1.0, 0.0, 1.0]))
    sampler = fedsample.make_sampler("optimal", mode="protocol", candidates=2)
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=3, availability=availability)
    grid = FakeGrid(NODES, _answer)
    p = np.asarray(SIZES) / sum(SIZES)
    seen = set()
    for server_round in (1, 2, 3, 4):
        grid.sent.clear()
        messages = grid.configure(strategy, to_array_record(THETA), server_round)
        asked = sorted(client_of(m) for m in grid.sent if m.content["config"].get(REPORT_NORMS, False))  # type: ignore[call-overload]
        assert len(asked) == 2
        assert 3 not in asked
        seen.update(asked)
        state = strategy.sampler_state
        assert state.candidates.tolist() == asked
        np.testing.assert_allclose(state.candidate_weights, p[asked] * 4 / 2, rtol=1e-12)
        assert {client_of(m) for m in messages} <= set(asked)
        _, metrics = strategy.aggregate_train(server_round, [_answer(m) for m in messages])
        assert metrics is not None
        assert metrics["computed"] == 2
    assert len(seen) > 2  # the draw changes with the round


def test_power_of_choice_reporting_losses_is_refused_in_one_line() -> None:
    strategy = FedsampleStrategy(
        fedsample.make_sampler("power-of-choice", variant="pow-d"), sizes=SIZES, num_sampled=2, seed=3
    )
    with pytest.raises(fedsample.FedsampleError, match="report norms \\(not losses\\)"):
        FakeGrid(NODES, _answer).configure(strategy, to_array_record(THETA), 1)


@pytest.mark.parametrize(
    ("sampler", "setting"),
    [
        (fedsample.make_sampler("divfl"), "initial_report=False"),
        (fedsample.make_sampler("divfl", representative="update"), "initial_report=False"),
        (fedsample.make_sampler("high-loss"), "initial_evaluation=False"),
        (fedsample.make_sampler("divfl", initial_report=False), "representative='update'"),
    ],
)
def test_a_sampler_whose_reports_the_clients_cannot_send_is_refused_when_built(sampler: Any, setting: str) -> None:
    """DivFL's and high-loss's initial phase (every client's vector or loss before the first selection)
    and DivFL's full-batch gradients: the Flower clients send norms and updates only, so the strategy
    refuses them in one line naming the setting, instead of running without them (issue 25)."""
    with pytest.raises(fedsample.FedsampleError, match=setting.replace("(", r"\(")) as info:
        FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=3)
    assert info.value.parameter == "sampler"
    assert "\n" not in str(info.value)
    usable = fedsample.make_sampler("divfl", initial_report=False, representative="update")
    FedsampleStrategy(usable, sizes=SIZES, num_sampled=2, seed=3)
    FedsampleStrategy(fedsample.make_sampler("high-loss", initial_evaluation=False), sizes=SIZES, num_sampled=2)
