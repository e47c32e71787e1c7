"""Metrics and History: the global objective sum_i p_i L_i, test metrics, per-round selection statistics,
evaluation schedule, immutability and JSON export."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, load, regression_data, spec_for

from fedsample.data import FederatedDataset
from fedsample.engine import History, ModelSpec, RunSpec, TrainingConfig, initial_params, simulate
from fedsample.engine.trainers.kernels import per_sample_loss
from fedsample.federation import ImportanceMode
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import MDSampler, PoissonSampler, Sampler, UniformSampler

IMPORTANCE_MODES: tuple[ImportanceMode, ...] = ("size", "uniform")


def _objective(data: FederatedDataset, spec: ModelSpec, params: Any, importance: ImportanceMode) -> float:
    """sum_i p_i L_i, client by client with an nn.Module (L_i: mean loss over client i's training rows)."""
    module = load(spec, params)
    p = data.federation(importance=importance).importances
    total = 0.0
    with torch.no_grad():
        for i in range(data.num_clients):
            x, y = data.client_train(i)
            target = torch.as_tensor(np.array(y))
            loss = per_sample_loss(module(torch.as_tensor(np.array(x))), target, spec.task).mean()
            total += p[i] * float(loss)
    return total


def _test_metrics(data: FederatedDataset, spec: ModelSpec, params: Any) -> tuple[float, float]:
    """Mean test loss and accuracy over the pooled test rows."""
    module = load(spec, params)
    with torch.no_grad():
        out = module(torch.as_tensor(np.array(data.test_features)))
        target = torch.as_tensor(np.array(data.test_targets))
        loss = float(per_sample_loss(out, target, spec.task).mean())
        accuracy = float((out.argmax(-1) == target).double().mean()) if spec.task == "classification" else np.nan
    return loss, accuracy


@pytest.mark.parametrize("importance", IMPORTANCE_MODES)
@pytest.mark.parametrize("kind", ["linear", "softmax", "mlp"])
def test_train_loss_is_the_federated_objective(kind: str, importance: ImportanceMode) -> None:
    """History.train_loss = sum_i p_i L_i (p_i = n_i / M or 1 / n) at the initial and the final model."""
    data = regression_data(0) if kind == "linear" else classification_data(0)
    spec = spec_for(kind, data)
    config = TrainingConfig(rounds=3, num_sampled=3, local_steps=2, batch_size=4, importance=importance)
    result = simulate(data, spec, [RunSpec(MDSampler(), seed=1)], config, init_seed=2)[0]
    history = result.history
    initial = initial_params(spec, 2)
    assert history.train_loss[0] == pytest.approx(_objective(data, spec, initial, importance), rel=1e-5)
    assert history.train_loss[-1] == pytest.approx(_objective(data, spec, result.params, importance), rel=1e-5)
    assert history.train_loss[-1] != history.train_loss[0]


def test_size_and_uniform_importance_give_different_objectives() -> None:
    """The importances enter the objective: unequal client sizes make the two weightings differ."""
    data = classification_data(1)
    spec = spec_for("softmax", data)
    losses = [
        simulate(data, spec, [RunSpec(MDSampler())], TrainingConfig(rounds=1, importance=mode))[0].history.train_loss[0]
        for mode in IMPORTANCE_MODES
    ]
    assert losses[0] != pytest.approx(losses[1], rel=1e-4)


@pytest.mark.parametrize("kind", ["softmax", "mlp", "cnn"])
def test_test_metrics_equal_a_direct_computation(kind: str) -> None:
    if kind == "cnn":
        data = classification_data(2, sizes=(4, 6, 3), sample_shape=(1, 18, 18), num_classes=3, test_per_client=4)
    else:
        data = classification_data(2, test_per_client=4)
    spec = spec_for(kind, data)
    config = TrainingConfig(rounds=2, num_sampled=2, local_steps=2, batch_size=4, local_lr=0.2)
    result = simulate(data, spec, [RunSpec(MDSampler(), seed=3)], config)[0]
    history = result.history
    for index, params in [(0, initial_params(spec, 0)), (-1, result.params)]:
        loss, accuracy = _test_metrics(data, spec, params)
        assert history.test_loss[index] == pytest.approx(loss, rel=1e-5)
        assert history.test_accuracy[index] == pytest.approx(accuracy, abs=1e-6)  # a float32 mean
    assert np.all((history.test_accuracy >= 0) & (history.test_accuracy <= 1))


def test_regression_has_nan_accuracy_and_none_in_to_dict() -> None:
    data = regression_data(3)
    spec = spec_for("linear", data)
    result = simulate(data, spec, [RunSpec(MDSampler())], TrainingConfig(rounds=2, num_sampled=2, batch_size=4))[0]
    history = result.history
    assert np.all(np.isnan(history.test_accuracy))
    assert np.all(np.isfinite(history.test_loss))
    assert history.test_loss[-1] == pytest.approx(_test_metrics(data, spec, result.params)[0], rel=1e-5)
    exported = history.to_dict()
    assert exported["evaluations"]["test_accuracy"] == [None, None, None]
    assert all(isinstance(v, float) for v in exported["evaluations"]["test_loss"])
    json.dumps(exported, allow_nan=False)


def test_no_test_rows_gives_nan_test_metrics() -> None:
    base = classification_data(4)
    data = FederatedDataset(
        train_features=base.train_features,
        train_targets=base.train_targets,
        train_indptr=base.train_indptr,
        test_features=base.train_features[:0],
        test_targets=base.train_targets[:0],
        test_indptr=np.zeros(base.num_clients + 1, dtype=np.int64),
        num_classes=base.num_classes,
    )
    history = simulate(data, spec_for("softmax", data), [RunSpec(MDSampler())], TrainingConfig(rounds=1))[0].history
    assert np.all(np.isnan(history.test_loss))
    assert np.all(np.isnan(history.test_accuracy))
    assert np.all(np.isfinite(history.train_loss))
    json.dumps(history.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    "sampler",
    [MDSampler(), UniformSampler(), PoissonSampler(capped=True)],
    ids=["md", "uniform", "poisson"],
)
def test_selection_statistics_match_the_samplers_draws(sampler: Sampler[Any]) -> None:
    """distinct_clients, distinct_labels and weight_sum of round t are those of the selection drawn from
    the stream (seed, SAMPLING, t)."""
    data = classification_data(5, num_classes=8)
    rounds, seed, m = 8, 6, 5
    config = TrainingConfig(rounds=rounds, num_sampled=m, local_steps=1, batch_size=4)
    history = simulate(data, spec_for("softmax", data), [RunSpec(sampler, seed=seed)], config)[0].history
    state = sampler.init(data.federation(), m)
    label_sets = data.label_sets()
    expected_clients, expected_labels, expected_weights = [], [], []
    for t in range(rounds):
        selection = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t))
        clients, _ = selection.distinct()
        expected_clients.append(clients.size)
        expected_labels.append(len(set().union(*(label_sets[c].tolist() for c in clients))))
        expected_weights.append(selection.weights.sum())
    np.testing.assert_array_equal(history.distinct_clients, expected_clients)
    np.testing.assert_array_equal(history.distinct_labels, expected_labels)
    np.testing.assert_allclose(history.weight_sum, expected_weights, rtol=1e-12)
    if not isinstance(sampler, UniformSampler):  # MD's repeated draws and Poisson's random size vary the count
        assert len(set(expected_clients)) > 1


