"""The centralized baseline: one SGD step of ``samples_per_round`` pooled rows per round equals a hand-written SGD
loop, and its history reports the federation's objective sum_i p_i L_i at the federated runs' evaluation rounds."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from engine_cases import classification_data, regression_data, spec_for

from fedsample.data import FederatedDataset
from fedsample.engine import (
    FedAdam,
    ModelSpec,
    RunResult,
    RunSpec,
    Scaffold,
    TrainingConfig,
    draw_client_batches,
    initial_params,
    simulate,
    simulate_centralized,
)
from fedsample.errors import FedsampleError
from fedsample.federation import ImportanceMode
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import MDSampler

LINEAR = ModelSpec("linear", (5,), 1)


def _flat(params: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([params["layers.0.weight"].ravel(), params["layers.0.bias"]]).astype(float)


def _design(data: FederatedDataset) -> tuple[np.ndarray, np.ndarray]:
    x = np.hstack([np.asarray(data.train_features, dtype=float), np.ones((data.train_features.shape[0], 1))])
    return x, np.asarray(data.train_targets, dtype=float)


def _objective(data: FederatedDataset, theta: np.ndarray, importance: ImportanceMode) -> float:
    """sum_i p_i L_i with L_i client i's mean squared error."""
    x, y = _design(data)
    losses = [np.mean((x[lo:hi] @ theta - y[lo:hi]) ** 2) for lo, hi in itertools.pairwise(data.train_indptr)]
    return float(data.federation(importance=importance).importances @ losses)


@pytest.mark.parametrize("samples_per_round", [7, 500], ids=["mini-batches", "full-batch"])
def test_rounds_are_sgd_on_the_pooled_data(samples_per_round: int) -> None:
    """Six rounds with lr decay: theta -= eta_l lr_decay^t (1 / B) sum_{batch} grad l_j, the batch of
    min(B, M) distinct rows from the stream (seed, TRAINING, t, 0), in float64 by hand. The federated
    configuration's m, N, B, algorithm and server do not apply."""
    data = regression_data(1)
    config = TrainingConfig(
        rounds=6,
        num_sampled=3,
        local_steps=4,
        batch_size=2,
        local_lr=0.05,
        lr_decay=0.9,
        algorithm=Scaffold(),
        server=FedAdam(),
    )
    result = simulate_centralized(data, LINEAR, config, samples_per_round=samples_per_round, seed=5, init_seed=2)
    theta = _flat({n: v.numpy() for n, v in initial_params(LINEAR, 2).items()})
    x, y = _design(data)
    total = x.shape[0]
    for t in range(6):
        rows = draw_client_batches(stream_rng(5, Stream.TRAINING, t, 0), total, 1, samples_per_round)[0]
        gradient = 2.0 * x[rows].T @ (x[rows] @ theta - y[rows]) / rows.size
        theta = theta - 0.05 * 0.9**t * gradient
    np.testing.assert_allclose(_flat(result.params), theta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.history.local_lr, 0.05 * 0.9 ** np.arange(6), rtol=1e-15)
    history = result.history
    assert (history.label, history.sampler, history.seed) == ("centralized", "centralized", 5)
    assert history.info["baseline"] == "centralized"
    assert history.info["samples_per_round"] == samples_per_round
    np.testing.assert_array_equal(history.distinct_clients, np.ones(6))
    np.testing.assert_array_equal(history.weight_sum, np.ones(6))


@pytest.mark.parametrize("importance", ["size", "uniform"])
def test_history_lines_up_with_federated_runs(importance: ImportanceMode) -> None:
    """Same evaluation rounds as simulate() with the same config, the same initial metrics, and the training loss
    is the federation's sum_i p_i L_i (not the pooled mean when importances are uniform)."""
    data = regression_data(2)
    config = TrainingConfig(
        rounds=5, num_sampled=3, local_steps=2, batch_size=4, local_lr=0.05, eval_every=2, importance=importance
    )
    federated = simulate(data, LINEAR, [RunSpec(MDSampler(), seed=1)], config, init_seed=3)[0]
    central = simulate_centralized(data, LINEAR, config, samples_per_round=12, seed=1, init_seed=3)
    np.testing.assert_array_equal(central.history.eval_rounds, [0, 2, 4, 5])
    np.testing.assert_array_equal(central.history.eval_rounds, federated.history.eval_rounds)
    for metric in ("train_loss", "test_loss"):
        assert getattr(central.history, metric)[0] == pytest.approx(getattr(federated.history, metric)[0], rel=1e-6)
    final = _flat(central.params)
    assert central.history.train_loss[-1] == pytest.approx(_objective(data, final, importance), rel=1e-5)
    x, y = _design(data)
    pooled_mean = float(np.mean((x @ final - y) ** 2))
    if importance == "uniform":
        assert abs(central.history.train_loss[-1] - pooled_mean) > 1e-3 * pooled_mean
    assert central.history.train_loss[-1] < central.history.train_loss[0]


def _same(first: RunResult, second: RunResult) -> None:
    for name in first.params:
        np.testing.assert_allclose(first.params[name], second.params[name], rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(first.history.train_loss, second.history.train_loss, rtol=1e-5)
    np.testing.assert_allclose(first.history.test_accuracy, second.history.test_accuracy)


def test_classification_backends_agree() -> None:
    """MLP on labels: batched and sequential backends give the same baseline; test accuracy is recorded."""
    data = classification_data(3)
    spec = spec_for("mlp", data)
    common: dict[str, Any] = {"rounds": 4, "local_lr": 0.2}
    batched = simulate_centralized(data, spec, TrainingConfig(**common), samples_per_round=10, seed=2)
    sequential = simulate_centralized(
        data, spec, TrainingConfig(backend="sequential", **common), samples_per_round=10, seed=2
    )
    _same(batched, sequential)
    assert np.all((batched.history.test_accuracy >= 0) & (batched.history.test_accuracy <= 1))
    assert batched.history.distinct_labels[0] == 4


@pytest.mark.parametrize(
    ("options", "parameter"),
    [
        ({"samples_per_round": 0}, "samples_per_round"),
        ({"samples_per_round": 2.5}, "samples_per_round"),
        ({"samples_per_round": 4, "seed": -1}, "seed"),
    ],
)
def test_bad_arguments_name_the_parameter(options: dict[str, Any], parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        simulate_centralized(regression_data(4), LINEAR, TrainingConfig(rounds=1), **options)
    assert info.value.parameter == parameter


def test_model_must_fit_the_task() -> None:
    data = classification_data(5)
    with pytest.raises(FedsampleError) as info:
        simulate_centralized(
            data, ModelSpec("linear", data.sample_shape, 1), TrainingConfig(rounds=1), samples_per_round=4
        )
    assert info.value.parameter == "model"
