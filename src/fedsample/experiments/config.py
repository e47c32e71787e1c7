"""Experiment configs: one TOML file describes a comparison, validated on load, written back resolved.

A config names the federation, the model, the training settings, the local algorithm and server
optimizer, the samplers to compare and the seeds each of them runs with::

    name = "digits-comparison"   # required: letters, digits, '.', '_', '-', starting with a letter or digit
    description = "MD vs clustered sampling on the embedded digits"   # default ""
    seeds = [0, 1, 2]            # distinct ints in [0, 2**63 - 1], or n meaning [0, ..., n - 1]; default [0]

    [federation]                 # FederationSpec's fields and defaults; partition defaults to "natural"
    dataset = "digits"           # for osmd-linear, shakespeare and femnist. A relative path is relative
    num_clients = 50             # to the config file (load_config stores it absolute)

    [model]
    kind = "auto"                # "auto" (decided from the data, as ``fedsample run`` does) or a model kind
    hidden = 50                  # bias, zero_init: default decided from the data set (off/on for osmd-linear)

    [training]                   # rounds 50, num_sampled 5, local_steps 10, batch_size 20, local_lr 0.1,
    rounds = 50                  # lr_decay 1.0, eval_every 1, importance "size", backend "batched", device "cpu",
                                 # max_rejected_rounds 20 (stop when every update is NaN/inf this many rounds)

    [algorithm]                  # default fedavg; every other key is a hyperparameter
    name = "fedprox"
    mu = 0.01

    [server]                     # default sgd; every other key is a hyperparameter
    name = "sgd"
    lr = 1.0

    [[samplers]]                 # at least one: name, optional label, other keys are hyperparameters
    name = "md"
    [[samplers]]
    name = "osmd"
    label = "OSMD (eta 1e-3)"
    eta = 0.001

    [baselines]
    centralized = false          # add pooled mini-batch SGD as an extra line (label "centralized")

    [report]
    target_accuracy = 0.8        # optional: "rounds to reach" columns of the summary
    target_loss = 0.5            # optional
    rolling_window = 10          # rounds of the rolling mean in the loss plot

    [run]
    checkpoint_every = 10        # rounds between checkpoints (0: none)

    [participation]              # availability and failures (docs/failures.md); default: nobody fails
    availability = 0.8           # a: each client is available in a round with probability a (default 1.0)
    availability_trace = "t.csv" # or a CSV trace client,start,end (relative to the config file); not with a < 1
    dropout = 0.3                # d in [0, 1): a selected client fails to return (default 0.0)
    over_selection = 0.2         # o in [0, 10]: ask ceil(m (1 + o)) clients, keep the first m to reply
    policy = "inverse-probability"  # or "renormalise" (default), "ignore"
    return_rates = "known"       # or "estimated" (needed with a trace under inverse-probability)
    redraws = 10                 # tries to replace an unavailable draw of a per-row design (0: skip it)

Unknown keys are rejected at every level. A sampler's label defaults to its name, made unique by
suffixes (two unlabelled ``md`` entries are ``md`` and ``md-2``, skipping labels given explicitly);
labels are single-line and unique, and ``centralized`` is reserved when the baseline is on.
Hyperparameters are checked by building the sampler, algorithm and server optimizer (the latter two
by name only when PyTorch is not installed). The *resolved* config (:func:`config_to_dict`,
:func:`~fedsample.experiments.config_toml.config_to_toml`) has every default filled in, including
the hyperparameters' own defaults; ``None`` values are left out, since TOML has no null, and read back as ``None``.
The ``[participation]`` table is written only when it differs from the default.

This module holds the schema, its validation and the reading; the TOML writer
(:mod:`fedsample.experiments.config_toml`) and the overrides (:mod:`fedsample.experiments.overrides`)
have their own modules.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedsample._validation import Boolean, Constraint, Interval, NoneOr, Options, show_value
from fedsample.data.builders import FederationSpec
from fedsample.errors import FedsampleError
from fedsample.samplers import make_sampler, sampler_class, sampler_names

__all__ = [
    "ComponentEntry",
    "ExperimentConfig",
    "ModelSection",
    "ParticipationSection",
    "ReportSection",
    "RunSection",
    "SamplerEntry",
    "TrainingSection",
    "config_from_dict",
    "config_to_dict",
    "load_config",
]

# The engine's names, for checking configs without PyTorch (tests keep them equal to the engine's).
MODEL_KIND_NAMES = ("linear", "softmax", "mlp", "cnn", "lstm")
ALGORITHM_NAMES = ("fedavg", "fedprox", "minibatch-sgd", "scaffold")
SERVER_NAMES = ("sgd", "fedavgm", "fedadam", "fedyogi", "fedadagrad")
NATURAL_DATASETS = ("osmd-linear", "shakespeare", "femnist")
CENTRALIZED_LABEL = "centralized"
_TOML_INT_MAX = 2**63 - 1
MAX_SEED_COUNT = 10_000


@dataclass(frozen=True, kw_only=True)
class SamplerEntry:
    """One compared sampler: its registry name, its label in tables and plots, its hyperparameters."""

    name: str
    label: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ComponentEntry:
    """A local algorithm or server optimizer: its name and hyperparameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """The model; ``"auto"`` and ``None`` are decided from the data (as ``fedsample run`` does)."""

    kind: str = "auto"
    hidden: int = 50
    bias: bool | None = None
    zero_init: bool | None = None