@pytest.mark.parametrize(
    ("rounds", "eval_every", "expected"),
    [(7, 3, [0, 3, 6, 7]), (6, 3, [0, 3, 6]), (4, 10, [0, 4]), (3, 1, [0, 1, 2, 3])],
)
def test_eval_rounds_follow_eval_every_and_include_the_last_round(
    rounds: int, eval_every: int, expected: list[int]
) -> None:
    data = classification_data(6)
    spec = spec_for("softmax", data)
    common: dict[str, Any] = {"rounds": rounds, "num_sampled": 3, "local_steps": 1, "batch_size": 4}
    sparse = simulate(data, spec, [RunSpec(MDSampler())], TrainingConfig(eval_every=eval_every, **common))[0]
    dense = simulate(data, spec, [RunSpec(MDSampler())], TrainingConfig(eval_every=1, **common))[0]
    history = sparse.history
    assert history.eval_rounds.tolist() == expected
    for values in (history.train_loss, history.test_loss, history.test_accuracy):
        assert values.shape == (len(expected),)
    # Evaluating less often changes nothing but which rounds are recorded.
    np.testing.assert_array_equal(history.train_loss, dense.history.train_loss[expected])
    assert history.num_rounds == rounds
    for name in ("distinct_clients", "distinct_labels", "weight_sum", "round_seconds", "local_lr"):
        assert getattr(history, name).shape == (rounds,), name
    assert np.all(history.round_seconds > 0)


def _history() -> History:
    data = classification_data(7)
    config = TrainingConfig(rounds=2, num_sampled=2, local_steps=1, batch_size=4)
    return simulate(data, spec_for("softmax", data), [RunSpec(MDSampler(), label="md-run")], config)[0].history


def test_history_arrays_are_read_only() -> None:
    history = _history()
    names = [
        "eval_rounds",
        "train_loss",
        "test_loss",
        "test_accuracy",
        "distinct_clients",
        "distinct_labels",
        "weight_sum",
        "round_seconds",
        "local_lr",
    ]
    for name in names:
        array = getattr(history, name)
        assert not array.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0
    with pytest.raises(AttributeError):
        history.train_loss = np.zeros(3)  # type: ignore[misc]


def test_to_dict_is_json_serialisable() -> None:
    history = _history()
    exported = json.loads(json.dumps(history.to_dict(), allow_nan=False))
    assert exported["label"] == "md-run"
    assert exported["sampler"] == "md"
    assert exported["seed"] == 0
    assert exported["num_rounds"] == 2
    assert exported["evaluations"]["round"] == [0, 1, 2]
    assert exported["evaluations"]["train_loss"] == pytest.approx(history.train_loss.tolist())
    assert exported["rounds"]["distinct_clients"] == history.distinct_clients.tolist()
    info = {"backend": "batched", "runs_batched": 1, "device": "cpu", "model": "softmax", "threads": 1}
    assert exported["info"] == info
