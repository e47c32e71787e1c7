"""The round loop's math (paper 003, eq. 3): theta <- theta + eta_g sum_i w_i(S_t) (theta_i - theta), with
local SGD, FedProx's proximal term, mini-batch SGD (001, Alg. 3), learning-rate decay, and determinism."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, regression_data, spec_for

from fedsample.data import FederatedDataset
from fedsample.engine import (
    FedAvg,
    FedProx,
    LocalAlgorithm,
    MiniBatchSGD,
    ModelSpec,
    Progress,
    RunResult,
    RunSpec,
    ServerSGD,
    TrainingConfig,
    draw_client_batches,
    initial_params,
    simulate,
)
from fedsample.federation import ImportanceMode
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import FullSampler, MDSampler, PoissonSampler, Sampler, UniformSampler

LINEAR = ModelSpec("linear", (5,), 1)


def _reference_rounds(
    data: FederatedDataset,
    sampler: Sampler[Any],
    config: TrainingConfig,
    *,
    seed: int,
    init_seed: int,
    mu: float = 0.0,
    server_lr: float = 1.0,
) -> np.ndarray:
    """Linear regression by hand in float64: [w, b] after ``config.rounds`` rounds.

    Each selected client runs ``N`` steps theta_i <- theta_i - eta_l (grad + mu (theta_i - theta)) on
    batches from the stream (seed, TRAINING, t, i); the server adds eta_g sum_i w_i (theta_i - theta).
    """
    start = initial_params(LINEAR, init_seed)
    theta = np.concatenate([start["layers.0.weight"].numpy().ravel(), start["layers.0.bias"].numpy()]).astype(float)
    x = np.hstack([np.asarray(data.train_features, dtype=float), np.ones((data.train_features.shape[0], 1))])
    y = np.asarray(data.train_targets, dtype=float)
    offsets = np.asarray(data.train_indptr)
    state = sampler.init(data.federation(importance=config.importance), config.num_sampled)
    steps = config.algorithm.num_local_steps(config.local_steps)
    for t in range(config.rounds):
        lr = config.local_lr * config.lr_decay**t
        clients, weights = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t)).distinct()
        delta = np.zeros_like(theta)
        for client, weight in zip(clients, weights, strict=True):
            size = int(offsets[client + 1] - offsets[client])
            batches = draw_client_batches(
                stream_rng(seed, Stream.TRAINING, t, int(client)), size, steps, config.batch_size
            )
            local = theta.copy()
            for rows in offsets[client] + batches:
                residual = x[rows] @ local - y[rows]
                gradient = 2.0 * x[rows].T @ residual / rows.size
                local = local - lr * (gradient + mu * (local - theta))
            delta += weight * (local - theta)
        theta = theta + server_lr * delta
    return theta


def _flat(result: RunResult) -> np.ndarray:
    return np.concatenate([result.params["layers.0.weight"].ravel(), result.params["layers.0.bias"]]).astype(float)


@pytest.mark.parametrize("importance", ["size", "uniform"])
@pytest.mark.parametrize("batch_size", [50, 4], ids=["full-batches", "sampled-batches"])
def test_one_full_participation_step_is_gradient_descent_on_the_objective(
    batch_size: int, importance: ImportanceMode
) -> None:
    """FullSampler, eta_g = 1, one local step: theta_1 = theta_0 - eta_l sum_i p_i g_i, with g_i client i's
    mean-batch gradient (all n_i samples when n_i <= B)."""
    data = regression_data(1)
    config = TrainingConfig(
        rounds=1, num_sampled=1, local_steps=1, batch_size=batch_size, local_lr=0.1, importance=importance
    )
    result = simulate(data, LINEAR, [RunSpec(FullSampler(), seed=4)], config, init_seed=2)[0]
    start = initial_params(LINEAR, 2)
    theta = np.concatenate([start["layers.0.weight"].numpy().ravel(), start["layers.0.bias"].numpy()]).astype(float)
    x = np.hstack([np.asarray(data.train_features, dtype=float), np.ones((data.train_features.shape[0], 1))])
    y = np.asarray(data.train_targets, dtype=float)
    offsets = np.asarray(data.train_indptr)
    p = data.federation(importance=importance).importances
    step = np.zeros_like(theta)
    for i in range(data.num_clients):
        size = int(offsets[i + 1] - offsets[i])
        if size <= batch_size:
            rows = np.arange(offsets[i], offsets[i + 1])
        else:
            rows = offsets[i] + draw_client_batches(stream_rng(4, Stream.TRAINING, 0, i), size, 1, batch_size)[0]
        step += p[i] * 2.0 * x[rows].T @ (x[rows] @ theta - y[rows]) / rows.size
    np.testing.assert_allclose(_flat(result), theta - 0.1 * step, rtol=1e-5, atol=1e-6)
    assert result.history.weight_sum[0] == pytest.approx(1.0)
    assert result.history.distinct_clients[0] == data.num_clients


@pytest.mark.parametrize(
    ("sampler", "algorithm", "server_lr"),
    [
        (FullSampler(), FedAvg(), 1.0),
        (MDSampler(), FedAvg(), 0.7),
        (UniformSampler(), FedProx(mu=0.8), 1.3),
        (PoissonSampler(capped=True), FedAvg(), 1.0),
        (MDSampler(), MiniBatchSGD(), 2.0),
    ],
    ids=["full", "md-eta-0.7", "uniform-fedprox", "poisson", "md-minibatch-sgd"],
)
def test_rounds_follow_the_general_server_update(
    sampler: Sampler[Any], algorithm: LocalAlgorithm, server_lr: float
) -> None:
    """Three rounds with several local steps, lr decay and any sampler's weights (repeated draws summed,
    Poisson's random number of clients) equal the hand-written update in float64."""
    data = regression_data(2)
    config = TrainingConfig(
        rounds=3,
        num_sampled=5,
        local_steps=3,
        batch_size=6,
        local_lr=0.05,
        lr_decay=0.9,
        algorithm=algorithm,
        server=ServerSGD(lr=server_lr),
    )
    result = simulate(data, LINEAR, [RunSpec(sampler, seed=7)], config, init_seed=3)[0]
    expected = _reference_rounds(
        data, sampler, config, seed=7, init_seed=3, mu=algorithm.proximal_mu, server_lr=server_lr
    )
    np.testing.assert_allclose(_flat(result), expected, rtol=1e-5, atol=1e-6)


