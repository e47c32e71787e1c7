"""Experiment configs (``fedsample.experiments.config.reading``): loading, defaults, resolution and every error."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fedsample import FedsampleError
from fedsample.data.builders import FederationSpec
from fedsample.experiments.config.reading import (
    ComponentEntry,
    ExperimentConfig,
    ModelSection,
    ReportSection,
    RunSection,
    SamplerEntry,
    TrainingSection,
    config_from_dict,
    load_config,
)

EXAMPLE = textwrap.dedent(
    """\
    name = "digits-comparison"
    description = "MD vs clustered sampling on the embedded digits"
    seeds = [0, 1, 2]

    [federation]
    dataset = "digits"
    partition = "dirichlet"
    num_clients = 50
    alpha = 0.5

    [model]
    kind = "auto"
    hidden = 50

    [training]
    rounds = 50
    num_sampled = 5

    [algorithm]
    name = "fedavg"

    [server]
    name = "sgd"
    lr = 1.0

    [[samplers]]
    name = "md"
    [[samplers]]
    name = "clustered-size"
    label = "clustered (size)"
    [[samplers]]
    name = "osmd"
    eta = 0.001

    [baselines]
    centralized = false

    [report]
    target_accuracy = 0.8
    target_loss = 0.5
    rolling_window = 10

    [run]
    checkpoint_every = 10
    """
)


def minimal(**sections: Any) -> dict[str, Any]:
    """The smallest valid config, with top-level keys replaced by ``sections``."""
    return {"name": "x", "samplers": [{"name": "md"}]} | sections


def assert_error(data: dict[str, Any], key: str, shown: str | None, *, source: str = "config") -> FedsampleError:
    """``data`` fails with a one-line error naming ``key``, the source and the offending value."""
    with pytest.raises(FedsampleError) as info:
        config_from_dict(data, source=source)
    message = str(info.value)
    assert "\n" not in message
    assert f"{key!r}" in message, message
    assert source in message
    if shown is not None:
        assert shown in message, message
    assert info.value.parameter == key
    return info.value


def test_example_loads_with_resolved_values(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(EXAMPLE)
    cfg = load_config(path)
    assert cfg.name == "digits-comparison"
    assert cfg.seeds == (0, 1, 2)
    assert cfg.federation == FederationSpec(dataset="digits", partition="dirichlet", num_clients=50, alpha=0.5)
    assert [(s.name, s.label) for s in cfg.samplers] == [
        ("md", "md"),
        ("clustered-size", "clustered (size)"),
        ("osmd", "osmd"),
    ]
    # the sampler's own defaults are filled in
    assert cfg.samplers[2].params == {"replace": True, "feedback": "update", "alpha": 0.4, "eta": 0.001}
    assert cfg.report == ReportSection(target_accuracy=0.8, target_loss=0.5, rolling_window=10)
    assert cfg.run == RunSection(checkpoint_every=10)
    assert cfg.centralized is False


def test_minimal_config_takes_the_defaults() -> None:
    cfg = config_from_dict(minimal())
    assert cfg == ExperimentConfig(name="x", samplers=(SamplerEntry(name="md", label="md"),))
    assert cfg.seeds == (0,)
    assert cfg.description == ""
    assert cfg.federation == FederationSpec()
    assert cfg.model == ModelSection(kind="auto", hidden=50, bias=None, zero_init=None)
    assert cfg.algorithm == ComponentEntry(name="fedavg", params={})
    assert cfg.server == ComponentEntry(name="sgd", params={"lr": 1.0})
    assert cfg.report == ReportSection(target_accuracy=None, target_loss=None, rolling_window=10)
    assert cfg.run.checkpoint_every == 10


def test_training_defaults_are_those_of_fedsample_run() -> None:
    assert TrainingSection() == TrainingSection(
        rounds=50,
        num_sampled=5,
        local_steps=10,
        batch_size=20,
        local_lr=0.1,
        lr_decay=1.0,
        eval_every=1,
        importance="size",
        backend="batched",
        device="cpu",
    )


def test_training_section_has_every_scalar_setting_of_the_engine() -> None:
    pytest.importorskip("torch")
    from fedsample.engine import TrainingConfig

    scalar_fields = [f.name for f in dataclasses.fields(TrainingConfig) if f.name not in ("algorithm", "server")]
    assert sorted(TrainingSection()) == sorted(scalar_fields)


def test_seed_count_means_the_first_seeds() -> None:
    assert config_from_dict(minimal(seeds=4)).seeds == (0, 1, 2, 3)
    assert config_from_dict(minimal(seeds=[7, 2**63 - 1])).seeds == (7, 2**63 - 1)


def test_ints_are_accepted_where_floats_are_expected_and_become_floats() -> None:
    cfg = config_from_dict(
        minimal(
            federation={"alpha": 1},
            training={"local_lr": 1},
            server={"name": "sgd", "lr": 2},
            algorithm={"name": "fedprox", "mu": 0},
            samplers=[{"name": "osmd", "eta": 1}],
            report={"target_accuracy": 1, "target_loss": 0},
        )
    )
    values = [
        cfg.federation.alpha,
        cfg.training.local_lr,
        cfg.server.params["lr"],
        cfg.algorithm.params["mu"],
        cfg.samplers[0].params["eta"],
        cfg.report.target_accuracy,
        cfg.report.target_loss,
    ]
    assert values == [1.0, 1.0, 2.0, 0.0, 1.0, 1.0, 0.0]
    assert all(type(v) is float for v in values)
    assert type(cfg.training.rounds) is int


def test_component_defaults_are_resolved() -> None:
    cfg = config_from_dict(minimal(algorithm={"name": "fedprox"}, server={"name": "fedavgm", "beta": 0.5}))
    assert cfg.algorithm == ComponentEntry(name="fedprox", params={"mu": 0.01})
    assert cfg.server.params == {"lr": 1.0, "beta": 0.5, "nesterov": False}


def test_natural_datasets_default_to_the_natural_partition() -> None:
    cfg = config_from_dict(minimal(federation={"dataset": "osmd-linear", "num_clients": 10}))
    assert cfg.federation.partition == "natural"
    assert config_from_dict(minimal(federation={"dataset": "mnist1d"})).federation.partition == "dirichlet"


def test_default_labels_are_made_unique_around_explicit_ones() -> None:
    samplers = [{"name": "md"}, {"name": "md"}, {"name": "md", "label": "md-2"}, {"name": "md"}, {"name": "uniform"}]
    cfg = config_from_dict(minimal(samplers=samplers))
    assert [s.label for s in cfg.samplers] == ["md", "md-3", "md-2", "md-4", "uniform"]


def test_config_from_dict_leaves_its_input_alone() -> None:
    data = minimal(seeds=2, federation={"dataset": "osmd-linear"}, samplers=[{"name": "md"}, {"name": "md"}])
    before = copy.deepcopy(data)
    config_from_dict(data)
    assert data == before


def test_relative_data_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "config.toml"
    path.write_text('name = "x"\n[federation]\ndataset = "mnist"\npath = "../data"\n[[samplers]]\nname = "md"\n')
    assert load_config(path).federation.path == str((tmp_path / "data").resolve())
    path.write_text(f'name = "x"\n[federation]\ndataset = "mnist"\npath = "{tmp_path}"\n[[samplers]]\nname = "md"\n')
    assert load_config(path).federation.path == str(tmp_path)


def test_config_module_imports_and_validates_without_torch() -> None:
    script = textwrap.dedent(
        """
        import sys
        import fedsample.experiments.config.reading as config
        assert "torch" not in sys.modules, "config imports torch"
        sys.modules["torch"] = None  # any later import of torch fails
        cfg = config.config_from_dict(
            {"name": "x", "algorithm": {"name": "fedprox", "mu": 0.5}, "samplers": [{"name": "md"}]}
        )
        assert cfg.algorithm.params == {"mu": 0.5}, cfg.algorithm
        try:
            config.config_from_dict({"name": "x", "server": {"name": "adam"}, "samplers": [{"name": "md"}]})
        except config.FedsampleError as exc:
            assert "'server.name'" in str(exc), exc
        else:
            raise AssertionError("an unknown server name passed")
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key"),
    [
        pytest.param({"samplers": [{"name": "md"}]}, "name", id="name"),
        pytest.param({"name": "x"}, "samplers", id="samplers"),
        pytest.param({"name": "x", "samplers": [{"label": "a"}]}, "samplers[0].name", id="sampler-name"),
    ],
)
def test_missing_required_keys(data: dict[str, Any], key: str) -> None:
    assert "required" in str(assert_error(data, key, None))


