"""The samplers of issue 28 behind the Flower strategy: a round on hand-built messages reaches the sampler
(``delta`` reads the replies' update vectors, ``afl`` their training losses, ``fedcbs`` counts the
selections)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, as_node, client_of  # noqa: E402
from flwr.app import Message  # noqa: E402

from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_reply  # noqa: E402
from fedsample.samplers import AFLSampler, DeltaSampler, FedCBSSampler, Feedback  # noqa: E402

NODES = [901, 17, 4400, 250, 33, 7]
SIZES = [30, 10, 60, 100, 25, 45]
THETA = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], dtype=np.float32)}


@pytest.fixture(autouse=True)
def task_identity() -> Iterator[None]:
    with as_node(0):
        yield


def _trained(client: int) -> dict[str, np.ndarray]:
    """A client's 'trained model': theta shifted by a client-specific pattern (distinct directions)."""
    out = {}
    for n, v in THETA.items():
        shift = np.cos(np.arange(v.size, dtype=np.float32) * (client + 1)).reshape(v.shape)
        out[n] = (v + np.float32(0.1) * shift).astype(np.float32)
    return out


def _reply(message: Message, client: int, **extra: float) -> Message:
    return train_reply(message, _trained(client), num_examples=SIZES[client], **extra)  # type: ignore[arg-type]


def _round(sampler: Any, **metrics: float) -> tuple[FedsampleStrategy, Any, list[int]]:
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=3, seed=2)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    before = strategy.sampler_state
    strategy.aggregate_train(1, [_reply(m, client_of(m), local_lr=0.1, local_steps=2, **metrics) for m in messages])
    return strategy, before, [client_of(m) for m in messages]


def test_delta_learns_from_the_replies_update_vectors() -> None:
    """The strategy hands delta the kept clients' update vectors: its p equals the sampler's own
    update on the same feedback, and moved off 1/n."""
    sampler = DeltaSampler()
    strategy, before, _ = _round(sampler)
    record = strategy.rounds[-1]
    updates = np.stack(
        [
            np.concatenate([(_trained(c)[n].astype(np.float64) - THETA[n]).ravel() for n in THETA])
            for c in record.clients
        ]
    )
    feedback = Feedback(
        round=0, selection=record.selection, clients=record.clients, updates=updates, local_lr=0.1, local_steps=2
    )
    expected = sampler.update(before, feedback)
    np.testing.assert_allclose(strategy.sampler_state.probabilities, expected.probabilities, rtol=1e-6)
    assert np.ptp(strategy.sampler_state.probabilities) > 0


def test_afl_reads_the_replies_losses_and_its_initial_evaluation_is_refused_in_one_line() -> None:
    """Without the initial evaluation (which Flower clients cannot answer) AFL's valuations are the
    replies' training losses; with it, the strategy refuses the sampler naming the setting."""
    strategy, _, clients = _round(AFLSampler(initial_evaluation=False), train_loss=0.5)
    losses = strategy.sampler_state.losses
    kept = strategy.rounds[-1].clients
    np.testing.assert_allclose(losses[kept], 0.5)
    assert np.isinf(losses[np.setdiff1d(np.arange(len(SIZES)), clients)]).all()
    with pytest.raises(FedsampleError, match="initial_evaluation=False") as info:
        FedsampleStrategy(AFLSampler(), sizes=SIZES, num_sampled=3)
    assert info.value.parameter == "sampler"


def test_fedcbs_draws_from_the_label_counts_it_was_built_with_and_counts_the_selections() -> None:
    """Fed-CBS's histograms come with the sampler (the server's knowledge, docs/selection-systems.md);
    a round counts the selected clients for its exploration bonus."""
    counts = np.array([[30, 0], [0, 10], [30, 30], [50, 50], [0, 25], [45, 0]])
    strategy, before, clients = _round(FedCBSSampler(label_counts=counts))
    assert before.selected.sum() == 0
    expected = np.zeros(len(SIZES), dtype=np.int64)
    expected[clients] = 1
    np.testing.assert_array_equal(strategy.sampler_state.selected, expected)