def test_minibatch_sgd_takes_exactly_one_local_step() -> None:
    """MiniBatchSGD ignores local_steps: theta_i - theta = -eta_l g_i, the same as FedAvg with N = 1."""
    data = classification_data(3)
    spec = spec_for("mlp", data)
    runs = [RunSpec(MDSampler(), seed=1)]
    common: dict[str, Any] = {"rounds": 3, "num_sampled": 4, "batch_size": 5, "local_lr": 0.1}
    minibatch = simulate(data, spec, runs, TrainingConfig(local_steps=7, algorithm=MiniBatchSGD(), **common))[0]
    one_step = simulate(data, spec, runs, TrainingConfig(local_steps=1, algorithm=FedAvg(), **common))[0]
    seven_steps = simulate(data, spec, runs, TrainingConfig(local_steps=7, algorithm=FedAvg(), **common))[0]
    for name in minibatch.params:
        np.testing.assert_array_equal(minibatch.params[name], one_step.params[name])
    assert not np.allclose(minibatch.params["layers.0.weight"], seven_steps.params["layers.0.weight"])
    assert MiniBatchSGD().num_local_steps(7) == 1


def _update_norm(result: RunResult, start: dict[str, Any]) -> float:
    return float(np.sqrt(sum(np.sum((result.params[n] - start[n].numpy()) ** 2) for n in start)))


def test_fedprox_with_a_huge_mu_keeps_the_local_update_small() -> None:
    """With mu = 0.95 / eta_l the proximal term pins theta_i near theta: after 20 local steps the update is a
    small fraction of FedAvg's (it is about ||g|| / mu instead of N eta_l ||g||); mu = 0 is FedAvg exactly."""
    data = regression_data(4)
    runs = [RunSpec(FullSampler(), seed=0)]
    common: dict[str, Any] = {"rounds": 1, "num_sampled": 1, "local_steps": 20, "batch_size": 4, "local_lr": 0.05}
    start = initial_params(LINEAR, 0)
    fedavg = simulate(data, LINEAR, runs, TrainingConfig(algorithm=FedAvg(), **common))[0]
    prox = simulate(data, LINEAR, runs, TrainingConfig(algorithm=FedProx(mu=19.0), **common))[0]
    no_prox = simulate(data, LINEAR, runs, TrainingConfig(algorithm=FedProx(mu=0.0), **common))[0]
    assert _update_norm(prox, start) < 0.15 * _update_norm(fedavg, start)
    for name in fedavg.params:
        np.testing.assert_array_equal(no_prox.params[name], fedavg.params[name])


