"""SCAFFOLD (Karimireddy et al. 2020, Alg. 1, option II): the rounds equal a float64 reference, both backends and
cross-run batching agree, the server variate stays the weighted mean of the client variates, and on a quadratic
federation where FedAvg's fixed point drifts from the global optimum SCAFFOLD converges to it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import RecordingSampler, classification_data, regression_data, spec_for

from fedsample.data import FederatedDataset
from fedsample.engine import (
    ALGORITHMS,
    FedAvg,
    LocalAlgorithm,
    ModelSpec,
    RunResult,
    RunSpec,
    Scaffold,
    ServerSGD,
    TrainingConfig,
    draw_client_batches,
    initial_params,
    make_algorithm,
    simulate,
)
from fedsample.engine.algorithms import ClientFinal
from fedsample.errors import FedsampleError
from fedsample.federation import ImportanceMode
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import FullSampler, MDSampler, OSMDSampler, PoissonSampler, UniformSampler

LINEAR = ModelSpec("linear", (5,), 1)


def _flat(params: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([params["layers.0.weight"].ravel(), params["layers.0.bias"]]).astype(float)


def test_scaffold_is_registered() -> None:
    assert ALGORITHMS["scaffold"] is Scaffold
    assert make_algorithm("scaffold") == Scaffold()
    assert Scaffold().num_local_steps(7) == 7
    assert Scaffold().proximal_mu == 0.0


def test_rounds_follow_algorithm_1_option_ii() -> None:
    """Four rounds of MD sampling (repeated draws summed), mini-batches, lr decay and eta_g = 1.2 equal a float64
    hand-written SCAFFOLD: local steps with c - c_i, c_i+ = c_i - c + (theta - theta_i) / (N eta_l),
    c += sum_{i in S} p_i (c_i+ - c_i) with the run's importances p (here n_i / M), which keeps
    c = sum_i p_i c_i."""
    data = regression_data(1)
    config = TrainingConfig(
        rounds=4,
        num_sampled=4,
        local_steps=3,
        batch_size=6,
        local_lr=0.05,
        lr_decay=0.9,
        algorithm=Scaffold(),
        server=ServerSGD(lr=1.2),
    )
    sampler, seed = MDSampler(), 7
    result = simulate(data, LINEAR, [RunSpec(sampler, seed=seed)], config, init_seed=3)[0]

    theta = _flat({n: v.numpy() for n, v in initial_params(LINEAR, 3).items()})
    x = np.hstack([np.asarray(data.train_features, dtype=float), np.ones((data.train_features.shape[0], 1))])
    y = np.asarray(data.train_targets, dtype=float)
    offsets, n = np.asarray(data.train_indptr), data.num_clients
    c, c_clients = np.zeros_like(theta), np.zeros((n, theta.size))
    state = sampler.init(data.federation(), config.num_sampled)
    importances = data.federation(importance=config.importance).importances
    for t in range(config.rounds):
        lr = 0.05 * 0.9**t
        clients, weights = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t)).distinct()
        delta, c_change = np.zeros_like(theta), np.zeros_like(theta)
        for client, weight in zip(clients, weights, strict=True):
            size = int(offsets[client + 1] - offsets[client])
            local = theta.copy()
            batches = draw_client_batches(stream_rng(seed, Stream.TRAINING, t, int(client)), size, 3, 6)
            for rows in offsets[client] + batches:
                gradient = 2.0 * x[rows].T @ (x[rows] @ local - y[rows]) / rows.size
                local = local - lr * (gradient + c - c_clients[client])
            new = c_clients[client] - c + (theta - local) / (3 * lr)
            c_change += (new - c_clients[client]) * importances[client]
            c_clients[client] = new
            delta += weight * (local - theta)
        theta, c = theta + 1.2 * delta, c + c_change
    np.testing.assert_allclose(_flat(result.params), theta, rtol=1e-5, atol=1e-6)
    fedavg = dataclasses.replace(config, algorithm=FedAvg())
    plain = simulate(data, LINEAR, [RunSpec(sampler, seed=seed)], fedavg, init_seed=3)[0]
    assert not np.allclose(_flat(plain.params), theta, rtol=1e-3)  # the corrections mattered


def _assert_close(first: RunResult, second: RunResult, *, rtol: float, atol: float) -> None:
    for name in first.params:
        np.testing.assert_allclose(first.params[name], second.params[name], rtol=rtol, atol=atol, err_msg=name)
    np.testing.assert_allclose(first.history.train_loss, second.history.train_loss, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", ["softmax", "mlp", "cnn"])
def test_backends_agree(kind: str) -> None:
    """Batched and sequential backends: the same global model after four rounds (three for the CNN) to float32
    tolerance; the control variates of rounds 2+ make the local steps differ from FedAvg's."""
    if kind == "cnn":
        data = classification_data(2, sizes=(5, 9, 3, 7), sample_shape=(1, 30, 30), num_classes=3, test_per_client=1)
    else:
        data = classification_data(2)
    spec = spec_for(kind, data)
    common: dict[str, Any] = {
        "rounds": 3 if kind == "cnn" else 4,
        "num_sampled": 3,
        "local_steps": 3,
        "batch_size": 6,
        "local_lr": 0.1,
        "lr_decay": 0.8,
        "algorithm": Scaffold(),
    }
    runs = [RunSpec(MDSampler(), seed=3)]
    batched = simulate(data, spec, runs, TrainingConfig(backend="batched", **common), init_seed=1)[0]
    sequential = simulate(data, spec, runs, TrainingConfig(backend="sequential", **common), init_seed=1)[0]
    _assert_close(batched, sequential, rtol=1e-4, atol=1e-6)
    fedavg = simulate(data, spec, runs, TrainingConfig(**{**common, "algorithm": FedAvg()}), init_seed=1)[0]
    assert any(not np.allclose(fedavg.params[n], batched.params[n], rtol=1e-3) for n in batched.params)