@dataclass(frozen=True, kw_only=True)
class TrainingSection:
    """The scalar settings of :class:`~fedsample.engine.TrainingConfig` (defaults of ``fedsample run``)."""

    rounds: int = 50
    num_sampled: int = 5
    local_steps: int = 10
    batch_size: int = 20
    local_lr: float = 0.1
    lr_decay: float = 1.0
    eval_every: int = 1
    importance: str = "size"
    backend: str = "batched"
    device: str = "cpu"
    max_rejected_rounds: int = 20


@dataclass(frozen=True, kw_only=True)
class ReportSection:
    """What the summary and plots report."""

    target_accuracy: float | None = None
    target_loss: float | None = None
    rolling_window: int = 10


@dataclass(frozen=True, kw_only=True)
class RunSection:
    """How runs are executed: rounds between checkpoints (0: none)."""

    checkpoint_every: int = 10


@dataclass(frozen=True, kw_only=True)
class ParticipationSection:
    """Availability and failures (:class:`~fedsample.participation.rounds.Participation`); the default fails nobody."""

    availability: float = 1.0
    availability_trace: str | None = None
    dropout: float = 0.0
    over_selection: float = 0.0
    policy: str = "renormalise"
    return_rates: str = "known"
    redraws: int = 10


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """A validated comparison: every sampler runs with every seed on one federation.

    Build it with :func:`load_config` or :func:`config_from_dict`; the dataclasses do not check
    themselves, so validate a hand-built one with ``config_from_dict(config_to_dict(cfg))``.
    """

    name: str
    samplers: tuple[SamplerEntry, ...]
    description: str = ""
    seeds: tuple[int, ...] = (0,)
    federation: FederationSpec = field(default_factory=FederationSpec)
    model: ModelSection = field(default_factory=ModelSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    algorithm: ComponentEntry = field(default_factory=lambda: ComponentEntry(name="fedavg"))
    server: ComponentEntry = field(default_factory=lambda: ComponentEntry(name="sgd", params={"lr": 1.0}))
    centralized: bool = False
    report: ReportSection = field(default_factory=ReportSection)
    run: RunSection = field(default_factory=RunSection)
    participation: ParticipationSection = field(default_factory=ParticipationSection)


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------

# Integers are bounded by what a TOML file holds (int64): the resolved config is written back as TOML.
_TOML_INT_MAX = 2**63 - 1
_POSITIVE_INT = Interval(int, 1, _TOML_INT_MAX, closed="both")
_MISSING: Any = object()


@dataclass(frozen=True)
class _Text:
    """A string; ``pattern`` (if given) must match it whole; ``single_line`` forbids control characters."""

    description: str
    pattern: str | None = None
    single_line: bool = False

    def is_satisfied_by(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            return False
        return not self.single_line or (value.strip() != "" and not any(_is_control(c) for c in value))

    def __str__(self) -> str:
        return self.description


def _is_control(char: str) -> bool:
    return ord(char) < 0x20 or ord(char) == 0x7F


@dataclass(frozen=True)
class _Seed:
    """A seed TOML can hold (exact bounds: Interval compares as floats, and 2**63 - 1 rounds up)."""

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _TOML_INT_MAX

    def __str__(self) -> str:
        return "an int in the range [0, 2**63 - 1]"


_SEED = _Seed()
_NAME = _Text(
    "a string of letters, digits, '.', '_' and '-' starting with a letter or digit (at most 100 characters)",
    pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}",
)
_LABEL = _Text("a non-empty single-line string", single_line=True)


def _key_error(key: str, source: str, constraint: object, value: object) -> FedsampleError:
    message = f"The {key!r} key of {source} must be {constraint}. Got {show_value(value)} instead."
    return FedsampleError(message, parameter=key)


def _wants_float(constraint: Constraint) -> bool:
    if isinstance(constraint, NoneOr):
        return _wants_float(constraint.inner)
    return isinstance(constraint, Interval) and constraint.kind is float


class _Table:
    """Reads the keys of one table, remembering those it knows, so that the others can be rejected."""

    def __init__(self, data: object, path: str, source: str) -> None:
        if not isinstance(data, Mapping):
            if not path:
                raise FedsampleError(f"The {source} must be a table of keys. Got {show_value(data)} instead.")
            raise _key_error(path, source, "a table", data)
        self.data: Mapping[str, Any] = data
        self.path = path
        self.source = source
        self.known: list[str] = []

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str, constraint: Constraint, default: Any = _MISSING) -> Any:
        self.known.append(name)
        if name not in self.data:
            if default is _MISSING:
                raise FedsampleError(
                    f"The {self.key(name)!r} key of {self.source} is required: it must be {constraint}.",
                    parameter=self.key(name),
                )
            return default
        value = self.data[name]
        if not constraint.is_satisfied_by(value):
            raise _key_error(self.key(name), self.source, constraint, value)
        return float(value) if value is not None and _wants_float(constraint) else value

    def reject_unknown(self, also_known: Sequence[str] = ()) -> None:
        known = [*self.known, *also_known]
        for name, value in self.data.items():
            if name not in known:
                raise FedsampleError(
                    f"The {self.key(name)!r} key of {self.source} is not a known key "
                    f"(known: {', '.join(known) or 'none'}). Got {show_value(value)} instead.",
                    parameter=self.key(name),
                )

    def rest(self) -> dict[str, Any]:
        return {name: value for name, value in self.data.items() if name not in self.known}


