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

    [privacy]                    # optional: user-level DP-FedAvg (docs/privacy.md); absent: no noise
    clip_norm = 1.0              # C; per_layer = true clips each tensor to C / sqrt(L)
    noise_multiplier = 1.0       # z (or target_epsilon = 4.0: each sampler's z solved for that budget)
    delta = 1e-5                 # and accountant = "pld" (or "rdp"); max_epsilon: stop before exceeding it
    target_quantile = 0.5        # optional: adaptive clipping (clip_learning_rate, count_noise_multiplier)

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

This module holds the schema and the resolved dictionary; the reading
(:mod:`~fedsample.experiments.config.reading`), the reader of one table
(:mod:`~fedsample.experiments.config.reader`), the ``[[samplers]]`` entries
(:mod:`~fedsample.experiments.config.samplers`), the TOML writer
(:mod:`~fedsample.experiments.config.toml_writer`) and the overrides
(:mod:`~fedsample.experiments.config.overrides`) have their own modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedsample._suggestions import name_score
from fedsample.data.builders import FederationSpec
from fedsample.engine.registry import ALGORITHMS, SERVER_OPTIMIZERS
from fedsample.experiments.config import sections
from fedsample.experiments.config.reader import KEY_SYNONYMS, plain
from fedsample.experiments.config.samplers import SamplerEntry

__all__ = [
    "CONFIG_KEYS",
    "TOP_LEVEL_KEYS",
    "ComponentEntry",
    "ExperimentConfig",
    "closest_keys",
    "config_to_dict",
    "is_read",
    "mark_read",
]

# The scalars, then the tables.
TOP_LEVEL_KEYS: tuple[str, ...] = ("name", "description", "seeds", "federation", "model", "training", "algorithm")
TOP_LEVEL_KEYS += ("server", "samplers", "baselines", "report", "run", "participation", "system", "tracking", "privacy")


def _config_keys() -> tuple[str, ...]:
    """Every key of a config but the samplers' hyperparameters, dotted (``training.rounds``)."""
    keys = [
        *TOP_LEVEL_KEYS,
        *(f"{name}.{key}" for name, table in sections.SECTIONS.items() for key in table.parameters),
    ]
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
    model: sections.ModelSection = field(default_factory=sections.ModelSection)
    training: sections.TrainingSection = field(default_factory=sections.TrainingSection)
    algorithm: ComponentEntry = field(default_factory=lambda: ComponentEntry(name="fedavg"))
    server: ComponentEntry = field(default_factory=lambda: ComponentEntry(name="sgd", params={"lr": 1.0}))
    centralized: bool = False
    report: sections.ReportSection = field(default_factory=sections.ReportSection)
    run: sections.RunSection = field(default_factory=sections.RunSection)
    participation: sections.ParticipationSection = field(default_factory=sections.ParticipationSection)
    system: sections.SystemSection | None = None
    tracking: sections.TrackingSection = field(default_factory=sections.TrackingSection)
    privacy: sections.PrivacySection | None = None


# Set on a config the reader made (an attribute, not a field: dataclasses.replace makes an unmarked copy).
_READ = "_fedsample_read"


def mark_read(config: ExperimentConfig) -> ExperimentConfig:
    """``config``, marked as made by the reader: what the library builds from it trusts it (checked once)."""
    object.__setattr__(config, _READ, True)
    return config


def is_read(config: ExperimentConfig) -> bool:
    """Whether the reader made ``config`` (a hand-built or replaced one is read again where it enters)."""
    return vars(config).get(_READ) is True


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
    # For a sampler's entry, whose keys are its hyperparameters, only a key of that very name elsewhere
    # (samplers[0].rounds is training.rounds misplaced, but md's eta is no typo of server.beta).
    if table.startswith("samplers["):
        elsewhere = [k for k in elsewhere if k.rpartition(".")[2] == name]
    scored = [(-(name_score(name, k.rpartition(".")[2], KEY_SYNONYMS) + 0.05), i, k) for i, k in enumerate(own)]
    for index, candidate in enumerate(elsewhere, start=len(own)):
        score = name_score(name, candidate.rpartition(".")[2], KEY_SYNONYMS)
        if score >= 0.85:  # a synonym, the same name, or a close typo: a word in common is too loose a match
            scored.append((-score, index, candidate))
    return tuple(candidate for score, _, candidate in sorted(scored)[:limit] if score < -0.05 and candidate != key)


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved config as plain data (JSON- and TOML-ready, keys in a fixed order, ``None`` left out)."""

    def table(values: Mapping[str, Any]) -> dict[str, Any]:
        return {key: plain(value) for key, value in values.items() if value is not None}

    def params(values: Mapping[str, Any]) -> dict[str, Any]:
        return table({key: values[key] for key in sorted(values)})

    spec = cfg.federation
    unused = sections.unused_federation_keys(
        spec
    )  # alpha for an iid partition...: the resolved config holds what is read
    participation = {}
    if cfg.participation != sections.ParticipationSection():
        participation = {"participation": table(cfg.participation)}
    return {
        "name": cfg.name,
        "description": cfg.description,
        "seeds": list(cfg.seeds),
        "federation": table({f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name not in unused}),
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
        **({"tracking": table(cfg.tracking)} if cfg.tracking != sections.TrackingSection() else {}),
        **({"privacy": table(cfg.privacy)} if cfg.privacy is not None else {}),
    }
