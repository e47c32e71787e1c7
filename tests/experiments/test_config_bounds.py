"""The config reader refuses exactly what the library refuses, key by key.

For every key of every section of a config (walked from the sections' declared tables, so a key added
later is walked too), boundary values of the key's type that a TOML file can hold are given to the
reader (:func:`config_from_dict`) and to the library object the key ends up in (``training.*`` in
:class:`TrainingConfig`, ``model.*`` in :class:`ModelSpec`, ``participation.*`` in the availability
and dropout models and :class:`Participation`, ``report.*`` in :func:`summarize` and
:func:`plot_metrics`, ``run.checkpoint_every`` in :func:`simulate`, ``federation.*`` in
:class:`FederationSpec`, and every hyperparameter of every sampler, local algorithm and server
optimizer in its class). The two must accept and refuse the same values: a value the reader passes
and the library refuses fails a run after it has started (``lr_decay = 0`` once did), and a value the
reader refuses and the library takes is a setting the config cannot express.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import fedsample.engine as engine
import fedsample.experiments.results.plots as plots_module
from fedsample._params import declared as declared_table
from fedsample._validation import Boolean, Interval, NoneOr
from fedsample.data.builders import DATASETS, PARTITIONS, FederationSpec
from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate
from fedsample.engine.history import History
from fedsample.experiments.config import (
    NATURAL_DATASETS,
    ModelSection,
    ParticipationSection,
    ReportSection,
    RunSection,
    TrainingSection,
    config_from_dict,
)
from fedsample.experiments.config.sections import Section
from fedsample.experiments.results.metrics import metrics_table
from fedsample.experiments.results.summary import summarize
from fedsample.participation.availability import BernoulliAvailability, Dropout
from fedsample.participation.setting import Participation
from fedsample.samplers import MDSampler, make_sampler, sampler_class, sampler_names

TOML_INT_MAX = 2**63 - 1

# Values a TOML file can hold, around the bounds the library uses (0, 1, 10, 1000, int64's end),
# and of the wrong type. Floats include the non-finite ones TOML writes as inf and nan.
INT_VALUES: list[Any] = [-1, 0, 1, 2, 3, 10, 11, 1000, 1001, TOML_INT_MAX, 2.0, 2.5, True, False, "2"]
FLOAT_VALUES: list[Any] = [
    -1.0,
    -0.0,
    0.0,
    5e-324,
    0.5,
    1.0,
    1.0000000000000002,
    10.0,
    10.000000000000002,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    0,
    1,
    3,
    True,
    "0.5",
]
BOOL_VALUES: list[Any] = [True, False, 0, 1, "true"]
STRING_VALUES: list[Any] = ["", " ", "x", 1, True]


def _values(declared: str, options: tuple[str, ...] = ()) -> list[Any]:
    """Boundary values for a field declared as ``declared`` (the dataclass annotation's text)."""
    kind = declared.replace(" | None", "").replace("Optional[", "").rstrip("]")
    if kind == "int":
        return INT_VALUES
    if kind == "float":
        return FLOAT_VALUES
    if kind == "bool":
        return BOOL_VALUES
    if kind == "str":
        return [*options, *(o.upper() for o in options), *STRING_VALUES]
    return []


def _accepts(build: Callable[[], object]) -> bool:
    try:
        build()
    except (ValueError, TypeError):
        return False
    return True


def _reader_accepts(section: str, key: str, value: Any) -> bool:
    data: dict[str, Any] = {"name": "bounds", "samplers": [{"name": "md"}]}
    if section == "samplers":
        name, key = key.split(".", 1)
        data["samplers"] = [{"name": name, key: value}]
    elif section in ("algorithm", "server"):
        name, key = key.split(".", 1)
        data[section] = {"name": name, key: value}
    else:
        data[section] = {key: value}
    return _accepts(lambda: config_from_dict(data))


def _disagreements(section: str, keys: dict[str, tuple[list[Any], Callable[[Any], bool]]]) -> list[str]:
    out = []
    for key, (values, library_accepts) in keys.items():
        for value in values:
            reader, library = _reader_accepts(section, key, value), library_accepts(value)
            if reader != library:
                out.append(
                    f"{section}.{key} = {value!r}: reader {'accepts' if reader else 'refuses'}, "
                    f"library {'accepts' if library else 'refuses'}"
                )
    return out


def _check(section: str, keys: dict[str, tuple[list[Any], Callable[[Any], bool]]]) -> None:
    found = _disagreements(section, keys)
    assert not found, "\n".join(found)


def _kind(constraint: Any) -> str:
    """The type of value a declared constraint takes, as an annotation's text."""
    if isinstance(constraint, NoneOr):
        return f"{_kind(constraint.inner)} | None"
    if isinstance(constraint, Interval):
        return constraint.kind.__name__
    return "bool" if isinstance(constraint, Boolean) else "str"


def _fields(section: type) -> dict[str, str]:
    """Every key of a section (walked from its declared table, so a key added later is walked too)."""
    table = section.table if issubclass(section, Section) else declared_table(section, section.__name__)
    return {name: _kind(p.constraint) for name, p in table.parameters.items()}


# --- the sections ------------------------------------------------------------------------------------

TRAINING_OPTIONS = {"importance": ("size", "uniform"), "backend": ("batched", "sequential")}
DEVICE_VALUES = ["cpu", "cuda", "cuda:0", "cuda:12", "cuda:", "cuda:x", "cudax", "cuda0", "CPU", "cpu:0", "", 1]


def test_training_keys_match_training_config() -> None:
    keys = {}
    for name, declared in _fields(TrainingSection).items():
        values = DEVICE_VALUES if name == "device" else _values(declared, TRAINING_OPTIONS.get(name, ()))
        assert values, f"no boundary values for training.{name} ({declared})"
        keys[name] = (values, lambda v, name=name: _accepts(lambda: TrainingConfig(**{name: v})))
    assert set(keys) <= {f.name for f in dataclasses.fields(TrainingConfig)}
    _check("training", keys)


def test_model_keys_match_model_spec() -> None:
    """``kind`` is checked by name elsewhere (its suitability depends on the data set); ``hidden``,
    ``bias`` and ``zero_init`` go to ModelSpec as they are. A user's model (``factory``, ``args``,
    ``loss``, ``path``) is checked when it is imported and bound (tests/experiments/test_config_model.py)."""
    spec = {"kind": "mlp", "input_shape": (4,), "output_dim": 3}
    keys = {}
    for name, declared in _fields(ModelSection).items():
        if name in ("kind", "factory", "args", "loss", "path", "metrics"):
            continue
        keys[name] = (_values(declared), lambda v, name=name: _accepts(lambda: ModelSpec(**spec, **{name: v})))
    assert set(keys) == {"hidden", "bias", "zero_init"}
    _check("model", keys)


PARTICIPATION_OPTIONS = {
    "policy": ("renormalise", "inverse-probability", "ignore"),
    "return_rates": ("known", "estimated"),
}


def test_participation_keys_match_the_models_and_participation() -> None:
    """``availability`` becomes BernoulliAvailability(a) (AlwaysAvailable when a = 1), ``dropout``
    Dropout(d); the others are Participation's own. The trace's path is checked when it is read."""
    from fedsample.participation.parameters import PARTICIPATION, build_availability
    from fedsample.participation.processes import CyclicAvailability, MarkovAvailability, label_correlated_rates

    def process(v: Any) -> object:
        return build_availability({**PARTICIPATION.defaults, "availability": 0.5, "availability_process": v})

    builders: dict[str, Callable[[Any], object]] = {
        "availability": lambda v: BernoulliAvailability(v),
        "dropout": lambda v: Dropout(v),
        # The availability processes and FedAU's label-tied rates (docs/failures.md).
        "availability_process": process,
        "availability_label_alpha": lambda v: v is None or label_correlated_rates(np.eye(3), alpha=v),
        "availability_minimum": lambda v: label_correlated_rates(np.eye(3), minimum=v),
        "markov_off_to_on": lambda v: MarkovAvailability.stationary(0.5, off_to_on=v),
        "cyclic_period": lambda v: CyclicAvailability(0.5, period=v),
    }
    keys = {}
    for name, declared in _fields(ParticipationSection).items():
        if name == "availability_trace":
            continue
        build = builders.get(name, lambda v, name=name: Participation(**{name: v}))
        values = _values(declared, PARTICIPATION_OPTIONS.get(name, ()))
        keys[name] = (values, lambda v, build=build: _accepts(lambda: build(v)))
    assert set(keys) == set(_fields(ParticipationSection)) - {"availability_trace"}
    _check("participation", keys)


def _metrics() -> dict[str, np.ndarray]:
    history = History(
        label="md",
        sampler="md",
        seed=0,
        eval_rounds=np.array([0, 1]),
        train_loss=np.array([1.0, 0.5]),
        test_loss=np.array([1.0, 0.6]),
        test_accuracy=np.array([0.5, 0.7]),
        distinct_clients=np.array([2]),
        distinct_labels=np.array([2]),
        weight_sum=np.array([1.0]),
        round_seconds=np.array([0.1]),
        local_lr=np.array([0.1]),
    )
    return metrics_table([history])


class _Plotting(Exception):
    """plot_metrics got past its checks (raised instead of drawing)."""


def test_report_keys_match_summarize_and_plot_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    def plotting(*args: object, **kwargs: object) -> None:
        raise _Plotting

    monkeypatch.setattr(plots_module, "require", plotting)
    table = _metrics()

    def plot_accepts(value: Any) -> bool:
        try:
            plots_module.plot_metrics(table, "unused", rolling_window=value)
        except _Plotting:
            return True
        except (ValueError, TypeError):
            return False
        raise AssertionError("plot_metrics neither refused the window nor reached the plotting")

    keys: dict[str, tuple[list[Any], Callable[[Any], bool]]] = {
        "target_accuracy": (FLOAT_VALUES, lambda v: _accepts(lambda: summarize(table, target_accuracy=v))),
        "target_loss": (FLOAT_VALUES, lambda v: _accepts(lambda: summarize(table, target_loss=v))),
        "rolling_window": (INT_VALUES, plot_accepts),
        # The runner measures the bias when the flag is true: a bool, as the section reader demands.
        "measure_bias": (BOOL_VALUES, lambda v: isinstance(v, bool)),
    }
    assert set(keys) == set(_fields(ReportSection))
    _check("report", keys)


def test_run_keys_match_simulate() -> None:
    """``checkpoint_every`` is checked by simulate before the participation setting, which is
    given wrong on purpose: reaching that error means the value was accepted (nothing runs)."""
    # simulate checks that it was given data before it reads the settings; nothing is read from these.
    data = types.SimpleNamespace(task="classification", train_features=None, train_targets=None, train_indptr=None)
    model = ModelSpec(kind="mlp", input_shape=(4,), output_dim=3)

    def simulate_accepts(value: Any) -> bool:
        try:
            simulate(data, model, [RunSpec(MDSampler())], TrainingConfig(), checkpoint_every=value, participation="x")  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            return getattr(exc, "parameter", None) == "participation"
        raise AssertionError("simulate accepted a wrong participation setting")

    keys = {"checkpoint_every": (INT_VALUES, simulate_accepts)}
    assert set(keys) == set(_fields(RunSection))
    _check("run", keys)


FEDERATION_OPTIONS = {"dataset": DATASETS, "partition": PARTITIONS}


def _federation_spec(name: str, value: Any) -> FederationSpec:
    """FederationSpec with one key set, and the reader's one documented default: the partition of a
    data set that comes split into clients (osmd-linear, shakespeare, femnist) is "natural"."""
    natural = name == "dataset" and isinstance(value, str) and value in NATURAL_DATASETS
    return FederationSpec(**{name: value}, **({"partition": "natural"} if natural else {}))


def test_federation_keys_match_federation_spec() -> None:
    keys = {}
    for name, declared in _fields(FederationSpec).items():
        if name == "path":
            continue  # a file's path: read when the federation is built
        values = _values(declared, FEDERATION_OPTIONS.get(name, ()))
        keys[name] = (values, lambda v, name=name: _accepts(lambda: _federation_spec(name, v)))
    _check("federation", keys)


# --- the components' hyperparameters ---------------------------------------------------------------


def _component_keys(classes: dict[str, type], build: Callable[..., object]) -> dict[str, Any]:
    keys = {}
    for name, cls in classes.items():
        for f in dataclasses.fields(cls):
            values = _values(str(f.type))
            if f.name == "name" or not values:
                continue  # array-valued hyperparameters (rows, groups) are not boundary-walked
            keys[f"{name}.{f.name}"] = (
                values,
                lambda v, name=name, key=f.name: _accepts(lambda: build(name, **{key: v})),
            )
    return keys


def test_sampler_hyperparameters_match_the_samplers() -> None:
    keys = _component_keys({name: sampler_class(name) for name in sampler_names()}, make_sampler)
    assert len(keys) > 20
    _check("samplers", keys)


@pytest.mark.parametrize("section", ["algorithm", "server"])
def test_algorithm_and_server_hyperparameters_match_the_engine(section: str) -> None:
    registry = engine.ALGORITHMS if section == "algorithm" else engine.SERVER_OPTIMIZERS
    build = engine.make_algorithm if section == "algorithm" else engine.make_server_optimizer
    keys = _component_keys(dict(registry), build)
    assert keys
    _check(section, keys)