_FOREIGN_ERROR = re.compile(r"The '(?P<name>[^']+)' parameter of \S+ (?P<rest>.*)", re.DOTALL)


def restate_error(exc: Exception, path: str, source: str) -> FedsampleError:
    """A library error about a parameter of ``path`` restated about the config key ``path.<parameter>``."""
    message = " ".join(str(exc).splitlines())
    match = _FOREIGN_ERROR.fullmatch(message)
    if match is not None and getattr(exc, "parameter", None) == match["name"]:
        key = f"{path}.{match['name']}"
        return FedsampleError(f"The {key!r} key of {source} {match['rest']}", parameter=key)
    return FedsampleError(f"The {path!r} table of {source} is invalid: {message}", parameter=path)


def _plain(value: Any) -> Any:
    """JSON/TOML-ready data: arrays and tuples as lists, NumPy scalars as Python ones."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _coerce(declared: object, value: Any) -> Any:
    """An int given for a float field becomes a float (TOML writes ``1`` for ``1.0``)."""
    name = declared if isinstance(declared, str) else getattr(declared, "__name__", str(declared))
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return float(value) if is_int and name in ("float", "float | None", "Optional[float]") else value


def _hyperparameters(table: _Table, cls: type, build: Any, name: str) -> dict[str, Any]:
    """The resolved hyperparameters of the component ``cls`` built as ``build(name, **params)``."""
    fields = [f for f in dataclasses.fields(cls) if f.name != "name"]
    table.reject_unknown([f.name for f in fields])
    try:
        component = build(name, **table.rest())
    except (ValueError, TypeError) as exc:
        raise restate_error(exc, table.path, table.source) from exc
    resolved = {f.name: _coerce(f.type, _plain(getattr(component, f.name))) for f in fields}
    return {key: value for key, value in resolved.items() if value is not None}


def _load_engine() -> Any:
    """:mod:`fedsample.engine`, or ``None`` without PyTorch (components are then checked by name only)."""
    try:
        import fedsample.engine as engine
        import fedsample.engine.loop  # noqa: F401  (the package is lazy: this import is the one that needs torch)
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "torch":
            raise
        return None
    return engine


def _component(data: object, path: str, source: str, default: str) -> ComponentEntry:
    table = _Table(data, path, source)
    engine = _load_engine()
    if path == "algorithm":
        registry = engine.ALGORITHMS if engine is not None else None
        names = tuple(registry) if registry is not None else ALGORITHM_NAMES
    else:
        registry = engine.SERVER_OPTIMIZERS if engine is not None else None
        names = tuple(registry) if registry is not None else SERVER_NAMES
    name = table.get("name", Options(names), default)
    if registry is None:
        return ComponentEntry(name=name, params={k: _plain(v) for k, v in table.rest().items() if v is not None})
    build = engine.make_algorithm if path == "algorithm" else engine.make_server_optimizer
    return ComponentEntry(name=name, params=_hyperparameters(table, registry[name], build, name))


def _seeds(value: object, source: str) -> tuple[int, ...]:
    count = Interval(int, 1, MAX_SEED_COUNT, closed="both")
    if count.is_satisfied_by(value):
        return tuple(range(int(value)))  # type: ignore[call-overload]
    what = f"a non-empty list of distinct ints in [0, 2**63 - 1], or an int n in [1, {MAX_SEED_COUNT}] for [0, n-1]"
    if not isinstance(value, list) or not value:
        raise _key_error("seeds", source, what, value)
    for i, item in enumerate(value):
        if not _SEED.is_satisfied_by(item):
            raise _key_error(f"seeds[{i}]", source, _SEED, item)
    if len(set(value)) != len(value):
        raise _key_error("seeds", source, "a list of distinct ints", value)
    return tuple(int(s) for s in value)


def _federation(data: object, source: str) -> FederationSpec:
    table = _Table(data, "federation", source)
    fields = dataclasses.fields(FederationSpec)
    table.reject_unknown([f.name for f in fields])
    values = {f.name: table.data[f.name] for f in fields if f.name in table.data}
    if "path" in values:
        table.get("path", NoneOr(_Text("a string")))
    if "seed" in values:
        table.get("seed", _SEED)
    dataset = values.get("dataset", "digits")
    if "partition" not in values and isinstance(dataset, str) and dataset in NATURAL_DATASETS:
        values["partition"] = "natural"
    try:
        spec = FederationSpec(**values)
    except (ValueError, TypeError) as exc:
        raise restate_error(exc, "federation", source) from exc
    return dataclasses.replace(spec, **{f.name: _coerce(f.type, getattr(spec, f.name)) for f in fields})


def _model(data: object, source: str, dataset: str) -> ModelSection:
    table = _Table(data, "model", source)
    kind = table.get("kind", Options(("auto", *MODEL_KIND_NAMES)), "auto")
    section = ModelSection(
        kind=kind,
        hidden=table.get("hidden", _POSITIVE_INT, 50),
        bias=table.get("bias", NoneOr(Boolean()), None),
        zero_init=table.get("zero_init", NoneOr(Boolean()), None),
    )
    table.reject_unknown()
    regression = dataset == "osmd-linear"
    if regression and kind not in ("auto", "linear"):
        raise _key_error("model.kind", source, f"'auto' or 'linear' for the regression data set {dataset!r}", kind)
    if not regression and kind == "linear":
        raise _key_error("model.kind", source, f"a classification model for the data set {dataset!r}", kind)
    return section


def _training(data: object, source: str) -> TrainingSection:
    table = _Table(data, "training", source)
    default = TrainingSection()
    values: dict[str, Any] = {
        name: table.get(name, _POSITIVE_INT, getattr(default, name))
        for name in ("rounds", "num_sampled", "local_steps", "batch_size")
    }
    values["local_lr"] = table.get("local_lr", Interval(float, 0, math.inf, closed="neither"), default.local_lr)
    values["lr_decay"] = table.get("lr_decay", Interval(float, 0, 1, closed="right"), default.lr_decay)
    values["eval_every"] = table.get("eval_every", _POSITIVE_INT, default.eval_every)
    values["max_rejected_rounds"] = table.get(
        "max_rejected_rounds", Interval(int, 0, _TOML_INT_MAX, closed="both"), default.max_rejected_rounds
    )
    values["importance"] = table.get("importance", Options(("size", "uniform")), default.importance)
    values["backend"] = table.get("backend", Options(("batched", "sequential")), default.backend)
    device = _Text("'cpu' or 'cuda[:index]'", pattern=r"cpu|cuda(:[0-9]+)?")
    values["device"] = table.get("device", device, default.device)
    table.reject_unknown()
    return TrainingSection(**values)


def _participation(data: object, source: str) -> ParticipationSection:
    table = _Table(data, "participation", source)
    default = ParticipationSection()
    section = ParticipationSection(
        availability=table.get("availability", Interval(float, 0, 1, closed="right"), default.availability),
        availability_trace=table.get("availability_trace", NoneOr(_Text("a non-empty path", pattern=r".+")), None),
        dropout=table.get("dropout", Interval(float, 0, 1, closed="left"), default.dropout),
        over_selection=table.get("over_selection", Interval(float, 0, 10, closed="both"), default.over_selection),
        policy=table.get("policy", Options(("renormalise", "inverse-probability", "ignore")), default.policy),
        return_rates=table.get("return_rates", Options(("known", "estimated")), default.return_rates),
        redraws=table.get("redraws", Interval(int, 0, 1000, closed="both"), default.redraws),
    )
    table.reject_unknown()
    if section.availability_trace is not None and section.availability < 1:
        constraint = "1.0 when participation.availability_trace is given (one availability model)"
        raise _key_error("participation.availability", source, constraint, section.availability)
    known = section.return_rates == "known" and section.policy == "inverse-probability"
    if known and section.availability_trace is not None:
        constraint = "'estimated' with an availability trace under the inverse-probability policy (a trace has no a_i)"
        raise _key_error("participation.return_rates", source, constraint, section.return_rates)
    return section


def _samplers(data: object, source: str, centralized: bool) -> tuple[SamplerEntry, ...]:
    if not isinstance(data, list) or not data:
        raise _key_error("samplers", source, "a non-empty array of tables ([[samplers]])", data)
    names = sampler_names()
    entries: list[tuple[str, str | None, dict[str, Any]]] = []
    taken: dict[str, int] = {}
    for i, item in enumerate(data):
        table = _Table(item, f"samplers[{i}]", source)
        name = table.get("name", Options(tuple(names)))
        label = table.get("label", _LABEL, None)
        if label is not None:
            if label in taken:
                constraint = f"a label no other sampler has (samplers[{taken[label]}] has it)"
                raise _key_error(table.key("label"), source, constraint, label)
            if centralized and label == CENTRALIZED_LABEL:
                constraint = "a label other than 'centralized' (the baseline's) when baselines.centralized is on"
                raise _key_error(table.key("label"), source, constraint, label)
            taken[label] = i
        entries.append((name, label, _hyperparameters(table, sampler_class(name), make_sampler, name)))
    used = set(taken) | ({CENTRALIZED_LABEL} if centralized else set())
    resolved = []
    for name, label, params in entries:
        if label is None:
            label, suffix = name, 1
            while label in used:
                suffix += 1
                label = f"{name}-{suffix}"
            used.add(label)
        resolved.append(SamplerEntry(name=name, label=label, params=params))
    return tuple(resolved)


def config_from_dict(data: Mapping[str, Any], *, source: str = "config") -> ExperimentConfig:
    """Validate ``data`` (a parsed TOML document) and return the resolved config.

    ``source`` names the config in error messages: ``The 'training.rounds' key of config.toml must
    be an int in the range [1, inf). Got 0 instead.``
    """
    top = _Table(data, "", source)
    name = top.get("name", _NAME)
    description = top.get("description", _Text("a string"), "")
    top.known.append("seeds")
    seeds = _seeds(data.get("seeds", [0]), source)
    federation = _federation(data.get("federation", {}), source)
    model = _model(data.get("model", {}), source, federation.dataset)
    training = _training(data.get("training", {}), source)
    algorithm = _component(data.get("algorithm", {}), "algorithm", source, "fedavg")
    server = _component(data.get("server", {}), "server", source, "sgd")
    baselines = _Table(data.get("baselines", {}), "baselines", source)
    centralized = baselines.get("centralized", Boolean(), False)
    baselines.reject_unknown()
    report_table = _Table(data.get("report", {}), "report", source)
    report = ReportSection(
        target_accuracy=report_table.get("target_accuracy", NoneOr(Interval(float, 0, 1, closed="both")), None),
        # Finite, as summarize needs: a target of inf would pass here and fail the report later.
        target_loss=report_table.get("target_loss", NoneOr(Interval(float, 0, math.inf, closed="left")), None),
        rolling_window=report_table.get("rolling_window", _POSITIVE_INT, 10),
    )
    report_table.reject_unknown()
    run_table = _Table(data.get("run", {}), "run", source)
    run = RunSection(
        checkpoint_every=run_table.get("checkpoint_every", Interval(int, 0, _TOML_INT_MAX, closed="both"), 10)
    )
    run_table.reject_unknown()
    participation = _participation(data.get("participation", {}), source)
    top.known += ["federation", "model", "training", "algorithm", "server", "samplers", "baselines", "report", "run"]
    top.known.append("participation")
    top.reject_unknown()
    if "samplers" not in data:
        raise FedsampleError(
            f"The 'samplers' key of {source} is required: it must be a non-empty array of tables ([[samplers]]).",
            parameter="samplers",
        )
    return ExperimentConfig(
        name=name,
        description=description,
        seeds=seeds,
        federation=federation,
        model=model,
        training=training,
        algorithm=algorithm,
        server=server,
        samplers=_samplers(data["samplers"], source, bool(centralized)),
        centralized=bool(centralized),
        report=report,
        run=run,
        participation=participation,
    )


# ----------------------------------------------------------------------------------------------
# Files: reading and resolved dictionaries
# ----------------------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> ExperimentConfig:
    """Read and validate the TOML config at ``path``.

    A relative ``federation.path`` is taken relative to the file's directory and stored absolute.
    """
    file = Path(path)
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FedsampleError(f"The config file {str(file)!r} cannot be read: {reason}.", parameter="path") from exc
    except UnicodeDecodeError as exc:
        raise FedsampleError(
            f"The config file {str(file)!r} is not UTF-8 text (byte {exc.start}).", parameter="path"
        ) from exc
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # RecursionError: arrays or tables nested too deep
        reason = " ".join(str(exc).splitlines())
        raise FedsampleError(f"The config file {str(file)!r} is not valid TOML: {reason}.", parameter="path") from exc
    federation = data.get("federation")
    if isinstance(federation, dict) and isinstance(federation.get("path"), str) and federation["path"]:
        location = Path(federation["path"]).expanduser()
        federation["path"] = str(location if location.is_absolute() else (file.parent / location).resolve())
    participation = data.get("participation")
    if (
        isinstance(participation, dict)
        and isinstance(participation.get("availability_trace"), str)
        and participation["availability_trace"]
    ):
        location = Path(participation["availability_trace"]).expanduser()
        participation["availability_trace"] = str(
            location if location.is_absolute() else (file.parent / location).resolve()
        )
    return config_from_dict(data, source=str(file))


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved config as plain data (JSON- and TOML-ready, keys in a fixed order, ``None`` left out)."""

    def table(values: Mapping[str, Any]) -> dict[str, Any]:
        return {key: _plain(value) for key, value in values.items() if value is not None}

    def params(values: Mapping[str, Any]) -> dict[str, Any]:
        return table({key: values[key] for key in sorted(values)})

    spec = cfg.federation
    participation = {}
    if cfg.participation != ParticipationSection():
        participation = {"participation": table(dataclasses.asdict(cfg.participation))}
    return {
        "name": cfg.name,
        "description": cfg.description,
        "seeds": list(cfg.seeds),
        "federation": table({f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}),
        "model": table(dataclasses.asdict(cfg.model)),
        "training": table(dataclasses.asdict(cfg.training)),
        "algorithm": {"name": cfg.algorithm.name, **params(cfg.algorithm.params)},
        "server": {"name": cfg.server.name, **params(cfg.server.params)},
        "samplers": [{"name": e.name, "label": e.label, **params(e.params)} for e in cfg.samplers],
        "baselines": {"centralized": cfg.centralized},
        "report": table(dataclasses.asdict(cfg.report)),
        "run": table(dataclasses.asdict(cfg.run)),
        **participation,
    }
