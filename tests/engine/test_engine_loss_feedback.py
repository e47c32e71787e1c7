"""The engine measures each trained client's losses over the samples it saw (issue 15 item 5):
``Feedback.loss_squares`` is the mean of the squared per-sample losses over every local step's batch,
each at the model that step read; both backends agree, and the feedback matches a hand-written replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_cases import RecordingSampler, classification_data, load, regression_data, spec_for

from fedsample.engine import FedProx, RunSpec, TrainingConfig, draw_client_batches, initial_params, simulate
from fedsample.engine.trainers.kernels import per_sample_loss
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import Feedback

SEED, STEPS, BATCH, LR = 5, 3, 5, 0.1


class LossRecordingSampler(RecordingSampler):
    """The recording sampler, asking for the per-sample losses as Oort does."""

    needs_loss_squares = True


def _feedback(kind: str, backend: str, *, asks: bool = True, **config: object) -> list[Feedback]:
    data = regression_data(0) if kind == "linear" else classification_data(0)
    spec = spec_for(kind, data)
    settings = {"rounds": 3, "num_sampled": 4, "local_steps": STEPS, "batch_size": BATCH, "local_lr": LR}
    settings.update(config)
    training = TrainingConfig(backend=backend, **settings)  # type: ignore[arg-type]
    sampler = LossRecordingSampler() if asks else RecordingSampler()
    result = simulate(data, spec, [RunSpec(sampler, seed=SEED)], training, init_seed=1)[0]
    return list(result.sampler_state.feedback)


@pytest.mark.parametrize("algorithm", [None, FedProx(mu=0.3)], ids=["fedavg", "fedprox"])
@pytest.mark.parametrize("kind", ["linear", "softmax", "mlp"])
def test_loss_squares_agree_between_the_backends(kind: str, algorithm: FedProx | None) -> None:
    extra = {} if algorithm is None else {"algorithm": algorithm}
    batched = _feedback(kind, "batched", **extra)
    sequential = _feedback(kind, "sequential", **extra)
    for a, b in zip(batched, sequential, strict=True):
        assert a.loss_squares is not None
        assert b.loss_squares is not None
        assert a.loss_squares.shape == a.clients.shape
        np.testing.assert_allclose(a.loss_squares, b.loss_squares, rtol=1e-4, atol=1e-7)


def test_loss_squares_are_the_mean_squared_sample_loss_over_every_step() -> None:
    """Round 0 replayed by hand with nn.Module and plain SGD: each local step's per-sample losses at the
    model that step reads, squared and averaged over all the round's samples."""
    data = classification_data(0)
    spec = spec_for("mlp", data)
    (fb, *_) = _feedback("mlp", "batched")
    assert fb.loss_squares is not None
    offsets = np.asarray(data.train_indptr)
    for j, client in enumerate(fb.clients):
        module = load(spec, initial_params(spec, 1))
        optimizer = torch.optim.SGD(module.parameters(), lr=LR)
        size = int(offsets[client + 1] - offsets[client])
        batches = draw_client_batches(stream_rng(SEED, Stream.TRAINING, 0, int(client)), size, STEPS, BATCH)
        squares: list[float] = []
        for local in batches:
            rows = offsets[client] + local
            x = torch.as_tensor(np.array(data.train_features[rows]))
            y = torch.as_tensor(np.array(data.train_targets[rows]))
            losses = per_sample_loss(module(x), y, "classification")
            squares.extend(float(v) ** 2 for v in losses.detach())
            optimizer.zero_grad()
            losses.mean().backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        assert fb.loss_squares[j] == pytest.approx(np.mean(squares), rel=1e-4)


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_losses_are_measured_only_for_samplers_that_read_them(backend: str) -> None:
    """No extra forward pass when no sampler reads loss_squares: the feedback then has none."""
    for fb in _feedback("mlp", backend, asks=False):
        assert fb.loss_squares is None