@pytest.mark.parametrize(
    ("data", "key", "closest"),
    [
        pytest.param(minimal(nme="y"), "nme", "Did you mean 'name'", id="top"),
        pytest.param(
            minimal(federation={"num_client": 5}), "federation.num_client", "'federation.num_clients'", id="federation"
        ),
        pytest.param(minimal(model={"hiden": 3}), "model.hiden", "Did you mean 'model.hidden'?", id="model"),
        pytest.param(
            minimal(training={"round": 7}), "training.round", "Did you mean 'training.rounds'?", id="training"
        ),
        pytest.param(
            minimal(algorithm={"name": "fedavg", "mu": 0.1}), "algorithm.mu", "[algorithm]: {'name'}.", id="algorithm"
        ),
        pytest.param(minimal(server={"name": "sgd", "beta": 0.9}), "server.beta", "{'lr', 'name'}.", id="server"),
        pytest.param(minimal(samplers=[{"name": "md", "eta": 0.2}]), "samplers[0].eta", "samplers[0]:", id="sampler"),
        pytest.param(
            minimal(baselines={"centralised": True}),
            "baselines.centralised",
            "Did you mean 'baselines.centralized'?",
            id="baselines",
        ),
        pytest.param(minimal(report={"target_acc": 0.5}), "report.target_acc", "'report.target_accuracy'", id="report"),
        pytest.param(
            minimal(run={"checkpoint": 5}), "run.checkpoint", "Did you mean 'run.checkpoint_every'?", id="run"
        ),
    ],
)
def test_unknown_keys_are_rejected_listing_the_known_ones(data: dict[str, Any], key: str, closest: str) -> None:
    message = str(assert_error(data, key, closest))
    assert "is not one of the " in message


