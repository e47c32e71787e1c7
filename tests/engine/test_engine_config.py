"""Configuration errors: one library error (FedsampleError, a ValueError) naming the offending parameter."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from engine_cases import classification_data, regression_data, spec_for

from fedsample.engine import FedProx, ModelSpec, RunSpec, ServerSGD, TrainingConfig, make_algorithm, simulate
from fedsample.errors import FedsampleError
from fedsample.samplers import MDSampler


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"rounds": 0}, "rounds"),
        ({"rounds": 2.0}, "rounds"),
        ({"rounds": True}, "rounds"),
        ({"num_sampled": 0}, "num_sampled"),
        ({"local_steps": 0}, "local_steps"),
        ({"batch_size": 0}, "batch_size"),
        ({"eval_every": 0}, "eval_every"),
        ({"local_lr": 0.0}, "local_lr"),
        ({"local_lr": -0.1}, "local_lr"),
        ({"local_lr": float("nan")}, "local_lr"),
        ({"lr_decay": 1.5}, "lr_decay"),
        ({"lr_decay": 0.0}, "lr_decay"),
        ({"backend": "gpu"}, "backend"),
        ({"backend": "vmap"}, "backend"),
        ({"importance": "equal"}, "importance"),
        ({"device": "tpu"}, "device"),
        ({"device": 0}, "device"),
    ],
    ids=lambda v: repr(v) if not isinstance(v, dict) else "-".join(f"{k}={v[k]!r}" for k in v),
)
def test_training_config_rejects_bad_values(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(FedsampleError, match=rf"'{parameter}' parameter of TrainingConfig") as info:
        TrainingConfig(**kwargs)
    assert info.value.parameter == parameter
    assert isinstance(info.value, ValueError)


def test_training_config_accepts_boundary_values() -> None:
    config = TrainingConfig(rounds=1, num_sampled=1, local_steps=1, batch_size=1, eval_every=1, lr_decay=1.0)
    assert config.backend == "batched"
    assert TrainingConfig(device="cuda:1").device == "cuda:1"  # checked against the machine by simulate


@pytest.mark.parametrize(
    ("build", "parameter"),
    [
        (lambda: FedProx(mu=-1.0), "mu"),
        (lambda: ServerSGD(lr=0.0), "lr"),
        (lambda: make_algorithm("scaffold-typo"), "algorithm"),
        (lambda: make_algorithm("fedavg", mu=0.1), "algorithm"),
    ],
    ids=["fedprox-negative-mu", "server-zero-lr", "unknown-algorithm", "foreign-parameter"],
)
def test_algorithm_and_server_parameters_are_checked(build: Any, parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        build()
    assert info.value.parameter == parameter


def test_make_algorithm_builds_each_algorithm() -> None:
    assert make_algorithm("fedprox", mu=0.3).proximal_mu == 0.3
    assert make_algorithm("minibatch-sgd").num_local_steps(10) == 1
    assert make_algorithm("fedavg").num_local_steps(10) == 10


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is available here")
def test_simulate_rejects_cuda_without_a_cuda_device() -> None:
    data = classification_data(0)
    with pytest.raises(FedsampleError, match="'device'") as info:
        simulate(data, spec_for("softmax", data), [RunSpec(MDSampler())], TrainingConfig(rounds=1, device="cuda"))
    assert info.value.parameter == "device"


def test_simulate_rejects_an_empty_run_list() -> None:
    data = classification_data(0)
    with pytest.raises(FedsampleError, match="'runs' parameter of simulate") as info:
        simulate(data, spec_for("softmax", data), [], TrainingConfig(rounds=1))
    assert info.value.parameter == "runs"


@pytest.mark.parametrize(
    ("data", "spec"),
    [
        (classification_data(0), ModelSpec("linear", (6,), 1)),
        (regression_data(0), ModelSpec("softmax", (5,), 3)),
    ],
    ids=["regression-model-on-classification-data", "classifier-on-regression-data"],
)
def test_simulate_rejects_a_model_for_the_wrong_task(data: Any, spec: ModelSpec) -> None:
    with pytest.raises(FedsampleError, match="'model' parameter of simulate") as info:
        simulate(data, spec, [RunSpec(MDSampler())], TrainingConfig(rounds=1))
    assert info.value.parameter == "model"
