"""Experiment configs: one TOML file describes a comparison, validated on load, written back resolved.

A config names the federation, the model, the training settings, the local algorithm and server
optimizer, the samplers to compare and the seeds each of them runs with::

    name = "digits-comparison"   # required: letters, digits, '.', '_', '-', starting with a letter or digit
    description = "MD vs clustered sampling on the embedded digits"   # default ""
    seeds = [0, 1, 2]            # distinct ints in [0, 2**63 - 1], or n meaning [0, ..., n - 1]; default [0]

    [federation]                 # FederationSpec's fields and defaults; partition defaults to "natural" for
    dataset = "digits"           # osmd-linear, shakespeare, femnist and a data file with the client column
    num_clients = 50             # dataset: a built-in name or a data file (.npz, .csv, .parquet, .pq) read with
                                 # target_column "y", client_column "client", feature_columns (default: every
                                 # other numeric column), task "auto" and test_path (a file of test rows), keys
                                 # that keep their defaults with a built-in dataset (docs/data.md). A relative
                                 # path (dataset, test_path, path) is relative to the config file (load_config
                                 # stores it absolute)

    [model]
    kind = "auto"                # "auto" (decided from the data, as ``fedsample run`` does) or a model kind
    hidden = 50                  # bias, zero_init: default decided from the data set (off/on for osmd-linear)
    # or a user's module (docs/your-model.md); kind then stays "auto":
    # factory = "my_models:small_cnn"   # package.module:function returning an nn.Module
    # args = {classes = 10}             # its keyword arguments
    # loss = "auto"                     # "cross-entropy", "mse" or "package.module:function" (per-sample losses)
    # path = "."                        # searched first for those modules: default the config file's directory
    # metrics = {top2 = "my_models:top2"}  # extra test metrics (per-sample callables), any model

    [training]                   # rounds 50, num_sampled 5, local_steps 10, batch_size 20, local_lr 0.1,
    rounds = 50                  # lr_decay 1.0, eval_every 1, importance "size", backend "batched", device "cpu",
                                 # max_rejected_rounds 20 (stop when every update is NaN/inf this many rounds),
                                 # threads "auto" (PyTorch's threads, capped at the usable CPUs) or a count

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
    measure_bias = false         # each sampler's bias on a fixed feedback sequence (bias.json, report.md)

    [run]
    checkpoint_every = 10        # rounds between checkpoints (0: none)

    [tracking]                   # optional: every round's metrics as the runs train (docs/tracking.md)
    tensorboard = false          # event files in RUN_DIR/tensorboard (extra tensorboard)
    mlflow = false               # MLflow runs (extra mlflow): mlflow_uri (default sqlite:///RUN_DIR/mlflow.db;
                                 # a local store's path relative to the config file) and mlflow_experiment
                                 # (default: the config's name)

    [participation]              # availability and failures (docs/failures.md); default: nobody fails
    availability = 0.8           # a: each client is available in a round with probability a (default 1.0)
    availability_trace = "t.csv" # or a CSV trace client,start,end (relative to the config file); not with a < 1
    dropout = 0.3                # d in [0, 1): a selected client fails to return (default 0.0)
    over_selection = 0.2         # o in [0, 10]: ask ceil(m (1 + o)) clients, keep the first m to reply
    policy = "inverse-probability"  # or "renormalise" (default), "ignore", "fedau", "mifa", "fedvarp"
    return_rates = "known"       # or "estimated" (needed with a trace under inverse-probability)
    redraws = 10                 # tries to replace an unavailable draw of a per-row design (0: skip it)
    availability_process = "markov"  # or "bernoulli" (default), "cyclic": a is the long-run rate
    markov_off_to_on = 0.05      # the chain's switch-on probability (FedAU's markov-q)
    cyclic_period = 100          # rounds of a cycle (FedAU's cyclic-C)
    availability_label_alpha = 0.1   # rates tied to the labels, mean a, floor availability_minimum (0.02)
    fedau_cutoff = 100000        # K of the "fedau" policy
    mifa_variant = "released"    # the "mifa" policy as its authors released it (default "zeros")

    [system]                     # optional: a simulated clock (docs/system.md); absent: no clock
    distribution = "lognormal"   # or "loguniform", "constant": the clients' spread around the medians
    compute = 0.005              # median seconds per sample (for a model of reference_parameters)
    upload = 10.0                # median upload bandwidth, Mbit/s (download: 50.0)
    deadline = 30.0              # optional: seconds; slower clients are late
    trace = "devices.csv"        # optional: client,compute,upload,download (CSV or JSON, relative to the file)

Unknown keys are rejected at every level. A sampler's label defaults to its name, made unique by
suffixes (two unlabelled ``md`` entries are ``md`` and ``md-2``, skipping labels given explicitly);
labels are single-line and unique, and ``centralized`` is reserved when the baseline is on.
Every table but ``[[samplers]]`` is read by one reader over its declared parameter table
(:mod:`fedsample.experiments.config.sections`; ``[algorithm]`` and ``[server]`` over the engine registry's,
without PyTorch), and ``fedsample run --set KEY=VALUE`` reaches every key of them. Sampler
hyperparameters are checked by building the sampler. The *resolved* config (:func:`config_to_dict`,
:func:`~fedsample.experiments.config.toml_writer.config_to_toml`) has every default filled in, including
the hyperparameters' own defaults; ``None`` values are left out, since TOML has no null, and read back as ``None``.
The ``[participation]`` table is written only when it differs from the default, the ``[system]``
table only when the config has one (its presence turns the clock on, even with every default).

This module holds the schema and the reading; the reader of one table
(:mod:`fedsample.experiments.config.reader`), the ``[[samplers]]`` entries
(:mod:`fedsample.experiments.config.samplers`), the TOML writer
(:mod:`fedsample.experiments.config.toml_writer`) and the overrides (:mod:`fedsample.experiments.config.overrides`)
have their own modules.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsample._imports import is_reference
from fedsample._reading import open_input
from fedsample._suggestions import name_score
from fedsample._validation import Interval, KnownNames, Options, Text, invalid
from fedsample.data.builders import NATURAL_DATASETS, FederationSpec, has_own_clients, is_data_file, is_python_data
from fedsample.engine.registry import ALGORITHMS, SERVER_OPTIMIZERS, component
from fedsample.errors import FedsampleError
from fedsample.experiments.config.reader import (
    KEY_SYNONYMS,
    TOML_INT_MAX,
    ConfigTable,
    key_error,
    plain,
    read_section,
    restate_error,
    wants_float,
)
from fedsample.experiments.config.samplers import SamplerEntry, read_samplers
from fedsample.experiments.config.sections import (
    BASELINES,
    FEDERATION,
    MODEL_SECTION,
    PARTICIPATION,
    REPORT,
    RUN,
    SECTIONS,
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

__all__ = [
    "CONFIG_KEYS",
    "NATURAL_DATASETS",
    "TOML_INT_MAX",
    "ComponentEntry",
    "ExperimentConfig",
    "ModelSection",
    "ParticipationSection",
    "ReportSection",
    "RunSection",
    "SamplerEntry",
    "SystemSection",
    "TrainingSection",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "restate_error",
]

MAX_SEED_COUNT = 10_000
# The scalars, then the tables.
TOP_LEVEL_KEYS: tuple[str, ...] = ("name", "description", "seeds", "federation", "model", "training", "algorithm")
TOP_LEVEL_KEYS += ("server", "samplers", "baselines", "report", "run", "participation", "system", "tracking")


def _config_keys() -> tuple[str, ...]:
    """Every key of a config but the samplers' hyperparameters, dotted (``training.rounds``)."""
    keys = [*TOP_LEVEL_KEYS, *(f"{name}.{key}" for name, table in SECTIONS.items() for key in table.parameters)]
    for kind, registry in (("algorithm", ALGORITHMS), ("server", SERVER_OPTIMIZERS)):
        keys += [f"{kind}.name", *(f"{kind}.{key}" for table in registry.values() for key in table.parameters)]
    return tuple(dict.fromkeys(keys))