def test_unknown_sampler_key_lists_the_samplers_parameters() -> None:
    message = str(assert_error(minimal(samplers=[{"name": "osmd", "step": 1}]), "samplers[0].step", None))
    assert "the keys of samplers[0]: {'alpha', 'eta', 'feedback', 'label', 'name', 'replace'}." in message
    typo = str(assert_error(minimal(samplers=[{"name": "osmd", "etta": 1}]), "samplers[0].etta", None))
    assert typo.endswith("Did you mean 'samplers[0].eta'?")


@pytest.mark.parametrize(
    ("data", "key", "shown"),
    [
        pytest.param(minimal(name=5), "name", "5", id="name-int"),
        pytest.param(minimal(description=3), "description", "3", id="description"),
        pytest.param(minimal(training={"rounds": "50"}), "training.rounds", "'50'", id="string-for-int"),
        pytest.param(minimal(training={"rounds": 50.0}), "training.rounds", "50.0", id="float-for-int"),
        pytest.param(minimal(training={"rounds": True}), "training.rounds", "True", id="bool-for-int"),
        pytest.param(minimal(training={"local_lr": "0.1"}), "training.local_lr", "'0.1'", id="string-for-float"),
        pytest.param(minimal(training={"local_lr": True}), "training.local_lr", "True", id="bool-for-float"),
        pytest.param(minimal(federation={"num_clients": True}), "federation.num_clients", "True", id="fed-bool"),
        pytest.param(minimal(federation={"alpha": "x"}), "federation.alpha", "'x'", id="fed-string"),
        pytest.param(minimal(federation={"path": 3}), "federation.path", "3", id="fed-path"),
        pytest.param(minimal(model={"hidden": 1.5}), "model.hidden", "1.5", id="model-hidden"),
        pytest.param(minimal(model={"bias": "yes"}), "model.bias", "'yes'", id="model-bias"),
        pytest.param(minimal(server={"name": "sgd", "lr": "fast"}), "server.lr", "'fast'", id="server-lr"),
        pytest.param(minimal(baselines={"centralized": 1}), "baselines.centralized", "1", id="baseline-int"),
        pytest.param(minimal(report={"rolling_window": False}), "report.rolling_window", "False", id="window"),
        pytest.param(minimal(run={"checkpoint_every": 2.0}), "run.checkpoint_every", "2.0", id="checkpoint"),
        pytest.param(minimal(training=5), "training", "5", id="section-not-table"),
        pytest.param(minimal(samplers={"name": "md"}), "samplers", "{'name': 'md'}", id="samplers-table"),
        pytest.param(minimal(samplers=["md"]), "samplers[0]", "'md'", id="sampler-string"),
        pytest.param(minimal(samplers=[{"name": "md", "label": 3}]), "samplers[0].label", "3", id="label-int"),
        pytest.param(minimal(samplers=[{"name": "poisson", "capped": 1}]), "samplers[0].capped", "1", id="param"),
    ],
)
def test_wrong_types(data: dict[str, Any], key: str, shown: str) -> None:
    assert_error(data, key, shown)


