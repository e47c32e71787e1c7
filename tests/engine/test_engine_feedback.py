"""Feedback: every round the sampler's update() receives what the round revealed (who returned, update
vectors or their norms, first-batch losses, first-step gradient norms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from engine_cases import NormsOnlyRecordingSampler, RecordingSampler, classification_data, load, spec_for

from fedsample import Federation
from fedsample.engine import (
    ModelSpec,
    RunResult,
    RunSpec,
    TrainingConfig,
    draw_client_batches,
    initial_params,
    simulate,
)
from fedsample.engine.trainers.kernels import per_sample_loss
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import Feedback, MDSampler, Selection

SEED, ROUNDS, M = 5, 4, 4


def _run(
    sampler: RecordingSampler, *, backend: str = "batched", rounds: int = ROUNDS, kind: str = "mlp"
) -> tuple[RunResult, ModelSpec]:
    data = classification_data(0)
    spec = spec_for(kind, data)
    config = TrainingConfig(rounds=rounds, num_sampled=M, local_steps=3, batch_size=5, local_lr=0.1, backend=backend)  # type: ignore[arg-type]
    return simulate(data, spec, [RunSpec(sampler, seed=SEED)], config, init_seed=1)[0], spec


def _num_params(spec: ModelSpec) -> int:
    return sum(v.numel() for v in spec.init_params(torch.Generator()).values())


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_one_feedback_per_round_with_the_round_and_its_clients(backend: str) -> None:
    """Feedback t carries round t, the selection drawn from (seed, SAMPLING, t), and its distinct clients."""
    result, spec = _run(RecordingSampler(), backend=backend)
    feedback = result.sampler_state.feedback
    assert len(feedback) == ROUNDS
    state = MDSampler().init(classification_data(0).federation(), M)
    for t, fb in enumerate(feedback):
        assert isinstance(fb, Feedback)
        assert fb.round == t
        selection = MDSampler().sample(state, stream_rng(SEED, Stream.SAMPLING, t))
        np.testing.assert_array_equal(fb.selection.clients, selection.clients)
        np.testing.assert_array_equal(fb.clients, np.unique(selection.clients))
        k = fb.clients.size
        assert fb.updates is not None
        assert fb.updates.shape == (k, _num_params(spec))
        for values in (fb.update_norms, fb.losses, fb.gradient_norms):
            assert values is not None
            assert values.shape == (k,)
            assert np.all(np.isfinite(values))
            assert np.all(values > 0)
        assert fb.update_norms is not None
        np.testing.assert_allclose(fb.update_norms, np.linalg.norm(fb.updates, axis=1), rtol=1e-5)


def test_feedback_is_the_same_for_both_backends() -> None:
    batched = _run(RecordingSampler(), backend="batched")[0].sampler_state.feedback
    sequential = _run(RecordingSampler(), backend="sequential")[0].sampler_state.feedback
    for a, b in zip(batched, sequential, strict=True):
        np.testing.assert_array_equal(a.clients, b.clients)
        for name in ("update_norms", "losses", "gradient_norms", "updates"):
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-4, atol=1e-6, err_msg=name)


def test_updates_are_only_gathered_for_samplers_that_need_them() -> None:
    """needs_updates=False: updates is None; the other fields are unchanged."""
    with_updates = _run(RecordingSampler())[0].sampler_state.feedback
    without = _run(NormsOnlyRecordingSampler())[0].sampler_state.feedback
    for a, b in zip(with_updates, without, strict=True):
        assert b.updates is None
        np.testing.assert_array_equal(a.clients, b.clients)
        np.testing.assert_array_equal(a.update_norms, b.update_norms)
        np.testing.assert_array_equal(a.losses, b.losses)
        np.testing.assert_array_equal(a.gradient_norms, b.gradient_norms)


def test_updates_are_theta_i_minus_theta_and_aggregate_to_the_server_step() -> None:
    """One round, eta_g = 1: theta_1 - theta_0 = sum_i w_i (theta_i - theta_0) with the feedback's vectors."""
    result, spec = _run(RecordingSampler(), rounds=1)
    (fb,) = result.sampler_state.feedback
    _, weights = fb.selection.distinct()
    start = initial_params(spec, 1)
    step = np.concatenate([(result.params[n] - start[n].numpy()).ravel() for n in start])
    np.testing.assert_allclose(weights @ fb.updates, step, rtol=1e-5, atol=1e-7)


