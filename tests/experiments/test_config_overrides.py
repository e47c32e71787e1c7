"""Overrides of configs (``apply_overrides``) and their command-line form (``parse_override``)."""

from __future__ import annotations

from typing import Any

import pytest

from fedsample import FedsampleError
from fedsample.experiments.config.overrides import apply_overrides, parse_override
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict, config_to_dict


@pytest.fixture
def cfg() -> ExperimentConfig:
    return config_from_dict(
        {
            "name": "base",
            "seeds": [0, 1],
            "algorithm": {"name": "fedprox", "mu": 0.5},
            "server": {"name": "sgd", "lr": 2.0},
            "samplers": [{"name": "md"}, {"name": "osmd", "label": "OSMD", "eta": 0.01}],
            "report": {"target_accuracy": 0.8},
        }
    )


def test_scalar_overrides(cfg: ExperimentConfig) -> None:
    new = apply_overrides(
        cfg,
        {"training.rounds": 7, "federation.num_clients": 12, "seeds": 3, "server.lr": 0.5, "samplers[1].eta": 1},
    )
    assert new.training.rounds == 7
    assert new.federation.num_clients == 12
    assert new.seeds == (0, 1, 2)
    assert new.server.params == {"lr": 0.5}
    assert new.samplers[1].params["eta"] == 1.0
    assert new.samplers[1].label == "OSMD"
    # everything else is kept, and the original is unchanged
    assert new.algorithm == cfg.algorithm
    assert cfg.training.rounds == 50


def test_no_overrides_give_the_same_config(cfg: ExperimentConfig) -> None:
    assert apply_overrides(cfg, {}) == cfg


@pytest.mark.parametrize(
    ("value", "names"),
    [
        (["uniform", "md"], ["uniform", "md"]),
        ("md,clustered-size, osmd", ["md", "clustered-size", "osmd"]),
        ("uniform", ["uniform"]),
        ([{"name": "osmd", "eta": 0.5}, "md"], ["osmd", "md"]),
    ],
)
def test_samplers_override_replaces_the_list(cfg: ExperimentConfig, value: object, names: list[str]) -> None:
    new = apply_overrides(cfg, {"samplers": value})
    assert [s.name for s in new.samplers] == names
    assert [s.label for s in new.samplers] == names


def test_none_restores_the_default(cfg: ExperimentConfig) -> None:
    assert apply_overrides(cfg, {"report.target_accuracy": None}).report.target_accuracy is None
    assert apply_overrides(cfg, {"server.lr": None}).server.params == {"lr": 1.0}


def test_changing_a_component_name_resets_its_hyperparameters(cfg: ExperimentConfig) -> None:
    assert apply_overrides(cfg, {"algorithm.name": "fedavg"}).algorithm.params == {}
    assert apply_overrides(cfg, {"server.name": "fedadam"}).server.params["lr"] == 0.1
    kept = apply_overrides(cfg, {"server.lr": 0.3, "server.name": "fedadam"})  # order does not matter
    assert kept.server.name == "fedadam"
    assert kept.server.params["lr"] == 0.3
    sampler = apply_overrides(cfg, {"samplers[1].name": "uniform"}).samplers[1]
    assert (sampler.name, sampler.label, sampler.params) == ("uniform", "uniform", {})


def test_changing_to_a_natural_dataset_resets_the_partition(cfg: ExperimentConfig) -> None:
    new = apply_overrides(cfg, {"federation.dataset": "osmd-linear"})
    assert new.federation.partition == "natural"
    back = apply_overrides(new, {"federation.dataset": "digits"})
    assert back.federation.partition == "dirichlet"
    iid = apply_overrides(new, {"federation.dataset": "mnist1d", "federation.partition": "iid"})
    assert iid.federation.partition == "iid"


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("training.rounds", 0, "Got 0 instead"),
        ("training.round", 3, "Did you mean 'training.rounds'?"),
        ("trainin.rounds", 3, "'trainin'"),
        ("seeds", [1, 1], "[1, 1]"),
        ("samplers", "md,nope", "'nope'"),
        ("samplers[1].eta", -1.0, "-1.0"),
        ("server.lr", "fast", "'fast'"),
    ],
)
def test_override_errors_are_the_validation_errors(cfg: ExperimentConfig, key: str, value: object, shown: str) -> None:
    with pytest.raises(FedsampleError) as info:
        apply_overrides(cfg, {key: value}, source="overrides")
    message = str(info.value)
    assert "\n" not in message
    assert "of overrides" in message
    assert shown in message
    # the same error as validating the edited dictionary directly
    data: dict[str, Any] = config_to_dict(cfg)
    section, _, name = key.rpartition(".")
    if section == "" and key == "samplers":
        data["samplers"] = [{"name": n} for n in str(value).split(",")]
    elif section.startswith("samplers["):
        data["samplers"][1][name] = value
    elif section:
        data.setdefault(section, {})[name] = value
    else:
        data[key] = value
    with pytest.raises(FedsampleError) as direct:
        config_from_dict(data, source="overrides")
    assert str(direct.value) == message


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("samplers[5].eta", "does not exist"),
        ("seeds.first", "not a table"),
        ("training..rounds", "not a dotted key"),
        ("a b", "not a dotted key"),
        ("samplers[0]", "not an index"),
    ],
)
def test_overrides_that_name_no_value(cfg: ExperimentConfig, key: str, reason: str) -> None:
    with pytest.raises(FedsampleError) as info:
        apply_overrides(cfg, {key: 1})
    assert reason in str(info.value)
    assert repr(key) in str(info.value)
    assert info.value.parameter == key


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("training.rounds=3", ("training.rounds", 3)),
        ("training.local_lr=0.1", ("training.local_lr", 0.1)),
        ("server.lr=1e-3", ("server.lr", 0.001)),
        ("baselines.centralized=true", ("baselines.centralized", True)),
        ('description="a = b"', ("description", "a = b")),
        ("seeds=[0, 1]", ("seeds", [0, 1])),
        (" seeds = 4 ", ("seeds", 4)),
        ("samplers=md", ("samplers", "md")),
        ("samplers=md,osmd", ("samplers", "md,osmd")),
        ("training.device=cuda:0", ("training.device", "cuda:0")),
        ("name=2024-01-01", ("name", "2024-01-01")),
        ("description=1\nname = 2", ("description", "1\nname = 2")),
        ("description=", ("description", "")),
        ("samplers[1].eta=0.5", ("samplers[1].eta", 0.5)),
    ],
)
def test_parse_override(text: str, expected: tuple[str, object]) -> None:
    key, value = parse_override(text)
    assert (key, value) == expected
    assert type(value) is type(expected[1])


@pytest.mark.parametrize("text", ["rounds", "=3", "a b=3", "training.=3", "x[a]=1"])
def test_parse_override_rejects_malformed_items(text: str) -> None:
    with pytest.raises(FedsampleError) as info:
        parse_override(text)
    message = str(info.value)
    assert "'--set'" in message
    assert repr(text) in message
    assert "\n" not in message
    assert info.value.parameter == "--set"


def test_parsed_overrides_apply(cfg: ExperimentConfig) -> None:
    items = ["training.rounds=4", "samplers=md,uniform", "seeds=[3, 4]", "training.device=cuda:0"]
    new = apply_overrides(cfg, dict(parse_override(item) for item in items))
    assert (new.training.rounds, new.seeds, new.training.device) == (4, (3, 4), "cuda:0")
    assert [s.name for s in new.samplers] == ["md", "uniform"]
