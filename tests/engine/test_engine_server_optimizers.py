"""Server optimizers (Reddi et al. 2021, Alg. 2; FedAvgM): each step equals a float64 numpy reference with
-delta as the pseudo-gradient, the non-adaptive settings are ServerSGD exactly, the state is per run, and bad
hyperparameters raise FedsampleError naming the parameter."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, regression_data, spec_for

from fedsample.engine import (
    SERVER_OPTIMIZERS,
    FedAdagrad,
    FedAdam,
    FedYogi,
    ModelSpec,
    RunSpec,
    ServerMomentum,
    ServerOptimizer,
    ServerSGD,
    TrainingConfig,
    initial_params,
    make_server_optimizer,
    simulate,
)
from fedsample.errors import FedsampleError
from fedsample.samplers import FullSampler, MDSampler, PoissonSampler, UniformSampler

LINEAR = ModelSpec("linear", (5,), 1)


class NumpyReference:
    """The optimizers' rules written out in float64 on flat arrays (one row per run)."""

    def __init__(self, optimizer: ServerOptimizer, shape: tuple[int, ...]) -> None:
        self.opt: Any = optimizer
        self.t = 0
        self.m = np.zeros(shape)
        self.v = np.full(shape, getattr(optimizer, "tau", 0.0) ** 2)

    def step(self, theta: np.ndarray, delta: np.ndarray) -> np.ndarray:
        opt, self.t = self.opt, self.t + 1
        if isinstance(opt, ServerSGD):
            return theta + opt.lr * delta
        if isinstance(opt, ServerMomentum):
            self.m = opt.beta * self.m + delta
            return theta + opt.lr * (delta + opt.beta * self.m if opt.nesterov else self.m)
        self.m = opt.beta1 * self.m + (1 - opt.beta1) * delta
        if isinstance(opt, FedAdam):
            self.v = opt.beta2 * self.v + (1 - opt.beta2) * delta**2
        elif isinstance(opt, FedYogi):
            self.v = self.v - (1 - opt.beta2) * delta**2 * np.sign(self.v - delta**2)
        else:
            self.v = self.v + delta**2
        m, v = self.m, self.v
        if opt.bias_correction:
            m = m / (1 - opt.beta1**self.t)
            if not isinstance(opt, FedAdagrad):
                v = v / (1 - opt.beta2**self.t)
        if not opt.adaptive:
            return theta + opt.lr * m
        return theta + opt.lr * m / (np.sqrt(v) + opt.tau)