def test_runs_batched_together_keep_their_own_variates() -> None:
    """Three runs in one batch = one by one: c and c_i are per run."""
    data = regression_data(3)
    config = TrainingConfig(rounds=5, num_sampled=3, local_steps=3, batch_size=6, local_lr=0.05, algorithm=Scaffold())
    runs = [RunSpec(MDSampler(), seed=1), RunSpec(UniformSampler(), seed=2), RunSpec(PoissonSampler(), seed=3)]
    together = simulate(data, LINEAR, runs, config, init_seed=2, batch_runs=True)
    apart = simulate(data, LINEAR, runs, config, init_seed=2, batch_runs=False)
    for a, b in zip(together, apart, strict=True):
        _assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("importances", [None, np.array([0.1, 0.2, 0.3, 0.4])], ids=["one-over-n", "importances"])
def test_server_variate_stays_the_weighted_mean_of_client_variates(importances: np.ndarray | None) -> None:
    """After rounds touching different clients of two runs, c = sum_i q_i c_i per run (q_i = p_i, or 1 / n), and the
    corrections are c - c_i."""
    algorithm = Scaffold()
    template = {"w": torch.zeros(2, 3, 2), "b": torch.zeros(2, 3)}
    state = algorithm.init_state(2, 4, template, importances=importances)
    assert state.clients["w"].shape == (2, 4, 3, 2)
    generator = torch.Generator().manual_seed(0)
    for run_of_slot, clients in [([0, 0, 1], [1, 3, 0]), ([0, 1, 1], [1, 2, 3]), ([1], [0])]:
        slots, ids = np.array(run_of_slot), np.array(clients)
        updates = {n: torch.randn(slots.size, *v.shape[1:], generator=generator) for n, v in template.items()}
        weights = torch.ones(slots.size)
        final = ClientFinal(run_of_slot=slots, clients=ids, updates=updates, local_lr=0.1, steps=2, weights=weights)
        state = algorithm.after_round(state, final)
    q = torch.full((4,), 0.25) if importances is None else torch.as_tensor(importances, dtype=torch.float32)
    for n in template:
        expected = torch.einsum("i,ri...->r...", q, state.clients[n])
        torch.testing.assert_close(state.server[n], expected)
        assert state.server[n].abs().sum() > 0
    corrections = algorithm.corrections(state, np.array([1, 0]), np.array([2, 2]))
    torch.testing.assert_close(corrections["b"], state.server["b"][[1, 0]] - state.clients["b"][[1, 0], [2, 2]])


def test_init_state_checks_the_importances() -> None:
    with pytest.raises(FedsampleError) as info:
        Scaffold().init_state(1, 3, {"w": torch.zeros(1, 2)}, importances=np.array([0.5, 0.5]))
    assert info.value.parameter == "importances"


# --- client drift -----------------------------------------------------------------------------------

DRIFT_SIZES = (10, 25, 15, 40, 8, 30)