@pytest.mark.parametrize(
    ("data", "key", "shown"),
    [
        pytest.param(minimal(training={"rounds": 0}), "training.rounds", "Got 0 instead", id="rounds"),
        pytest.param(minimal(training={"num_sampled": -1}), "training.num_sampled", "-1", id="num-sampled"),
        pytest.param(minimal(training={"local_lr": 0}), "training.local_lr", "Got 0 instead", id="lr"),
        pytest.param(minimal(training={"lr_decay": 1.5}), "training.lr_decay", "1.5", id="decay"),
        pytest.param(minimal(training={"device": "tpu"}), "training.device", "'tpu'", id="device"),
        pytest.param(minimal(training={"importance": "equal"}), "training.importance", "'equal'", id="importance"),
        pytest.param(minimal(training={"backend": "gpu"}), "training.backend", "'gpu'", id="backend"),
        pytest.param(minimal(federation={"alpha": 0}), "federation.alpha", "Got 0 instead", id="alpha"),
        pytest.param(minimal(federation={"num_clients": 0}), "federation.num_clients", "0", id="clients"),
        pytest.param(minimal(federation={"test_fraction": 1.0}), "federation.test_fraction", "1.0", id="test"),
        pytest.param(minimal(federation={"seed": -3}), "federation.seed", "-3", id="fed-seed"),
        pytest.param(minimal(federation={"seed": 2**63}), "federation.seed", str(2**63), id="fed-seed-toml"),
        pytest.param(minimal(model={"hidden": 0}), "model.hidden", "0", id="hidden"),
        pytest.param(minimal(server={"name": "sgd", "lr": -1}), "server.lr", "Got -1 instead", id="server-lr"),
        pytest.param(minimal(server={"name": "fedadam", "beta1": 1}), "server.beta1", "1", id="beta1"),
        pytest.param(minimal(algorithm={"name": "fedprox", "mu": -1}), "algorithm.mu", "-1", id="mu"),
        pytest.param(
            minimal(samplers=[{"name": "md"}, {"name": "md"}, {"name": "osmd", "eta": 0}]),
            "samplers[2].eta",
            "Got 0 instead",
            id="eta",
        ),
        pytest.param(minimal(report={"target_accuracy": 1.5}), "report.target_accuracy", "1.5", id="accuracy"),
        pytest.param(minimal(report={"target_loss": -1}), "report.target_loss", "-1", id="loss"),
        pytest.param(minimal(report={"rolling_window": 0}), "report.rolling_window", "0", id="window"),
        pytest.param(minimal(run={"checkpoint_every": -1}), "run.checkpoint_every", "-1", id="checkpoint"),
    ],
)
def test_out_of_range_values(data: dict[str, Any], key: str, shown: str) -> None:
    assert_error(data, key, shown)


@pytest.mark.parametrize(
    ("data", "key", "shown"),
    [
        pytest.param(minimal(name="my run"), "name", "'my run'", id="space"),
        pytest.param(minimal(name="../up"), "name", "'../up'", id="parent"),
        pytest.param(minimal(name=".hidden"), "name", "'.hidden'", id="hidden"),
        pytest.param(minimal(name=""), "name", "''", id="empty"),
        pytest.param(minimal(name="a" * 101), "name", "'aaa", id="long"),
        pytest.param(minimal(samplers=[{"name": "mdd"}]), "samplers[0].name", "'mdd'", id="sampler"),
        pytest.param(minimal(algorithm={"name": "fedsgd"}), "algorithm.name", "'fedsgd'", id="algorithm"),
        pytest.param(minimal(server={"name": "adam"}), "server.name", "'adam'", id="server"),
        pytest.param(minimal(federation={"dataset": "imagenet"}), "federation.dataset", "'imagenet'", id="dataset"),
        pytest.param(minimal(federation={"partition": "natural"}), "federation.partition", "'natural'", id="part"),
        pytest.param(
            minimal(federation={"dataset": "osmd-linear", "partition": "iid"}),
            "federation.partition",
            "'iid'",
            id="natural-partition",
        ),
        pytest.param(minimal(federation={"dataset": "mnist"}), "federation.path", "None", id="missing-path"),
        pytest.param(minimal(model={"kind": "transformer"}), "model.kind", "'transformer'", id="kind"),
        pytest.param(minimal(model={"kind": "linear"}), "model.kind", "'linear'", id="linear-on-digits"),
        pytest.param(
            minimal(model={"kind": "mlp"}, federation={"dataset": "osmd-linear"}),
            "model.kind",
            "'mlp'",
            id="mlp-on-regression",
        ),
    ],
)
def test_bad_names(data: dict[str, Any], key: str, shown: str) -> None:
    assert_error(data, key, shown)


