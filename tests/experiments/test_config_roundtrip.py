"""Resolved configs: ``config_to_dict`` / ``config_to_toml`` give back the same config, for any valid one."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedsample.engine.registry import MAX_HIDDEN
from fedsample.experiments.config import (
    ExperimentConfig,
    config_from_dict,
    config_to_dict,
    load_config,
)
from fedsample.experiments.config.toml_writer import config_to_toml, write_config
from fedsample.federation import BUILTIN_FEDERATIONS
from fedsample.samplers.adaptive.osmd import MIN_ALPHA
from fedsample.samplers.schemes.fedsampling import MIN_PROBABILITY


def assert_round_trips(cfg: ExperimentConfig) -> None:
    text = config_to_toml(cfg)
    assert config_from_dict(tomllib.loads(text)) == cfg
    assert config_from_dict(config_to_dict(cfg)) == cfg
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg), allow_nan=False))) == cfg
    assert config_to_toml(config_from_dict(tomllib.loads(text))) == text


FULL = {
    "name": "Full_config-1.0",
    "description": 'quotes " and \\ backslashes, tab\there\nnew line, \x00\x1f\x7f controls, unicode é ∑ 🙂',
    "seeds": [0, 5, 2**63 - 1],
    "federation": {"dataset": "digits", "partition": "iid", "num_clients": 7, "sizes": "unbalanced", "seed": 3},
    "model": {"kind": "softmax", "hidden": 8, "bias": False, "zero_init": True},
    "training": {"rounds": 3, "local_lr": 1e-05, "lr_decay": 0.99, "importance": "uniform", "device": "cuda:1"},
    "algorithm": {"name": "fedprox", "mu": 1e16},
    "server": {"name": "fedadam", "lr": 0.003, "tau": 1e-300, "bias_correction": True},
    "samplers": [
        {"name": "osmd", "label": 'OSMD "eta" = 1e-3', "eta": 1e-3},
        {"name": "adaptive-osmd", "horizon": 100},
        {"name": "clustered", "rows": [[0.5, 0.5], [1, 0]]},
        {"name": "fedsampling", "probability": 0.5, "estimate": "cumulative"},
    ],
    "baselines": {"centralized": True},
    "report": {"target_accuracy": 0.0, "target_loss": 0.25, "rolling_window": 1},
    "run": {"checkpoint_every": 0},
}


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"name": "x", "samplers": [{"name": "md"}]}, id="minimal"),
        pytest.param(FULL, id="full"),
        pytest.param(
            {"name": "regression", "federation": {"dataset": "osmd-linear"}, "samplers": [{"name": "md"}] * 3},
            id="regression",
        ),
    ],
)
def test_examples_round_trip(data: dict[str, Any]) -> None:
    assert_round_trips(config_from_dict(data))


def test_resolved_dict_has_every_default_in_a_fixed_order() -> None:
    resolved = config_to_dict(config_from_dict({"name": "x", "samplers": [{"name": "osmd"}]}))
    assert list(resolved) == [
        "name",
        "description",
        "seeds",
        "federation",
        "model",
        "training",
        "algorithm",
        "server",
        "samplers",
        "baselines",
        "report",
        "run",
    ]
    assert resolved["training"] == {
        "rounds": 50,
        "num_sampled": 5,
        "local_steps": 10,
        "batch_size": 20,
        "local_lr": 0.1,
        "lr_decay": 1.0,
        "eval_every": 1,
        "importance": "size",
        "backend": "batched",
        "device": "cpu",
        "max_rejected_rounds": 20,
        "threads": "auto",
    }
    # hyperparameters sorted by name after name and label
    assert list(resolved["samplers"][0]) == ["name", "label", "alpha", "eta", "feedback", "replace"]
    assert resolved["server"] == {"name": "sgd", "lr": 1.0}
    assert resolved["baselines"] == {"centralized": False}
    assert resolved["report"] == {"rolling_window": 10, "measure_bias": False}  # None targets are left out


def test_none_values_are_left_out_and_come_back_as_none() -> None:
    cfg = config_from_dict({"name": "x", "samplers": [{"name": "vrb"}]})
    text = config_to_toml(cfg)
    keys = {line.split(" = ", 1)[0] for line in text.splitlines() if " = " in line}
    for key in ("target_accuracy", "target_loss", "bias", "zero_init", "regularizer", "sizes", "path"):
        assert key not in keys
    back = config_from_dict(tomllib.loads(text))
    assert back.report.target_accuracy is None
    assert back.model.bias is None
    assert back.federation.path is None
    assert back == cfg


def test_toml_text_keeps_ints_and_floats_apart() -> None:
    cfg = config_from_dict({"name": "x", "training": {"local_lr": 1, "lr_decay": 1}, "samplers": [{"name": "md"}]})
    parsed = tomllib.loads(config_to_toml(cfg))
    assert parsed["training"]["local_lr"] == 1.0
    assert type(parsed["training"]["local_lr"]) is float
    assert type(parsed["training"]["rounds"]) is int
    assert "local_lr = 1.0\n" in config_to_toml(cfg)


@pytest.mark.parametrize("value", [0.1, 1.0, 1e-05, 3e-300, 5e-324, 1e16, 1.5e300, 123456.789, 1.7976931348623157e308])
def test_floats_are_written_exactly(value: float) -> None:
    # federation.alpha takes any positive float (training.local_lr stops at float32's largest).
    cfg = config_from_dict({"name": "x", "federation": {"alpha": value}, "samplers": [{"name": "md"}]})
    parsed = tomllib.loads(config_to_toml(cfg))
    assert parsed["federation"]["alpha"] == value
    assert type(parsed["federation"]["alpha"]) is float


def test_text_does_not_depend_on_the_order_of_hyperparameters() -> None:
    cfg = config_from_dict({"name": "x", "samplers": [{"name": "osmd"}]})
    entry = cfg.samplers[0]
    reordered = dataclasses.replace(entry, params=dict(reversed(list(entry.params.items()))))
    assert config_to_toml(dataclasses.replace(cfg, samplers=(reordered,))) == config_to_toml(cfg)


def test_write_config_then_load_config(tmp_path: Path) -> None:
    cfg = config_from_dict(FULL)
    path = tmp_path / "resolved.toml"
    write_config(cfg, path)
    assert load_config(path) == cfg
    assert [p.name for p in tmp_path.iterdir()] == ["resolved.toml"]  # no temporary file left


# ----------------------------------------------------------------------------------------------
# Generated configs
# ----------------------------------------------------------------------------------------------

BIG_INT = 2**63 - 1
# The bounds the library sets on a hidden width and on OSMD's alpha (issue 32 item 10).
# Step sizes enter float32 arithmetic: the engine refuses them above float32's largest value.
FLOAT32_MAX = 3.4028234663852886e38
positive = st.floats(min_value=1e-300, max_value=FLOAT32_MAX)
unit = st.floats(min_value=0, max_value=1)
below_one = st.floats(min_value=0, max_value=0.99)
single_line = st.text(min_size=1, max_size=12).filter(
    lambda s: s.strip() != "" and s != "centralized" and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in s)
)

federations = st.one_of(
    st.fixed_dictionaries(
        {"dataset": st.sampled_from(["digits", "mnist1d"])},
        optional={
            "partition": st.sampled_from(["iid", "dirichlet", "one-label", "lognormal", "osmd-skewed"]),
            "num_clients": st.integers(1, 10**6),
            "alpha": positive,
            "sizes": st.sampled_from(sorted(BUILTIN_FEDERATIONS)),
            "test_fraction": st.floats(0, 1, exclude_max=True),
            "num_samples": st.integers(10, BIG_INT),
            "lognormal_sigma": st.floats(0, 1e300),
            "path": st.text(max_size=20),
            "seed": st.integers(0, BIG_INT),
        },
    ),
    st.fixed_dictionaries(
        {"dataset": st.just("osmd-linear")},
        optional={"num_clients": st.integers(1, 10**6), "sigma": st.floats(0, 1e300), "seed": st.integers(0, 9)},
    ),
)
models = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["auto", "softmax", "mlp", "cnn", "lstm"]),
        "hidden": st.integers(1, MAX_HIDDEN),
        "bias": st.booleans(),
        "zero_init": st.booleans(),
    },
)
trainings = st.fixed_dictionaries(
    {},
    optional={
        "rounds": st.integers(1, BIG_INT),
        "num_sampled": st.integers(1, 10**6),
        "local_steps": st.integers(1, 100),
        "batch_size": st.integers(1, 1000),
        "local_lr": st.one_of(positive, st.integers(1, 10)),
        "lr_decay": st.floats(0, 1, exclude_min=True),
        "eval_every": st.integers(1, 100),
        "importance": st.sampled_from(["size", "uniform"]),
        "backend": st.sampled_from(["batched", "sequential"]),
        "device": st.sampled_from(["cpu", "cuda", "cuda:0", "cuda:12"]),
    },
)
algorithms = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(["fedavg", "minibatch-sgd", "scaffold"])}),
    st.fixed_dictionaries({"name": st.just("fedprox")}, optional={"mu": st.floats(0, FLOAT32_MAX)}),
)
servers = st.one_of(
    st.fixed_dictionaries({"name": st.just("sgd")}, optional={"lr": positive}),
    st.fixed_dictionaries(
        {"name": st.just("fedavgm")}, optional={"lr": positive, "beta": below_one, "nesterov": st.booleans()}
    ),
    st.fixed_dictionaries(
        {"name": st.sampled_from(["fedadam", "fedyogi"])},
        optional={"lr": positive, "beta1": below_one, "beta2": below_one, "tau": positive, "adaptive": st.booleans()},
    ),
)
sampler_tables = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(["md", "uniform", "clustered-size", "full", "binomial"])}),
    st.fixed_dictionaries({"name": st.just("poisson")}, optional={"capped": st.booleans()}),
    st.fixed_dictionaries(
        {"name": st.just("osmd")},
        optional={"eta": st.floats(min_value=1e-300, max_value=1e12), "alpha": st.floats(MIN_ALPHA, 1)},
    ),
    st.fixed_dictionaries(
        {"name": st.just("fedsampling")},
        optional={"target_samples": st.integers(1, 10**9), "probability": st.floats(MIN_PROBABILITY, 1)},
    ),
)
labelled_samplers = st.tuples(sampler_tables, st.one_of(st.none(), single_line)).map(
    lambda pair: pair[0] if pair[1] is None else {**pair[0], "label": pair[1]}
)
configs = st.fixed_dictionaries(
    {
        "name": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True),
        "samplers": st.lists(labelled_samplers, min_size=1, max_size=4, unique_by=lambda t: t.get("label", id(t))),
    },
    optional={
        "description": st.text(max_size=30),
        "seeds": st.one_of(st.integers(1, 5), st.lists(st.integers(0, BIG_INT), min_size=1, max_size=4, unique=True)),
        "federation": federations,
        "training": trainings,
        "algorithm": algorithms,
        "server": servers,
        "baselines": st.fixed_dictionaries({}, optional={"centralized": st.booleans()}),
        "report": st.fixed_dictionaries(
            {},
            optional={
                "target_accuracy": unit,
                "target_loss": st.floats(0, 1e300),
                "rolling_window": st.integers(1, 1000),
            },
        ),
        "run": st.fixed_dictionaries({}, optional={"checkpoint_every": st.integers(0, BIG_INT)}),
    },
)


@given(configs, models)
def test_generated_configs_round_trip(data: dict[str, Any], model: dict[str, Any]) -> None:
    if data.get("federation", {}).get("dataset") != "osmd-linear":
        data = {**data, "model": model}
    assert_round_trips(config_from_dict(data))