def test_losses_and_gradient_norms_are_those_of_the_first_batch_at_theta() -> None:
    """losses[j]: the loss of the round's starting model on client j's first batch; gradient_norms[j]: the
    norm of that batch's mean gradient (autograd on an nn.Module)."""
    data = classification_data(0)
    result, spec = _run(RecordingSampler(), rounds=1)
    (fb,) = result.sampler_state.feedback
    offsets = np.asarray(data.train_indptr)
    for j, client in enumerate(fb.clients):
        module = load(spec, initial_params(spec, 1))
        size = int(offsets[client + 1] - offsets[client])
        local = draw_client_batches(stream_rng(SEED, Stream.TRAINING, 0, int(client)), size, 3, 5)[0]
        rows = offsets[client] + local
        x = torch.as_tensor(np.array(data.train_features[rows]))
        y = torch.as_tensor(np.array(data.train_targets[rows]))
        loss = per_sample_loss(module(x), y, "classification").mean()
        loss.backward()  # type: ignore[no-untyped-call]
        norm = torch.cat([p.grad.ravel() for p in module.parameters()]).norm()  # type: ignore[union-attr]
        assert fb.losses[j] == pytest.approx(float(loss.detach()), rel=1e-5)
        assert fb.gradient_norms[j] == pytest.approx(float(norm), rel=1e-5)


@dataclass(frozen=True, kw_only=True)
class _NobodySampler(RecordingSampler):
    """Selects no client (as Poisson sampling may), and asks for update vectors."""

    name: ClassVar[str] = "nobody"

    def sample(self, state: Any, rng: np.random.Generator) -> Selection:
        return Selection(clients=np.zeros(0, dtype=np.int64), weights=np.zeros(0))


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "batched-with-another-run"])
def test_a_round_without_clients_gives_empty_feedback(alone: bool) -> None:
    """A run that selects nobody keeps its model and gets feedback with no clients and (0, d) updates, also
    when another run of the same batch trains clients that round."""
    data = classification_data(1)
    spec = spec_for("softmax", data)
    runs = [RunSpec(_NobodySampler(), seed=0)] + ([] if alone else [RunSpec(RecordingSampler(), seed=1)])
    config = TrainingConfig(rounds=2, num_sampled=3, local_steps=2, batch_size=4)
    results = simulate(data, spec, runs, config)
    nobody = results[0]
    start = initial_params(spec, 0)
    for name, value in start.items():
        np.testing.assert_array_equal(nobody.params[name], value.numpy())
    assert nobody.history.distinct_clients.tolist() == [0, 0]
    assert nobody.history.weight_sum.tolist() == [0.0, 0.0]
    for t, fb in enumerate(nobody.sampler_state.feedback):
        assert fb.round == t
        assert fb.clients.size == 0
        assert fb.updates is not None
        assert fb.updates.shape == (0, _num_params(spec))
        assert fb.update_norms is not None
        assert fb.update_norms.size == 0
    if not alone:
        other = results[1].sampler_state.feedback
        for fb in other:
            assert fb.clients.size > 0
            assert fb.updates is not None
            assert fb.updates.shape[0] == fb.clients.size


def test_recording_sampler_draws_like_md() -> None:
    """The recorder only adds memory: its selections are MD's."""
    federation = Federation.from_sizes([3, 5, 2, 7])
    recorder, md = RecordingSampler(), MDSampler()
    a = recorder.sample(recorder.init(federation, 3), np.random.default_rng(0))  # type: ignore[arg-type]
    b = md.sample(md.init(federation, 3), np.random.default_rng(0))
    np.testing.assert_array_equal(a.clients, b.clients)
    np.testing.assert_array_equal(a.weights, b.weights)
