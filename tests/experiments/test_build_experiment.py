"""From configs to engine objects (``fedsample.experiments.build``)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from fedsample import FedsampleError
from fedsample.data.builders import build_federation
from fedsample.engine import FedProx, ServerMomentum, TrainingConfig, simulate
from fedsample.experiments.build import build_experiment, resolve_model_kind
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict


def tiny(**sections: Any) -> ExperimentConfig:
    """A fast config: six digits clients, two rounds."""
    data = {
        "name": "tiny",
        "seeds": [3, 1],
        "federation": {"num_clients": 6, "seed": 4},
        "training": {"rounds": 2, "num_sampled": 2, "local_steps": 1, "batch_size": 5},
        "samplers": [{"name": "md"}, {"name": "osmd", "eta": 0.5}, {"name": "md", "label": "MD again"}],
    }
    return config_from_dict(data | sections)


def test_runs_are_samplers_major_then_seeds_with_labels() -> None:
    experiment = build_experiment(tiny())
    assert [(run.sampler.name, run.seed, run.label) for run in experiment.runs] == [
        ("md", 3, "md"),
        ("md", 1, "md"),
        ("osmd", 3, "osmd"),
        ("osmd", 1, "osmd"),
        ("md", 3, "MD again"),
        ("md", 1, "MD again"),
    ]
    assert experiment.runs[2].sampler.get_params()["eta"] == 0.5
    assert experiment.data.num_clients == 6
    assert experiment.init_seed == 4
    assert experiment.config == tiny()


def test_federation_is_the_configured_one() -> None:
    experiment = build_experiment(tiny())
    expected = build_federation(experiment.config.federation)
    np.testing.assert_array_equal(experiment.data.train_indptr, expected.train_indptr)
    np.testing.assert_array_equal(experiment.data.train_targets, expected.train_targets)


def test_training_config_carries_every_setting() -> None:
    cfg = tiny(
        algorithm={"name": "fedprox", "mu": 0.2},
        server={"name": "fedavgm", "beta": 0.5},
        training={"rounds": 3, "num_sampled": 2, "local_lr": 0.05, "importance": "uniform", "backend": "sequential"},
    )
    training = build_experiment(cfg).training
    assert training == TrainingConfig(
        rounds=3,
        num_sampled=2,
        local_steps=10,
        batch_size=20,
        local_lr=0.05,
        lr_decay=1.0,
        eval_every=1,
        importance="uniform",
        algorithm=FedProx(mu=0.2),
        server=ServerMomentum(lr=1.0, beta=0.5),
        backend="sequential",
        device="cpu",
    )


def test_model_follows_the_data_like_fedsample_run() -> None:
    digits = build_experiment(tiny())
    assert (digits.model.kind, digits.model.bias, digits.model.zero_init) == ("mlp", True, False)
    assert digits.model.input_shape == digits.data.sample_shape
    assert digits.model.output_dim == 10
    regression = build_experiment(tiny(federation={"dataset": "osmd-linear", "num_clients": 8}))
    assert regression.config.federation.partition == "natural"
    assert (regression.model.kind, regression.model.bias, regression.model.zero_init) == ("linear", False, True)
    assert regression.model.output_dim == 1
    explicit = build_experiment(tiny(model={"kind": "softmax", "hidden": 7, "bias": False, "zero_init": True}))
    assert (explicit.model.kind, explicit.model.bias, explicit.model.zero_init) == ("softmax", False, True)
    assert explicit.model.hidden == 7


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (SimpleNamespace(task="regression", sample_shape=(5,), train_features=np.zeros((1, 5))), "linear"),
        (
            SimpleNamespace(task="classification", sample_shape=(3, 32, 32), train_features=np.zeros((1, 3, 32, 32))),
            "cnn",
        ),
        (
            SimpleNamespace(
                task="classification", sample_shape=(80,), train_features=np.zeros((1, 80), dtype=np.int64)
            ),
            "lstm",
        ),
        (SimpleNamespace(task="classification", sample_shape=(64,), train_features=np.zeros((1, 64))), "mlp"),
    ],
    ids=["regression", "images", "characters", "vectors"],
)
def test_auto_model_kind_is_decided_like_fedsample_run(data: Any, expected: str) -> None:
    assert resolve_model_kind("auto", data) == expected
    assert resolve_model_kind("softmax", data) == "softmax"


def test_sampler_that_does_not_suit_the_data_fails_at_build() -> None:
    cfg = tiny(samplers=[{"name": "md"}, {"name": "uniform", "label": "U"}], training={"num_sampled": 9})
    with pytest.raises(FedsampleError) as info:
        build_experiment(cfg)
    message = str(info.value)
    assert "'training.num_sampled'" in message
    assert "samplers[1] ('U')" in message
    assert "Got 9 instead" in message
    assert info.value.parameter == "training.num_sampled"


def test_model_that_does_not_suit_the_data_fails_at_build() -> None:
    with pytest.raises(FedsampleError) as info:
        build_experiment(tiny(model={"kind": "cnn"}))
    assert "'model.kind'" in str(info.value)
    assert "\n" not in str(info.value)


def test_federation_that_cannot_be_built_names_its_table() -> None:
    with pytest.raises(FedsampleError) as info:
        build_experiment(tiny(federation={"dataset": "digits", "partition": "one-label", "num_clients": 100_000}))
    assert "'federation" in str(info.value)


def test_hand_built_configs_are_validated() -> None:
    cfg = tiny()
    bad = dataclasses.replace(cfg, training=cfg.training.replace(rounds=0))
    with pytest.raises(FedsampleError, match=r"'training\.rounds' key of experiment 'tiny'"):
        build_experiment(bad)


def test_built_experiment_simulates() -> None:
    experiment = build_experiment(tiny())
    results = simulate(
        experiment.data, experiment.model, experiment.runs, experiment.training, init_seed=experiment.init_seed
    )
    assert len(results) == 6
    # same sampler and seed under two labels: identical runs
    np.testing.assert_array_equal(results[0].history.train_loss, results[4].history.train_loss)
    assert np.isfinite(results[2].history.train_loss).all()