def _drift_data(seed: int) -> FederatedDataset:
    """Noise-free linear clients y = x . w_i + b_i whose optima (w_i, b_i) and feature scales (Hessians) differ, so
    FedAvg with several local steps has a fixed point away from the global least-squares solution."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=3)
    features, targets = [], []
    for size in DRIFT_SIZES:
        x = rng.normal(size=(size, 3)) * rng.uniform(0.2, 2.0, size=3)
        features.append(x)
        targets.append(x @ (w + rng.normal(size=3)) + rng.normal())
    x = np.concatenate(features).astype(np.float32)
    return FederatedDataset(
        train_features=x,
        train_targets=np.concatenate(targets),
        train_indptr=np.concatenate([[0], np.cumsum(DRIFT_SIZES)]),
        test_features=x[:4],
        test_targets=np.concatenate(targets)[:4],
        test_indptr=[0, 4, 4, 4, 4, 4, 4],
        task="regression",
    )


def _global_optimum(data: FederatedDataset, importance: ImportanceMode) -> np.ndarray:
    """argmin sum_i p_i L_i: least squares with row weights p_i / n_i, in float64."""
    x = np.hstack([np.asarray(data.train_features, dtype=float), np.ones((data.train_features.shape[0], 1))])
    sizes = data.train_sizes()
    root = np.sqrt(np.repeat(data.federation(importance=importance).importances / sizes, sizes))
    return np.linalg.lstsq(x * root[:, None], np.asarray(data.train_targets) * root, rcond=None)[0]


@pytest.mark.parametrize(
    ("importance", "scaffold"),
    [("uniform", Scaffold()), ("size", Scaffold())],
    ids=["uniform-importance", "size-importance"],
)
def test_scaffold_converges_where_fedavg_drifts(importance: ImportanceMode, scaffold: LocalAlgorithm) -> None:
    """Ten full-batch local steps per round, 150 rounds, full participation and MD sampling (m = 3 of 6): FedAvg
    stays about 0.2-0.6 away from argmin sum_i p_i L_i, SCAFFOLD gets within 1e-4 (float32 round-off)."""
    data = _drift_data(0)
    model = ModelSpec("linear", (3,), 1)
    runs: list[RunSpec] = [RunSpec(FullSampler(), seed=1), RunSpec(MDSampler(), seed=2)]
    common: dict[str, Any] = {
        "rounds": 150,
        "num_sampled": 3,
        "local_steps": 10,
        "batch_size": 64,  # every client's whole data: deterministic local gradients
        "local_lr": 0.05,
        "eval_every": 150,
        "importance": importance,
    }
    optimum = _global_optimum(data, importance)
    fedavg = simulate(data, model, runs, TrainingConfig(algorithm=FedAvg(), **common))
    corrected = simulate(data, model, runs, TrainingConfig(algorithm=scaffold, **common))
    for plain, run in zip(fedavg, corrected, strict=True):
        drift = np.linalg.norm(_flat(plain.params) - optimum)
        error = np.linalg.norm(_flat(run.params) - optimum)
        assert drift > 0.1, plain.history.label
        assert error < 1e-4, run.history.label
        assert run.history.train_loss[-1] < plain.history.train_loss[-1]


def test_osmd_with_scaffold_learns_from_the_corrected_local_updates() -> None:
    """001's SCAFFOLD section: the sampler's feedback is the squared norm of the local update, and with
    SCAFFOLD that update includes the control-variate correction. Round 0 has zero variates (plain FedAvg
    steps); from round 1 the norms differ from FedAvg's, and OSMD's distribution moves off uniform."""
    data = _drift_data(0)
    model = ModelSpec("linear", (3,), 1)
    common: dict[str, Any] = {
        "rounds": 4,
        "num_sampled": 3,
        "local_steps": 5,
        "batch_size": 64,
        "local_lr": 0.05,
        "importance": "uniform",
    }
    fedavg, scaffold = (
        simulate(data, model, [RunSpec(RecordingSampler(), seed=4)], TrainingConfig(algorithm=algorithm, **common))[0]
        for algorithm in (FedAvg(), Scaffold())
    )
    plain, corrected = fedavg.sampler_state.feedback, scaffold.sampler_state.feedback
    for fb in corrected:
        assert fb.updates is not None
        assert fb.update_norms is not None
        np.testing.assert_allclose(fb.update_norms, np.linalg.norm(fb.updates, axis=1), rtol=1e-5)
    np.testing.assert_allclose(plain[0].update_norms, corrected[0].update_norms, rtol=1e-6)  # zero variates
    assert not np.allclose(plain[1].update_norms, corrected[1].update_norms, rtol=1e-3)
    (osmd,) = simulate(
        data, model, [RunSpec(OSMDSampler(eta=0.05), seed=4)], TrainingConfig(algorithm=Scaffold(), **common)
    )
    q = osmd.sampler_state.probabilities
    assert np.all(np.isfinite(q))
    assert q.sum() == pytest.approx(1.0)
    assert np.ptp(q) > 1e-3  # the feedback moved the distribution
