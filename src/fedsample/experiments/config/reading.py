"""Reading an experiment config: a TOML file or a dictionary, each key checked once against its declared
constraint (:mod:`fedsample.experiments.config.experiment` describes the config and its tables)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsample._imports import is_reference
from fedsample._reading import open_input
from fedsample._validation import Interval, KnownNames, Options, Text, invalid
from fedsample.data.builders import FederationSpec, has_own_clients, is_data_file, is_python_data
from fedsample.engine.registry import ALGORITHMS, SERVER_OPTIMIZERS, component
from fedsample.errors import FedsampleError
from fedsample.experiments.config.experiment import (
    TOP_LEVEL_KEYS,
    ComponentEntry,
    ExperimentConfig,
    closest_keys,
    mark_read,
)
from fedsample.experiments.config.reader import (
    TOML_INT_MAX,
    ConfigTable,
    key_error,
    read_section,
    restate_error,
    wants_float,
)
from fedsample.experiments.config.samplers import read_samplers
from fedsample.experiments.config.sections import (
    BASELINES,
    FEDERATION,
    MODEL_SECTION,
    PARTICIPATION,
    REPORT,
    RUN,
    SYSTEM,
    TRACKING,
    TRAINING_SECTION,
    ModelSection,
    ParticipationSection,
    ReportSection,
    RunSection,
    SystemSection,
    TrackingSection,
    TrainingSection,
)
from fedsample.participation.parameters import check_participation_rules

__all__ = ["MAX_CONFIG_BYTES", "MAX_SEED_COUNT", "config_from_dict", "imported_references", "load_config"]

MAX_SEED_COUNT = 10_000


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Seed:
    """A seed TOML can hold (exact bounds: Interval compares as floats, and 2**63 - 1 rounds up)."""

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= TOML_INT_MAX

    def __str__(self) -> str:
        return "an int in the range [0, 2**63 - 1]"


_SEED = _Seed()
_NAME = Text(
    "a string of letters, digits, '.', '_' and '-' starting with a letter or digit (at most 100 characters)",
    pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}",
)


def _component(data: object, kind: str, source: str, default: str) -> ComponentEntry:
    """``[algorithm]`` or ``[server]``: a name of the engine's registry and that component's parameters."""
    table = ConfigTable(data, kind, source)
    names = tuple(ALGORITHMS if kind == "algorithm" else SERVER_OPTIMIZERS)
    name = table.get("name", Options(names), default)
    parameters = component(kind, name)
    table.reject_unknown(list(parameters.parameters))
    params = table.rest()
    try:
        resolved = parameters.check(params)
    except FedsampleError as exc:
        raise restate_error(exc, kind, source) from exc
    for key in params:  # integers beyond TOML's, as every other key
        table.get(key, parameters.parameters[key].constraint)
    floats = {key for key, p in parameters.parameters.items() if wants_float(p.constraint)}
    return ComponentEntry(name=name, params={k: float(v) if k in floats else v for k, v in resolved.items()})


def _seeds(value: object, source: str) -> tuple[int, ...]:
    count = Interval(int, 1, MAX_SEED_COUNT, closed="both")
    if count.is_satisfied_by(value):
        return tuple(range(int(value)))  # type: ignore[call-overload]
    what = f"a non-empty list of distinct ints in [0, 2**63 - 1], or an int n in [1, {MAX_SEED_COUNT}] for [0, n-1]"
    if not isinstance(value, list) or not value:
        raise key_error("seeds", source, what, value)
    for i, item in enumerate(value):
        if not _SEED.is_satisfied_by(item):
            raise key_error(f"seeds[{i}]", source, _SEED, item)
    if len(set(value)) != len(value):
        raise key_error("seeds", source, "a list of distinct ints", value)
    return tuple(int(s) for s in value)


def _federation(data: object, source: str) -> FederationSpec:
    """``[federation]``; a partition not given is ``"natural"`` for data that come split into clients
    (osmd-linear, LEAF, a data file with the client column: only its column names are read)."""
    values = read_section(data, FEDERATION, source)
    given = data if isinstance(data, Mapping) else {}
    try:
        if "partition" not in given and has_own_clients(values["dataset"], client_column=values["client_column"]):
            values["partition"] = "natural"
        return FederationSpec(**values)
    except FedsampleError as exc:  # a combination of keys (the partition of a data set, a missing path)
        raise restate_error(exc, "federation", source) from exc


def _model(data: object, source: str, dataset: str) -> ModelSection:
    """``[model]``: one of the papers' models (``kind``), or a user's factory with its arguments and loss.

    A factory or loss named by reference is looked up in ``path`` first: the config file's directory
    (:func:`load_config` fills it in), else the working directory, recorded absolute.
    """
    section = ModelSection(**read_section(data, MODEL_SECTION, source))
    kind = section.kind
    if section.factory is not None and kind != "auto":
        raise key_error("model.kind", source, "'auto' when model.factory names the model", kind)
    if section.factory is None and section.args is not None:
        raise key_error("model.args", source, "absent unless model.factory names a factory to call", section.args)
    references = bool(imported_references(section))
    if references and section.path is None:
        section = ModelSection(**{**section, "path": os.getcwd()})
    elif section.path is not None:
        section = ModelSection(**{**section, "path": str(Path(section.path).expanduser().absolute())})
    if is_data_file(dataset) or is_python_data(dataset):  # the task is known once the data are read
        return section
    regression = dataset == "osmd-linear"
    if regression and kind not in ("auto", "linear"):
        raise key_error("model.kind", source, f"'auto' or 'linear' for the regression data set {dataset!r}", kind)
    if not regression and kind == "linear":
        raise key_error("model.kind", source, f"a classification model for the data set {dataset!r}", kind)
    return section


def _names_code(table: Mapping[str, Any]) -> bool:
    """Whether a raw ``[model]`` table names code to import (a factory, loss or metric reference)."""
    metrics = table.get("metrics")
    named = [table.get("factory"), table.get("loss"), *(metrics.values() if isinstance(metrics, Mapping) else ())]
    return any(is_reference(ref) and not str(ref).startswith("python:") for ref in named)


def imported_references(section: ModelSection) -> list[str]:
    """The ``package.module:function`` references of a ``[model]`` table that building it imports: its
    factory, loss and metrics (a ``python:NAME`` given from Python is never imported)."""
    named = [section.factory, section.loss, *dict(section.metrics or {}).values()]
    return [ref for ref in named if isinstance(ref, str) and is_reference(ref) and not ref.startswith("python:")]


def _participation(data: object, source: str) -> ParticipationSection:
    section = ParticipationSection(**read_section(data, PARTICIPATION, source))
    values = {name: getattr(section, name) for name in PARTICIPATION.parameters}
    try:
        check_participation_rules(values, policies=(section.policy,), name=lambda key: f"participation.{key}")
    except FedsampleError as exc:
        raise key_error(str(exc.parameter), source, exc.constraint, exc.value) from None
    return section


def config_from_dict(data: Mapping[str, Any], *, source: str = "config") -> ExperimentConfig:
    """Validate ``data`` (a parsed TOML document) and return the resolved config.

    ``source`` names the config in error messages: ``The 'training.rounds' key of config.toml must
    be an int in the range [1, inf). Got 0 instead.`` An unknown key is told the closest keys of its
    table and of the others: ``rounds`` at the top level is ``training.rounds``.
    """
    try:
        return mark_read(_read_config(data, source))
    except FedsampleError as exc:
        if not isinstance(exc.constraint, KnownNames) or exc.parameter is None:
            raise
        closest = closest_keys(exc.parameter, exc.constraint.names)
        raise invalid(exc.parameter, source, exc.constraint, exc.value, noun="key", suggestions=closest) from None


def _read_config(data: Mapping[str, Any], source: str) -> ExperimentConfig:
    top = ConfigTable(data, "", source)
    name = top.get("name", _NAME)
    description = top.get("description", Text("a string"), "")
    top.known.append("seeds")
    seeds = _seeds(data.get("seeds", [0]), source)
    federation = _federation(data.get("federation", {}), source)
    model = _model(data.get("model", {}), source, federation.dataset)
    training = TrainingSection(**read_section(data.get("training", {}), TRAINING_SECTION, source))
    algorithm = _component(data.get("algorithm", {}), "algorithm", source, "fedavg")
    server = _component(data.get("server", {}), "server", source, "sgd")
    centralized = bool(read_section(data.get("baselines", {}), BASELINES, source)["centralized"])
    report = ReportSection(**read_section(data.get("report", {}), REPORT, source))
    run = RunSection(**read_section(data.get("run", {}), RUN, source))
    participation = _participation(data.get("participation", {}), source)
    top.known += TOP_LEVEL_KEYS[3:]
    system = SystemSection(**read_section(data["system"], SYSTEM, source)) if "system" in data else None
    tracking = TrackingSection(**read_section(data.get("tracking", {}), TRACKING, source))
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
        samplers=read_samplers(data["samplers"], source, centralized),
        centralized=centralized,
        report=report,
        run=run,
        participation=participation,
        system=system,
        tracking=tracking,
    )


# ----------------------------------------------------------------------------------------------
# Files: reading and resolved dictionaries
# ----------------------------------------------------------------------------------------------


# A config is a few kilobytes; this bound only stops a mistaken path (a link to /dev/zero, a data file).
MAX_CONFIG_BYTES = 16 * 2**20


def load_config(path: str | os.PathLike[str]) -> ExperimentConfig:
    """Read and validate the TOML config at ``path``.

    A relative ``federation.path``, ``federation.dataset`` (a data file), ``federation.test_path``,
    ``participation.availability_trace`` or ``system.trace`` is taken relative to the file's
    directory and stored absolute.
    """
    file = Path(path)
    try:
        with open_input(file) as handle:  # a FIFO without a writer reads as empty instead of hanging
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FedsampleError(f"The config file {str(file)!r} cannot be read: {reason}.", parameter="path") from exc
    if len(raw) > MAX_CONFIG_BYTES:  # reading stops there, so a link to /dev/zero is refused at once
        raise FedsampleError(
            f"The config file {str(file)!r} must hold at most {MAX_CONFIG_BYTES} bytes. Got a larger file instead.",
            parameter="path",
        )
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (an editor's) is not part of the TOML
    except UnicodeDecodeError as exc:
        raise FedsampleError(
            f"The config file {str(file)!r} is not UTF-8 text (byte {exc.start}).", parameter="path"
        ) from exc
    try:
        data = tomllib.loads(text)
    # RecursionError: arrays or tables nested too deep; a bare ValueError: an int of more than 4300 digits.
    except (ValueError, RecursionError) as exc:
        reason = " ".join(str(exc).splitlines())
        raise FedsampleError(f"The config file {str(file)!r} is not valid TOML: {reason}.", parameter="path") from exc
    paths = ("federation", "path"), ("federation", "dataset"), ("federation", "test_path"), ("model", "path")
    model = data.get("model")
    if isinstance(model, dict) and "path" not in model and _names_code(model):
        model["path"] = str(file.parent.resolve())  # a factory, loss or metric module beside the config file
    for section, key in (*paths, ("participation", "availability_trace"), ("system", "trace")):
        table = data.get(section)
        if key == "dataset" and not (isinstance(table, dict) and is_data_file(table.get(key))):
            continue  # a built-in name, not a path
        if isinstance(table, dict) and isinstance(table.get(key), str) and table[key]:
            location = Path(table[key]).expanduser()
            table[key] = str(location if location.is_absolute() else (file.parent / location).resolve())
    tracking = data.get("tracking")
    if isinstance(tracking, dict) and isinstance(tracking.get("mlflow_uri"), str):  # a local store beside the file
        from fedsample.experiments.results.tracking import absolute_store_uri

        tracking["mlflow_uri"] = absolute_store_uri(tracking["mlflow_uri"], file.parent.resolve())
    return config_from_dict(data, source=str(file))