def test_local_learning_rate_decays_per_round() -> None:
    """History.local_lr[t] = eta_l * lr_decay**t."""
    data = classification_data(5)
    config = TrainingConfig(rounds=6, num_sampled=2, local_steps=1, batch_size=4, local_lr=0.2, lr_decay=0.5)
    history = simulate(data, spec_for("softmax", data), [RunSpec(MDSampler())], config)[0].history
    np.testing.assert_allclose(history.local_lr, 0.2 * 0.5 ** np.arange(6), rtol=1e-15)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_server_learning_rate_scales_the_aggregated_update(kind: str) -> None:
    """ServerSGD(lr=2) moves the model twice as far as lr=1 from the same start with the same selection."""
    if kind == "cnn":
        data = classification_data(6, sizes=(4, 6, 3), sample_shape=(1, 18, 18), num_classes=3)
    else:
        data = classification_data(6)
    spec = spec_for(kind, data)
    runs = [RunSpec(MDSampler(), seed=2)]
    common: dict[str, Any] = {"rounds": 1, "num_sampled": 3, "local_steps": 3, "batch_size": 4, "local_lr": 0.1}
    one = simulate(data, spec, runs, TrainingConfig(server=ServerSGD(lr=1.0), **common))[0]
    two = simulate(data, spec, runs, TrainingConfig(server=ServerSGD(lr=2.0), **common))[0]
    start = initial_params(spec, 0)
    for name, value in start.items():
        step_one = one.params[name] - value.numpy()
        step_two = two.params[name] - value.numpy()
        np.testing.assert_allclose(step_two, 2.0 * step_one, rtol=1e-4, atol=1e-6, err_msg=name)
    assert _update_norm(one, start) > 0


def test_simulate_starts_from_given_parameters() -> None:
    """params= overrides init_seed: the initial evaluation is the given model's."""
    data = regression_data(7)
    zero = ModelSpec("linear", (5,), 1, zero_init=True).init_params(torch.Generator())
    config = TrainingConfig(rounds=1, num_sampled=2, local_steps=1, batch_size=4)
    from_zero = simulate(data, LINEAR, [RunSpec(MDSampler())], config, params=zero)[0]
    targets = np.asarray(data.train_targets, dtype=float)
    p = data.federation().importances
    per_client = [np.mean(targets[lo:hi] ** 2) for lo, hi in itertools.pairwise(data.train_indptr)]
    assert from_zero.history.train_loss[0] == pytest.approx(float(p @ per_client), rel=1e-5)


def test_progress_reports_every_round() -> None:
    data = classification_data(8)
    seen: list[Progress] = []
    config = TrainingConfig(rounds=3, num_sampled=2, local_steps=1, batch_size=4, eval_every=2)
    runs = [RunSpec(MDSampler(), seed=0), RunSpec(MDSampler(), seed=1)]
    results = simulate(data, spec_for("softmax", data), runs, config, progress=seen.append)
    assert [(p.done, p.total, p.evaluated) for p in seen] == [(1, 3, 0), (2, 3, 2), (3, 3, 3)]
    # the latest evaluated objective of each run
    np.testing.assert_array_equal(seen[1].train_loss, [r.history.train_loss[1] for r in results])
    np.testing.assert_array_equal(seen[2].train_loss, [r.history.train_loss[2] for r in results])


# --- determinism -----------------------------------------------------------------------------------


def _assert_identical(first: RunResult, second: RunResult) -> None:
    one, two = first.history.to_dict(), second.history.to_dict()
    one["rounds"].pop("round_seconds")
    two["rounds"].pop("round_seconds")
    assert one == two
    for name in first.params:
        np.testing.assert_array_equal(first.params[name], second.params[name])


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_same_seeds_give_identical_runs(backend: str) -> None:
    data = classification_data(9)
    spec = spec_for("mlp", data)
    runs = [RunSpec(MDSampler(), seed=1), RunSpec(PoissonSampler(capped=True), seed=2)]
    config = TrainingConfig(rounds=3, num_sampled=3, local_steps=2, batch_size=5, backend=backend)  # type: ignore[arg-type]
    first = simulate(data, spec, runs, config, init_seed=4)
    second = simulate(data, spec, runs, config, init_seed=4)
    for a, b in zip(first, second, strict=True):
        _assert_identical(a, b)


def test_different_seeds_give_different_selections_and_models() -> None:
    data = classification_data(10)
    spec = spec_for("softmax", data)
    config = TrainingConfig(rounds=4, num_sampled=2, local_steps=2, batch_size=5)
    results = simulate(data, spec, [RunSpec(UniformSampler(), seed=0), RunSpec(UniformSampler(), seed=1)], config)
    state = UniformSampler().init(data.federation(), 2)
    selections = [
        [UniformSampler().sample(state, stream_rng(seed, Stream.SAMPLING, t)).distinct()[0].tolist() for t in range(4)]
        for seed in (0, 1)
    ]
    assert selections[0] != selections[1]
    assert not np.array_equal(results[0].params["layers.0.weight"], results[1].params["layers.0.weight"])
    other_init = simulate(data, spec, [RunSpec(UniformSampler(), seed=0)], config, init_seed=1)[0]
    assert other_init.history.train_loss[0] != results[0].history.train_loss[0]
