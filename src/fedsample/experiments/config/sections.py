"""The tables of an experiment config, each declared once as a parameter table.

A config's ``[training]``, ``[model]``, ``[participation]``, ``[system]``, ``[report]``, ``[run]``,
``[baselines]``, ``[tracking]`` and ``[federation]`` tables are read by one reader over the tables below
(:data:`SECTIONS`), and the command line's ``--set`` reaches every key of them. The tables come
from the components that use the values: the engine's registry (training settings, model), the
:class:`~fedsample.data.builders.FederationSpec` and the
:class:`~fedsample.participation.setting.Participation` classes; the experiment declares only what is
its own (the report, checkpoints, the baseline, and the ``[participation]`` keys that become
availability and dropout models).

A section's values are read by attribute (``cfg.training.rounds``) or as a mapping
(``dict(cfg.training)``); its keys are its table's, so a parameter added to a table is a key of
the config, of ``--set`` and of the resolved config without another edit.

>>> TrainingSection().rounds, TrainingSection(rounds=3).rounds
(50, 3)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from fedsample._imports import REFERENCE
from fedsample._params import Component, Parameter, declared
from fedsample._validation import Boolean, Interval, NoneOr, Options, Text
from fedsample.data.builders import FederationSpec
from fedsample.engine.registry import (
    ALGORITHMS,
    LOSS_NAMES,
    METRIC_NAME,
    MODEL,
    MODEL_KINDS,
    RESERVED_METRICS,
    SERVER_OPTIMIZERS,
    TRAINING,
)
from fedsample.participation.parameters import PARTICIPATION
from fedsample.participation.system import SYSTEM

__all__ = [
    "BASELINES",
    "FEDERATION",
    "MODEL_SECTION",
    "PARTICIPATION",
    "REPORT",
    "RUN",
    "SECTIONS",
    "SYSTEM",
    "TRACKING",
    "TRAINING_SECTION",
    "ModelSection",
    "ParticipationSection",
    "ReportSection",
    "RunSection",
    "Section",
    "SystemSection",
    "TrackingSection",
    "TrainingSection",
    "parameter_of",
]


@dataclass(frozen=True)
class KeywordArguments:
    """A table of keyword arguments a config passes to a callable: identifiers to TOML values (numbers,
    strings, booleans, arrays and tables of them, at most four levels deep, integers within int64)."""

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and k.isidentifier() and _toml_value(v, 1) for k, v in value.items()
        )

    def __str__(self) -> str:
        return "a table of keyword arguments (identifiers to numbers, strings, booleans, arrays and tables)"


@dataclass(frozen=True)
class MetricReferences:
    """A table of extra metrics: names (lower-case letters, digits, ``_``; a letter first; at most 40
    characters; not ``loss`` or ``accuracy``) to ``"package.module:function"`` references."""

    def is_satisfied_by(self, value: object) -> bool:
        return (
            isinstance(value, Mapping)
            and bool(value)
            and all(
                isinstance(k, str)
                and re.fullmatch(METRIC_NAME, k) is not None
                and k not in RESERVED_METRICS
                and isinstance(v, str)
                and (REFERENCE.fullmatch(v) is not None or re.fullmatch(PYTHON_OBJECT, v) is not None)
                for k, v in value.items()
            )
        )

    def __str__(self) -> str:
        return "a table of metric names (a-z, 0-9, '_'; not 'loss' or 'accuracy') to 'package.module:function'"


def _toml_value(value: object, depth: int) -> bool:
    if depth > 4:
        return False
    if isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return -(2**63) <= value <= 2**63 - 1
    if isinstance(value, float):
        return True
    if isinstance(value, list):
        return all(_toml_value(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _toml_value(v, depth + 1) for k, v in value.items())
    return False


# The engine's training settings with the defaults of ``fedsample run`` (a comparison that runs in minutes).
TRAINING_SECTION = TRAINING.with_defaults(rounds=50, num_sampled=5, batch_size=20, local_lr=0.1)

_bias, _zero_init = MODEL.parameters["bias"].constraint, MODEL.parameters["zero_init"].constraint
# A model made in Python and handed to run_comparison: the config records its name, and no file can rebuild it.
PYTHON_OBJECT = r"python:[^\s]{1,100}"
MODEL_SECTION = Component(
    "model",
    "ModelSpec",
    {
        # "auto" and None are decided from the data (as ``fedsample run`` does).
        "kind": Parameter("auto", Options(("auto", *MODEL_KINDS))),
        "hidden": MODEL.parameters["hidden"],
        "bias": Parameter(None, NoneOr(_bias)),
        "zero_init": Parameter(None, NoneOr(_zero_init)),
        # A user's model (docs/your-model.md): a factory "package.module:function" called with ``args``,
        # its loss, and the directory searched first for their modules (the config file's own).
        "factory": Parameter(
            None,
            NoneOr(Text("a 'package.module:function' reference", pattern=f"{REFERENCE.pattern}|{PYTHON_OBJECT}")),
        ),
        "args": Parameter(None, NoneOr(KeywordArguments())),
        "loss": Parameter(
            "auto",
            Text(
                "'auto', 'cross-entropy', 'mse' or a 'package.module:function' reference",
                pattern=f"auto|cross-entropy|mse|{REFERENCE.pattern}|{PYTHON_OBJECT}",
                names=LOSS_NAMES,
            ),
        ),
        "path": Parameter(None, NoneOr(Text("a directory", single_line=True))),
        # Extra evaluation metrics: name -> "package.module:function" (one value per sample, mean over test rows).
        "metrics": Parameter(None, NoneOr(MetricReferences())),
    },
)

FEDERATION = declared(FederationSpec, "federation")


REPORT = Component(
    "report",
    "summarize",
    {
        "target_accuracy": Parameter(None, NoneOr(Interval(float, 0, 1, closed="both"))),
        # Finite, as summarize needs: a target of inf would pass here and fail the report later.
        "target_loss": Parameter(None, NoneOr(Interval(float, 0, math.inf, closed="left"))),
        "rolling_window": Parameter(10, Interval(int, 1, None, closed="left")),
        # Each sampler's bias by Monte Carlo on a fixed feedback sequence (fedsample.experiments.results.bias).
        "measure_bias": Parameter(False, Boolean()),
    },
)

RUN = Component("run", "simulate", {"checkpoint_every": Parameter(10, Interval(int, 0, None, closed="left"))})

BASELINES = Component("baselines", "the baselines", {"centralized": Parameter(False, Boolean())})

# Where each round's metrics go besides the metrics files (fedsample.experiments.results.tracking): TensorBoard
# event files in RUN_DIR/tensorboard/, and an MLflow store (default: the SQLite file RUN_DIR/mlflow.db, the
# experiment named after the config). They change no result, and a resumed run may change them.
MLFLOW_URI = r"(sqlite|file|https?|postgresql|mysql|mssql)(\+[a-z0-9]+)?:\S+"
TRACKING = Component(
    "tracking",
    "the trackers",
    {
        "tensorboard": Parameter(False, Boolean()),
        "mlflow": Parameter(False, Boolean()),
        "mlflow_uri": Parameter(
            None,
            NoneOr(Text("an MLflow tracking URI (sqlite:///PATH, file:PATH, http://HOST:PORT)", pattern=MLFLOW_URI)),
        ),
        "mlflow_experiment": Parameter(None, NoneOr(Text("an MLflow experiment name", single_line=True))),
    },
)

SECTIONS: dict[str, Component] = {
    table.name: table
    for table in (FEDERATION, MODEL_SECTION, TRAINING_SECTION, BASELINES, REPORT, RUN, PARTICIPATION, SYSTEM, TRACKING)
}
"""Every table of a config read by the one section reader, by its name in the file."""


def parameter_of(key: str) -> Parameter[Any]:
    """The declaration of the config key ``key`` (``"training.rounds"``), for a flag that aliases it.

    ``algorithm.name`` and ``server.name`` are the engine's names; another ``algorithm.*`` or
    ``server.*`` key is the parameter of the first component that has it (``algorithm.mu`` is FedProx's).
    """
    section, _, name = key.partition(".")
    if section in SECTIONS:
        return SECTIONS[section].parameters[name]
    components = {"algorithm": (ALGORITHMS, "fedavg"), "server": (SERVER_OPTIMIZERS, "sgd")}[section]
    registry, default = components
    if name == "name":
        return Parameter(default, Options(tuple(registry)))
    return next(c.parameters[name] for c in registry.values() if name in c.parameters)


class Section(Mapping[str, Any]):
    """The values of one table of a config: every key of ``table``, its default unless given.

    Immutable, compared by value, read by attribute or key. The constructor does not check the
    values (the config reader does, and ``config_from_dict(config_to_dict(cfg))`` checks a hand-built one).
    """

    table: ClassVar[Component]
    __slots__ = ("_values",)

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self.table.parameters)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no key {min(unknown)!r}")
        object.__setattr__(self, "_values", {**self.table.defaults, **values})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def replace(self, **changes: Any) -> Section:
        """A copy with some values replaced (as ``dataclasses.replace``)."""
        return type(self)(**{**self._values, **changes})

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and dict(self._values) == dict(other._values)

    def __hash__(self) -> int:
        return hash((type(self), _frozen(self._values)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_section, (type(self), dict(self._values)))


def _frozen(value: Any) -> Any:
    """A hashable form of plain data (tables as sorted pairs, arrays as tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _section(cls: type[Section], values: dict[str, Any]) -> Section:
    return cls(**values)


class TrainingSection(Section):
    """``[training]``: the scalar settings of :class:`~fedsample.engine.TrainingConfig` (run's defaults)."""

    table = TRAINING_SECTION


class ModelSection(Section):
    """``[model]``: the model; ``"auto"`` and ``None`` are decided from the data (as ``fedsample run`` does)."""

    table = MODEL_SECTION


class ParticipationSection(Section):
    """``[participation]``: availability and failures; the default fails nobody."""

    table = PARTICIPATION


class SystemSection(Section):
    """``[system]``: the clients' speeds and links and the round deadline (docs/system.md); a config without
    the table has no simulated clock."""

    table = SYSTEM


class ReportSection(Section):
    """``[report]``: what the summary and plots report."""

    table = REPORT


class RunSection(Section):
    """``[run]``: rounds between checkpoints (0: none)."""

    table = RUN


class TrackingSection(Section):
    """``[tracking]``: TensorBoard and MLflow, each round's metrics (:mod:`~fedsample.experiments.results.tracking`)."""

    table = TRACKING