CONFIG_KEYS = _config_keys()
"""Every key a config takes (the samplers' hyperparameters aside): what an unknown key is compared with."""


@dataclass(frozen=True, kw_only=True)
class ComponentEntry:
    """A local algorithm or server optimizer: its name and hyperparameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


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
    system: SystemSection | None = None
    tracking: TrackingSection = field(default_factory=TrackingSection)


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
        return _read_config(data, source)
    except FedsampleError as exc:
        if not isinstance(exc.constraint, KnownNames) or exc.parameter is None:
            raise
        closest = closest_keys(exc.parameter, exc.constraint.names)
        raise invalid(exc.parameter, source, exc.constraint, exc.value, noun="key", suggestions=closest) from None


def closest_keys(key: str, table_keys: tuple[str, ...] = (), limit: int = 3) -> tuple[str, ...]:
    """The config keys closest to the unknown ``key`` (dotted): of its own table (``table_keys``), and those
    of the others that are a synonym or a typo away (a table only for a top-level key), its own first on a tie.

    >>> closest_keys("rounds"), closest_keys("training.lr", ("rounds", "local_lr", "lr_decay"))
    (('training.rounds',), ('training.local_lr', 'server.lr', 'training.lr_decay'))
    """
    table, _, name = key.rpartition(".")
    own = [f"{table}.{k}" if table else k for k in table_keys]
    tables = () if not table else TOP_LEVEL_KEYS[3:]  # a key inside a table is not a table
    # Elsewhere: another table's keys (not another server optimizer's, which server.name would have to change).
    elsewhere = [k for k in CONFIG_KEYS if k.rpartition(".")[0] != table and k not in tables]
    scored = [(-(name_score(name, k.rpartition(".")[2], KEY_SYNONYMS) + 0.05), i, k) for i, k in enumerate(own)]
    for index, candidate in enumerate(elsewhere, start=len(own)):
        score = name_score(name, candidate.rpartition(".")[2], KEY_SYNONYMS)
        if score >= 0.85:  # a synonym, the same name, or a close typo: a word in common is too loose a match
            scored.append((-score, index, candidate))
    return tuple(candidate for score, _, candidate in sorted(scored)[:limit] if score < -0.05 and candidate != key)


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


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved config as plain data (JSON- and TOML-ready, keys in a fixed order, ``None`` left out)."""

    def table(values: Mapping[str, Any]) -> dict[str, Any]:
        return {key: plain(value) for key, value in values.items() if value is not None}

    def params(values: Mapping[str, Any]) -> dict[str, Any]:
        return table({key: values[key] for key in sorted(values)})

    spec = cfg.federation
    participation = {}
    if cfg.participation != ParticipationSection():
        participation = {"participation": table(cfg.participation)}
    return {
        "name": cfg.name,
        "description": cfg.description,
        "seeds": list(cfg.seeds),
        "federation": table({f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}),
        "model": table(cfg.model),
        "training": table(cfg.training),
        "algorithm": {"name": cfg.algorithm.name, **params(cfg.algorithm.params)},
        "server": {"name": cfg.server.name, **params(cfg.server.params)},
        "samplers": [{"name": e.name, "label": e.label, **params(e.params)} for e in cfg.samplers],
        "baselines": {"centralized": cfg.centralized},
        "report": table(cfg.report),
        "run": table(cfg.run),
        **participation,
        **({"system": table(cfg.system)} if cfg.system is not None else {}),
        **({"tracking": table(cfg.tracking)} if cfg.tracking != TrackingSection() else {}),
    }