OPTIMIZERS: dict[str, ServerOptimizer] = {
    "adam": FedAdam(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-2),
    "adam-bias-corrected": FedAdam(lr=0.05, beta1=0.8, beta2=0.9, tau=1e-3, bias_correction=True),
    "adam-not-adaptive": FedAdam(lr=0.5, beta1=0.7, adaptive=False),
    "yogi": FedYogi(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-2),
    "yogi-bias-corrected": FedYogi(lr=0.1, beta1=0.5, beta2=0.9, tau=1e-2, bias_correction=True),
    "adagrad": FedAdagrad(lr=0.1, beta1=0.9, tau=1e-2),
    "adagrad-bias-corrected": FedAdagrad(lr=0.1, beta1=0.5, tau=1e-1, bias_correction=True),
    "momentum": ServerMomentum(lr=0.8, beta=0.9),
    "nesterov": ServerMomentum(lr=0.8, beta=0.6, nesterov=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_matches_the_numpy_reference(name: str) -> None:
    """Six steps on two parameter tensors with three runs, a different delta per run and round (of varying
    magnitude, so Yogi's sign changes): the float64 reference to float32 tolerance."""
    optimizer = OPTIMIZERS[name]
    generator = torch.Generator().manual_seed(1)
    params = {"w": torch.randn(3, 4, 2, generator=generator), "b": torch.randn(3, 4, generator=generator)}
    state = optimizer.init(params)
    refs = {n: NumpyReference(optimizer, tuple(v.shape)) for n, v in params.items()}
    expected = {n: v.double().numpy() for n, v in params.items()}
    for t in range(6):
        delta = {n: (0.3 + t % 3) * torch.randn(v.shape, generator=generator) for n, v in params.items()}
        params, state = optimizer.step(params, delta, state)
        for n in params:
            expected[n] = refs[n].step(expected[n], delta[n].double().numpy())
            np.testing.assert_allclose(params[n].numpy(), expected[n], rtol=2e-5, atol=1e-6, err_msg=f"{n}, round {t}")


def _flat(params: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([params["layers.0.weight"].ravel(), params["layers.0.bias"]]).astype(float)


@pytest.mark.parametrize("name", ["adam", "yogi-bias-corrected", "adagrad", "nesterov"])
def test_simulated_rounds_match_the_numpy_reference(name: str) -> None:
    """Full participation, one full-batch local step: delta_t = -eta_l sum_i p_i grad L_i(theta_t) by hand, and
    the optimizer's float64 rule on it, for four rounds of simulate()."""
    optimizer = OPTIMIZERS[name]
    data = regression_data(3)
    config = TrainingConfig(rounds=4, num_sampled=1, local_steps=1, batch_size=50, local_lr=0.05, server=optimizer)
    result = simulate(data, LINEAR, [RunSpec(FullSampler())], config, init_seed=2)[0]
    start = initial_params(LINEAR, 2)
    theta = _flat({n: v.numpy() for n, v in start.items()})
    x = np.hstack([np.asarray(data.train_features, dtype=float), np.ones((data.train_features.shape[0], 1))])
    y = np.asarray(data.train_targets, dtype=float)
    offsets, p = np.asarray(data.train_indptr), data.federation().importances
    reference = NumpyReference(optimizer, theta.shape)
    for _ in range(4):
        gradient = sum(
            p[i] * 2.0 * x[lo:hi].T @ (x[lo:hi] @ theta - y[lo:hi]) / (hi - lo)
            for i, (lo, hi) in enumerate(itertools.pairwise(offsets))
        )
        theta = reference.step(theta, -0.05 * gradient)
    np.testing.assert_allclose(_flat(result.params), theta, rtol=1e-4, atol=1e-5)
    assert not np.allclose(theta, _flat({n: v.numpy() for n, v in start.items()}))


NOT_ADAPTIVE: dict[str, ServerOptimizer] = {
    "fedadam": FedAdam(lr=0.7, adaptive=False, beta1=0.0),
    "fedadam-bias-corrected": FedAdam(lr=0.7, adaptive=False, beta1=0.0, bias_correction=True),
    "fedyogi": FedYogi(lr=0.7, adaptive=False, beta1=0.0),
    "fedadagrad": FedAdagrad(lr=0.7, adaptive=False, beta1=0.0),
    "fedavgm": ServerMomentum(lr=0.7, beta=0.0),
    "fedavgm-nesterov": ServerMomentum(lr=0.7, beta=0.0, nesterov=True),
}


@pytest.mark.parametrize("name", list(NOT_ADAPTIVE))
def test_switching_adaptivity_off_gives_server_sgd_exactly(name: str) -> None:
    """adaptive=False with beta1 = 0 (momentum beta = 0) is ServerSGD(lr): identical parameters and metrics after
    four rounds of two runs with several local steps (a Poisson run has rounds without clients)."""
    data = classification_data(4)
    spec = spec_for("mlp", data)
    runs = [RunSpec(MDSampler(), seed=1), RunSpec(PoissonSampler(), seed=2)]
    common: dict[str, Any] = {"rounds": 4, "num_sampled": 3, "local_steps": 3, "batch_size": 5, "local_lr": 0.1}
    plain = simulate(data, spec, runs, TrainingConfig(server=ServerSGD(lr=0.7), **common))
    reduced = simulate(data, spec, runs, TrainingConfig(server=NOT_ADAPTIVE[name], **common))
    for a, b in zip(plain, reduced, strict=True):
        for n in a.params:
            np.testing.assert_array_equal(a.params[n], b.params[n], err_msg=n)
        np.testing.assert_array_equal(a.history.train_loss, b.history.train_loss)


@pytest.mark.parametrize("name", ["adam", "nesterov"])
def test_runs_batched_together_keep_their_own_state(name: str) -> None:
    """Three runs in one batch = the same runs one by one: the optimizer's moments are per run."""
    data = regression_data(5)
    config = TrainingConfig(
        rounds=5, num_sampled=3, local_steps=2, batch_size=6, local_lr=0.05, server=OPTIMIZERS[name]
    )
    runs = [RunSpec(MDSampler(), seed=1), RunSpec(UniformSampler(), seed=2), RunSpec(PoissonSampler(), seed=3)]
    together = simulate(data, LINEAR, runs, config, init_seed=1, batch_runs=True)
    apart = simulate(data, LINEAR, runs, config, init_seed=1, batch_runs=False)
    for a, b in zip(together, apart, strict=True):
        for n in a.params:
            np.testing.assert_allclose(a.params[n], b.params[n], rtol=1e-6, atol=1e-7, err_msg=n)
        np.testing.assert_allclose(a.history.train_loss, b.history.train_loss, rtol=1e-6)
    assert not np.allclose(together[0].params["layers.0.weight"], together[1].params["layers.0.weight"])


def test_state_has_a_leading_run_axis() -> None:
    params = {"w": torch.zeros(4, 3, 2), "b": torch.zeros(4, 3)}
    adam = FedAdam(tau=0.1).init(params)
    assert adam.steps == 0
    for n, v in params.items():
        assert adam.momentum[n].shape == v.shape
        torch.testing.assert_close(adam.second_moment[n], torch.full(v.shape, 0.01))
    assert FedAdam(adaptive=False).init(params).second_moment == {}
    assert ServerMomentum().init(params).momentum["w"].shape == (4, 3, 2)


@pytest.mark.parametrize(
    ("factory", "parameter", "value"),
    [
        (FedAdam, "lr", 0.0),
        (FedAdam, "beta1", 1.0),
        (FedAdam, "beta1", -0.1),
        (FedAdam, "beta2", 1.0),
        (FedAdam, "tau", 0.0),
        (FedAdam, "bias_correction", "yes"),
        (FedAdam, "adaptive", 1),
        (FedYogi, "beta2", float("nan")),
        (FedYogi, "tau", -1e-3),
        (FedAdagrad, "lr", -1.0),
        (FedAdagrad, "beta1", 2.0),
        (ServerMomentum, "lr", 0.0),
        (ServerMomentum, "beta", 1.0),
        (ServerMomentum, "nesterov", None),
    ],
)
def test_bad_hyperparameters_name_the_parameter(factory: Any, parameter: str, value: object) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}' parameter of {factory.__name__}") as info:
        factory(**{parameter: value})
    assert info.value.parameter == parameter


def test_the_registry_builds_each_optimizer() -> None:
    expected: dict[str, type[Any]] = {"sgd": ServerSGD, "fedavgm": ServerMomentum, "fedadam": FedAdam}
    expected |= {"fedyogi": FedYogi, "fedadagrad": FedAdagrad}
    assert expected == SERVER_OPTIMIZERS
    for name, cls in expected.items():
        optimizer = make_server_optimizer(name, lr=0.3)
        assert type(optimizer) is cls
        assert optimizer.name == name
        assert optimizer.lr == 0.3  # type: ignore[attr-defined]
    assert make_server_optimizer("fedyogi", beta2=0.9, tau=1e-4) == FedYogi(beta2=0.9, tau=1e-4)
    assert make_server_optimizer("fedavgm", nesterov=True) == ServerMomentum(nesterov=True)


@pytest.mark.parametrize(
    ("name", "params", "parameter"),
    [
        ("adam", {}, "server"),
        ("fedadagrad", {"beta2": 0.9}, "server"),
        ("sgd", {"beta": 0.5}, "server"),
        ("fedadam", {"tau": 0}, "tau"),
    ],
)
def test_the_registry_rejects_bad_input(name: str, params: dict[str, Any], parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        make_server_optimizer(name, **params)
    assert info.value.parameter == parameter
