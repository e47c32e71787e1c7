"""Backends: the batched computation reproduces the sequential reference loop (nn.Module + torch.optim.SGD),
and training several runs in one batch reproduces training them one by one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, regression_data, sequence_data, spec_for

from fedsample.data import FederatedDataset
from fedsample.engine import (
    BatchedBackend,
    FallbackWarning,
    FedAvg,
    FedProx,
    LocalAlgorithm,
    MiniBatchSGD,
    RunResult,
    RunSpec,
    SequentialBackend,
    ServerSGD,
    TrainingConfig,
    plan_batches,
    simulate,
)
from fedsample.engine.algorithms import ClientStep
from fedsample.engine.trainers.base import padded_widths, size_buckets
from fedsample.samplers import FedSamplingSampler, MDSampler, PoissonSampler, UniformSampler

CNN_SIZES = (5, 9, 3, 7, 4, 6)


def _data(kind: str) -> FederatedDataset:
    if kind == "linear":
        return regression_data(0)
    if kind == "cnn":
        return classification_data(0, sizes=CNN_SIZES, sample_shape=(1, 28, 28), num_classes=3, test_per_client=1)
    return classification_data(0)


def _assert_same_run(first: RunResult, second: RunResult, *, rtol: float, atol: float) -> None:
    assert first.params.keys() == second.params.keys()
    for name in first.params:
        np.testing.assert_allclose(first.params[name], second.params[name], rtol=rtol, atol=atol, err_msg=name)
    a, b = first.history, second.history
    np.testing.assert_array_equal(a.eval_rounds, b.eval_rounds)
    np.testing.assert_allclose(a.train_loss, b.train_loss, rtol=rtol, atol=atol)
    np.testing.assert_allclose(a.test_loss, b.test_loss, rtol=rtol, atol=atol)
    np.testing.assert_allclose(a.test_accuracy, b.test_accuracy, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(a.distinct_clients, b.distinct_clients)
    np.testing.assert_array_equal(a.distinct_labels, b.distinct_labels)
    np.testing.assert_array_equal(a.weight_sum, b.weight_sum)
    np.testing.assert_array_equal(a.local_lr, b.local_lr)


ALGORITHMS: dict[str, LocalAlgorithm] = {"fedavg": FedAvg(), "fedprox": FedProx(mu=0.5), "minibatch": MiniBatchSGD()}


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("kind", ["linear", "softmax", "mlp", "cnn"])
def test_batched_backend_matches_the_sequential_reference(kind: str, algorithm: str) -> None:
    """Same seeds, 5 rounds (4 for the CNN) with lr decay 0.8 and eta_g = 1.5: the same global model to
    float32 tolerance, and the same metrics."""
    data = _data(kind)
    spec = spec_for(kind, data)
    common: dict[str, Any] = {
        "rounds": 4 if kind == "cnn" else 5,
        "num_sampled": 3 if kind == "cnn" else 4,
        "local_steps": 2 if kind == "cnn" else 3,
        "batch_size": 6,  # below some clients' sizes, above others'
        "local_lr": 0.05,
        "lr_decay": 0.8,
        "server": ServerSGD(lr=1.5),
        "algorithm": ALGORITHMS[algorithm],
    }
    runs = [RunSpec(MDSampler(), seed=3)]
    batched = simulate(data, spec, runs, TrainingConfig(backend="batched", **common), init_seed=1)[0]
    sequential = simulate(data, spec, runs, TrainingConfig(backend="sequential", **common), init_seed=1)[0]
    assert batched.history.info["backend"] == "batched"
    assert sequential.history.info["backend"] == "sequential"
    start = simulate(data, spec, runs, TrainingConfig(backend="batched", **{**common, "rounds": 1}), init_seed=1)[0]
    assert any(not np.allclose(start.params[n], batched.params[n]) for n in start.params)  # training moved it
    _assert_same_run(batched, sequential, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("kind", "proximal_mu", "with_corrections"),
    [("mlp", 0.0, False), ("mlp", 0.3, False), ("softmax", 0.0, True), ("cnn", 0.3, True)],
    ids=["mlp-fused-steps", "mlp-proximal", "softmax-corrections", "cnn-proximal-corrections"],
)
def test_backends_return_the_same_local_results(kind: str, proximal_mu: float, with_corrections: bool) -> None:
    """One call of train() from different starting models per slot: same updates, first losses and
    first-step gradient norms (the proximal term and corrections c_i included)."""
    data = _data(kind)
    spec = spec_for(kind, data)
    generator = torch.Generator().manual_seed(0)
    clients = np.array([0, 2, 4, 5])  # client 2 has fewer samples than the batch
    models = [spec.init_params(generator) for _ in clients]
    start = {n: torch.stack([m[n] for m in models]) for n in models[0]}
    corrections = None
    if with_corrections:
        corrections = {n: 0.1 * torch.randn(v.shape, generator=generator) for n, v in start.items()}
    plan = plan_batches(
        seeds=np.full(clients.size, 4, dtype=np.int64),
        round_index=2,
        clients=clients,
        offsets=np.asarray(data.train_indptr),
        steps=3,
        batch_size=5,
    )
    inputs: dict[str, Any] = {
        "features": torch.as_tensor(np.array(data.train_features)),
        "targets": torch.as_tensor(np.array(data.train_targets)).long(),
        "plan": plan,
        "steps": 3,
        "local_lr": 0.1,
        "step": ClientStep(proximal_mu=proximal_mu, corrections=corrections),
    }
    batched = BatchedBackend(spec).train(start, **inputs)
    sequential = SequentialBackend(spec).train(start, **inputs)
    for name in start:
        assert batched.updates[name].shape == start[name].shape
        np.testing.assert_allclose(
            batched.updates[name].numpy(), sequential.updates[name].numpy(), rtol=1e-4, atol=1e-6, err_msg=name
        )
    np.testing.assert_allclose(batched.first_loss.numpy(), sequential.first_loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(batched.gradient_norms.numpy(), sequential.gradient_norms.numpy(), rtol=1e-5)
    assert np.all(batched.first_loss.numpy() > 0)


def test_batched_backend_buckets_widely_different_batch_sizes() -> None:
    """Kept counts from 1 to 60 over 12 slots (FedSampling's shape): the backend trains them in
    size buckets and still returns the sequential reference's updates, slot by slot, in order."""
    sizes = [1, 2, 1, 3, 60, 1, 2, 1, 7, 1, 30, 2]
    data = classification_data(3, sizes=sizes)
    spec = spec_for("mlp", data)
    clients = np.arange(len(sizes))
    counts = np.array(sizes)
    assert len(size_buckets(counts, 64)) > 1  # the bucketed path runs
    generator = torch.Generator().manual_seed(1)
    models = [spec.init_params(generator) for _ in clients]
    start = {n: torch.stack([m[n] for m in models]) for n in models[0]}
    plan = plan_batches(
        seeds=np.zeros(clients.size, dtype=np.int64),
        round_index=0,
        clients=clients,
        offsets=np.asarray(data.train_indptr),
        steps=2,
        batch_size=64,
        slot_batch_sizes=counts,
    )
    inputs: dict[str, Any] = {
        "features": torch.as_tensor(np.array(data.train_features)),
        "targets": torch.as_tensor(np.array(data.train_targets)).long(),
        "plan": plan,
        "steps": 2,
        "local_lr": 0.1,
    }
    batched = BatchedBackend(spec).train(start, **inputs)
    sequential = SequentialBackend(spec).train(start, **inputs)
    for name in start:
        np.testing.assert_allclose(
            batched.updates[name].numpy(), sequential.updates[name].numpy(), rtol=1e-4, atol=1e-6, err_msg=name
        )
    np.testing.assert_allclose(batched.first_loss.numpy(), sequential.first_loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(batched.gradient_norms.numpy(), sequential.gradient_norms.numpy(), rtol=1e-5)


@pytest.mark.parametrize(
    ("counts", "batch_size", "expected", "widths"),
    [
        ([5, 5, 5, 5, 5, 5, 5, 5], 5, [[0, 1, 2, 3, 4, 5, 6, 7]], [5] * 8),  # full batches: one call, no padding
        ([1, 64, 1, 1], 64, [[0, 2, 3], [1]], [1, 64, 1, 1]),
        ([1, 1, 2, 3, 4, 5, 1, 9], 10, [[0, 1, 6], [2], [3, 4], [5], [7]], [1, 1, 2, 4, 4, 8, 1, 10]),
        ([3, 4, 3, 4, 3, 4, 3, 4], 6, [[0, 1, 2, 3, 4, 5, 6, 7]], [4] * 8),
        ([40, 70, 130], 50, [[0], [1], [2]], [50, 128, 256]),  # kept counts above B: powers of two
    ],
)
def test_size_buckets(counts: list[int], batch_size: int, expected: list[list[int]], widths: list[int]) -> None:
    """Buckets cover every slot once, grouped by a padded width that depends on the slot's own count
    only (at most twice the count, and B for a full batch), so other runs never change a slot's width."""
    buckets = size_buckets(np.array(counts), batch_size)
    assert [b.tolist() for b in buckets] == expected
    assert padded_widths(np.array(counts), batch_size).tolist() == widths


THREE_RUNS = [
    RunSpec(MDSampler(), seed=1),
    RunSpec(UniformSampler(), seed=2, label="uniform"),
    RunSpec(PoissonSampler(capped=True), seed=3),
]


@pytest.mark.parametrize("kind", ["linear", "mlp", "cnn"])
def test_batching_runs_together_changes_nothing(kind: str) -> None:
    """batch_runs=True (3 runs, different samplers and seeds, one batch per round) = the runs simulated
    one by one, to 1e-7 (parameters) and 1e-6 relative (metrics)."""
    data = _data(kind)
    spec = spec_for(kind, data)
    config = TrainingConfig(
        rounds=2 if kind == "cnn" else 4,
        num_sampled=3,
        local_steps=3,
        batch_size=6,
        local_lr=0.05,
        algorithm=FedProx(mu=0.1) if kind == "linear" else FedAvg(),
    )
    together = simulate(data, spec, THREE_RUNS, config, init_seed=5, batch_runs=True)
    apart = simulate(data, spec, THREE_RUNS, config, init_seed=5, batch_runs=False)
    assert [r.history.info["runs_batched"] for r in together] == [3, 3, 3]
    assert [r.history.info["runs_batched"] for r in apart] == [1, 1, 1]
    assert [r.history.label for r in together] == ["md", "uniform", "poisson"]
    for a, b in zip(together, apart, strict=True):
        assert (a.history.seed, a.history.sampler) == (b.history.seed, b.history.sampler)
        _assert_same_run(a, b, rtol=1e-6, atol=1e-7)
    # The runs differ from each other, so the comparison above is not vacuous.
    name = next(iter(together[0].params))
    assert not np.array_equal(together[0].params[name], together[1].params[name])
    assert not np.array_equal(together[1].params[name], together[2].params[name])


@pytest.fixture
def one_thread() -> Any:
    """PyTorch on one thread: some CPU kernels round differently at other thread counts."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_a_runs_numbers_do_not_depend_on_the_runs_batched_with_it(kind: str, one_thread: None) -> None:
    """Bit for bit: each run alone = the runs in one batch, with clients smaller than B (padded
    batches of several widths) and a data-level batch-size instruction, so that a run split off to
    a Ray task reports exactly what the local batch reports."""
    sizes = [2, 3, 9, 4, 12, 5, 7, 1, 6, 11]
    data = regression_data(1, sizes=sizes) if kind == "linear" else classification_data(1, sizes=sizes)
    spec = spec_for(kind, data)
    config = TrainingConfig(rounds=3, num_sampled=4, local_steps=3, batch_size=6, local_lr=0.05)
    runs = [*THREE_RUNS, RunSpec(FedSamplingSampler(target_samples=20), seed=4)]
    together = simulate(data, spec, runs, config, init_seed=5)
    for run, batched in zip(runs, together, strict=True):
        alone = simulate(data, spec, [run], config, init_seed=5)[0]
        for name in batched.params:
            np.testing.assert_array_equal(batched.params[name], alone.params[name], err_msg=name)
        for field in ("train_loss", "test_loss", "test_accuracy", "weight_sum"):
            np.testing.assert_array_equal(getattr(batched.history, field), getattr(alone.history, field), field)


def test_lstm_trains_on_threads_or_falls_back_to_the_sequential_backend() -> None:
    """On a CPU the batched backend trains the LSTM's clients on threads (vmap has no batching rule for the
    fused LSTM kernel): the sequential backend's result, bit for bit on one thread. Forced to vmap, it
    falls back to the sequential backend with a FallbackWarning naming the missing batching rule."""
    from fedsample.engine.user_model import Model

    data = sequence_data(0)
    spec = spec_for("lstm", data)
    common: dict[str, Any] = {"rounds": 2, "num_sampled": 2, "local_steps": 2, "batch_size": 4, "local_lr": 0.5}
    runs = [RunSpec(MDSampler(), seed=1)]
    threaded = simulate(data, spec, runs, TrainingConfig(backend="batched", **common))[0]
    sequential = simulate(data, spec, runs, TrainingConfig(backend="sequential", **common))[0]
    assert threaded.history.info["backend"] == "batched"
    _assert_same_run(threaded, sequential, rtol=0, atol=0)
    forced = Model(spec.build, name="lstm", initializer=spec.init_params, batching="vmap")
    with pytest.warns(FallbackWarning, match=r"'lstm' \(torch.func has no batching rule for aten::"):
        fallback = simulate(data, forced, runs, TrainingConfig(backend="batched", **common))[0]
    assert fallback.history.info["backend"] == "sequential"
    _assert_same_run(fallback, sequential, rtol=0, atol=0)
    initial = spec_for("lstm", data).init_params(torch.Generator().manual_seed(0))
    assert fallback.params.keys() == initial.keys()
    assert np.all(np.isfinite(fallback.history.train_loss))
    assert fallback.history.train_loss[-1] != fallback.history.train_loss[0]