def test_unknown_names_list_the_valid_ones() -> None:
    assert "'clustered-size'" in str(assert_error(minimal(samplers=[{"name": "x"}]), "samplers[0].name", "'x'"))
    assert "'fedadam'" in str(assert_error(minimal(server={"name": "x"}), "server.name", "'x'"))
    assert "'scaffold'" in str(assert_error(minimal(algorithm={"name": "x"}), "algorithm.name", "'x'"))


@pytest.mark.parametrize(
    ("data", "key", "shown"),
    [
        pytest.param(
            minimal(samplers=[{"name": "md", "label": "a"}, {"name": "uniform", "label": "a"}]),
            "samplers[1].label",
            "'a'",
            id="duplicate",
        ),
        pytest.param(minimal(samplers=[{"name": "md", "label": ""}]), "samplers[0].label", "''", id="empty"),
        pytest.param(minimal(samplers=[{"name": "md", "label": "  "}]), "samplers[0].label", "'  '", id="blank"),
        pytest.param(minimal(samplers=[{"name": "md", "label": "a\nb"}]), "samplers[0].label", "'a\\nb'", id="lines"),
        pytest.param(
            minimal(samplers=[{"name": "md", "label": "centralized"}], baselines={"centralized": True}),
            "samplers[0].label",
            "'centralized'",
            id="reserved",
        ),
        pytest.param(minimal(samplers=[]), "samplers", "[]", id="no-samplers"),
    ],
)
def test_bad_labels_and_sampler_lists(data: dict[str, Any], key: str, shown: str) -> None:
    assert_error(data, key, shown)


def test_centralized_label_is_free_without_the_baseline() -> None:
    cfg = config_from_dict(minimal(samplers=[{"name": "md", "label": "centralized"}]))
    assert cfg.samplers[0].label == "centralized"


@pytest.mark.parametrize(
    ("seeds", "key", "shown"),
    [
        pytest.param([-1], "seeds[0]", "-1", id="negative"),
        pytest.param([0, 1, 1], "seeds", "[0, 1, 1]", id="duplicates"),
        pytest.param([], "seeds", "[]", id="empty"),
        pytest.param(0, "seeds", "Got 0 instead", id="zero-count"),
        pytest.param("3", "seeds", "'3'", id="string"),
        pytest.param([0, True], "seeds[1]", "True", id="bool"),
        pytest.param([0, 1.0], "seeds[1]", "1.0", id="float"),
        pytest.param([2**63], "seeds[0]", str(2**63), id="too-large"),
    ],
)
def test_bad_seeds(seeds: object, key: str, shown: str) -> None:
    assert_error(minimal(seeds=seeds), key, shown)


def test_document_must_be_a_table() -> None:
    with pytest.raises(FedsampleError, match=r"The config must be a table of keys\. Got \[1\] instead\."):
        config_from_dict([1])  # type: ignore[arg-type]


def test_load_config_reports_bad_toml_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\n\n[training]\nrounds = \n')
    with pytest.raises(FedsampleError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert "line 4" in message


def test_load_config_names_the_file_in_validation_errors(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('name = "x"\n[training]\nrounds = 0\n[[samplers]]\nname = "md"\n')
    with pytest.raises(FedsampleError) as info:
        load_config(path)
    assert str(info.value) == (
        f"The 'training.rounds' key of {path} must be an int in the range [1, inf). Got 0 instead."
    )


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_load_config_unreadable_files(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.toml"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(FedsampleError) as info:
        load_config(path)
    assert "\n" not in str(info.value)
    assert str(path) in str(info.value)
    assert info.value.parameter == "path"
