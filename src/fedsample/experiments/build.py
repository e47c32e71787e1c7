"""From a config to engine objects: the federation, the model, the training settings and the runs.

Every run of an experiment shares one federation (built from ``federation.seed``) and one initial
model (drawn from :attr:`Experiment.init_seed`); runs differ only by sampler and seed. With
``federation.per_seed`` each run seed has its own realization of the federation instead
(:meth:`Experiment.federation_groups`). Needs the ``torch`` extra.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from fedsample._imports import import_reference
from fedsample.data.builders import build_federation
from fedsample.data.federated import FederatedDataset
from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, fit_to_model, make_algorithm, make_server_optimizer
from fedsample.engine.model_binding import BoundModel, check_batches
from fedsample.engine.registry import LOSS_NAMES
from fedsample.engine.specs import check_round_memory
from fedsample.engine.user_model import Model, ModelLike
from fedsample.errors import FedsampleError
from fedsample.experiments.config import (
    ExperimentConfig,
    ParticipationSection,
    config_from_dict,
    config_to_dict,
    restate_error,
)
from fedsample.experiments.config.experiment import is_read
from fedsample.participation.availability import (
    AlwaysAvailable,
    Availability,
    load_availability_trace,
)
from fedsample.participation.parameters import (
    PARTICIPATION,
    build_availability,
    client_label_counts,
    participation_from_values,
)
from fedsample.participation.setting import Participation
from fedsample.participation.system import SystemModel, load_system_trace
from fedsample.privacy.mechanism import DPFedAvg
from fedsample.samplers import make_sampler

__all__ = [
    "Experiment",
    "build_experiment",
    "build_model",
    "build_participation",
    "check_model",
    "check_training_memory",
    "majority_labels",
    "model_name",
    "paper_model",
    "resolve_model_kind",
]


@dataclass(frozen=True, eq=False)
class Experiment:
    """A config made concrete: ``runs`` holds one run per sampler entry and seed, samplers-major.

    ``data`` is the federation every run trains on, or with ``federation.per_seed`` the one of the
    first seed (the others are built by :meth:`data_for_seed`).
    """

    config: ExperimentConfig
    data: FederatedDataset
    model: ModelLike
    training: TrainingConfig
    runs: list[RunSpec]
    participation: Participation = field(default_factory=Participation)
    # ``model`` bound to the data once, as build_experiment checked it: the runs train it (no second bind).
    bound: BoundModel | None = None

    @property
    def trained_model(self) -> ModelLike | BoundModel:
        """What the runs train: the bound model when there is one."""
        return self.bound if self.bound is not None else self.model

    @property
    def privacy(self) -> DPFedAvg | None:
        """The ``[privacy]`` table's DP-FedAvg (``None`` without one)."""
        return None if self.config.privacy is None else DPFedAvg(**self.config.privacy)

    @property
    def init_seed(self) -> int:
        """Seed of the initial global model shared by every run (the federation's seed)."""
        return self.config.federation.seed

    def data_for_seed(self, seed: int) -> FederatedDataset:
        """The federation the runs of ``seed`` train on: ``data``, or its own realization with ``per_seed``."""
        spec = self.config.federation
        if not spec.per_seed or seed == self.config.seeds[0]:
            return self.data
        return build_federation(spec, replicate=seed)

    def federation_groups(self, indices: Sequence[int] | None = None) -> list[tuple[FederatedDataset, list[int]]]:
        """The runs ``indices`` (default: all) grouped by the federation they train on, in first-seen order.

        One group when every run shares the federation; with ``federation.per_seed``, one group per
        run seed, so each realization is built once and its runs still train together.
        """
        chosen = list(range(len(self.runs))) if indices is None else list(indices)
        if not self.config.federation.per_seed:
            return [(self.data, chosen)]
        by_seed: dict[int, list[int]] = {}
        for index in chosen:
            by_seed.setdefault(self.runs[index].seed, []).append(index)
        return [(self.data_for_seed(seed), group) for seed, group in by_seed.items()]


def resolve_model_kind(kind: str, data: Any) -> str:
    """The model for ``data`` when ``kind`` is ``"auto"``: ``linear`` for regression, ``cnn`` for
    images ``(channels, height, width)``, ``lstm`` for integer (character) sequences, else ``mlp``."""
    if kind != "auto":
        return kind
    if data.task == "regression":
        return "linear"
    if len(data.sample_shape) == 3:
        return "cnn"
    if data.train_features.dtype.kind == "i":
        return "lstm"
    return "mlp"


def majority_labels(data: FederatedDataset) -> np.ndarray:
    """The label each client holds most (ties to the smallest label), from its training rows."""
    labels = np.asarray(data.train_targets, dtype=np.int64)
    sizes: np.ndarray = np.diff(np.asarray(data.train_indptr, dtype=np.int64)).astype(np.int64)
    counts = np.zeros((sizes.size, int(labels.max()) + 1 if labels.size else 1), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(sizes.size), sizes), labels), 1)
    out: np.ndarray = counts.argmax(axis=1)
    return out


def _data_params(params: dict[str, Any], data: FederatedDataset, path: str, source: str) -> dict[str, Any]:
    """Hyperparameters with data-dependent values resolved: ``groups = "majority-label"`` becomes
    each client's majority label (paper 000's "target" sampling, with ``clustered-groups``), and
    ``label_counts = "federation"`` the clients' label histograms (``fedcbs``)."""
    if params.get("label_counts") == "federation":
        if data.task != "classification":
            raise FedsampleError(
                f"The '{path}.label_counts' key of {source} must be an (n, C) array of label counts for a "
                "regression data set (a regression data set has no labels). Got 'federation' instead.",
                parameter=f"{path}.label_counts",
            )
        params = params | {"label_counts": np.asarray(data.label_counts)}
    if params.get("groups") != "majority-label":
        return params
    if data.task != "classification":
        raise FedsampleError(
            f"The '{path}.groups' key of {source} must be a list of group ids for a regression data set "
            "(a regression data set has no labels). Got 'majority-label' instead.",
            parameter=f"{path}.groups",
        )
    return params | {"groups": majority_labels(data)}


def build_model(cfg: ExperimentConfig, data: FederatedDataset, source: str) -> ModelLike:
    """The model of ``cfg``'s ``[model]`` table for ``data``: one of the papers' (``kind``), or the model a
    factory ``"package.module:function"`` builds with ``args`` (imported from ``path`` first), with its loss."""
    section = cfg.model
    loss = _loss(section, source)
    metrics = {
        name: _reference(reference, section, f"model.metrics.{name}", source)
        for name, reference in dict(section.metrics or {}).items()
    }
    if section.factory is not None:
        if section.factory.startswith("python:"):
            raise FedsampleError(
                f"The 'model.factory' key of {source} names a model given from Python ({section.factory!r}), which "
                "no config can rebuild: run it from Python, fedsample.experiments.run_comparison(data, model, ...).",
                parameter="model.factory",
            )
        factory = import_reference(section.factory, directory=section.path, key="model.factory", source=source)
        module = functools.partial(factory, **dict(section.args or {}))
        return Model(module, loss=loss, metrics=metrics, name=section.factory)
    spec = paper_model(cfg, data, source)
    if loss == "auto" and not metrics:
        return spec
    return Model(spec.build, loss=loss, metrics=metrics, name=spec.kind, initializer=spec.init_params)


def paper_model(cfg: ExperimentConfig, data: FederatedDataset, source: str) -> ModelSpec:
    """The papers' model that ``cfg``'s ``[model]`` table names for ``data`` (its ``kind``, ``hidden``...)."""
    section = cfg.model
    regression = cfg.federation.dataset == "osmd-linear"
    try:
        spec = ModelSpec(
            kind=cast(Any, resolve_model_kind(section.kind, data)),
            input_shape=data.sample_shape,
            output_dim=int(data.num_classes or 1),
            hidden=section.hidden,
            bias=not regression if section.bias is None else section.bias,
            zero_init=regression if section.zero_init is None else section.zero_init,
        )
    except (ValueError, TypeError) as exc:
        reason = " ".join(str(exc).splitlines())
        raise FedsampleError(
            f"The 'model.kind' key of {source} does not suit the data set {data.name!r}: {reason}",
            parameter="model.kind",
        ) from exc
    return spec


def check_training_memory(
    cfg: ExperimentConfig, data: FederatedDataset, training: TrainingConfig, asked: int, model: Any, source: str
) -> bool:
    """Refuse a batch size or a model whose arrays cannot fit in memory, before they are allocated: the runs
    of a comparison train together, each on the ``asked`` clients of its round
    (:func:`fedsample.engine.specs.check_round_memory`: row ids, inputs, parameters, gradients and the
    dense models' activations; a model counted on PyTorch's meta device, without memory). Returns False,
    checking nothing, for a factory that cannot be built there: check again with the bound model."""
    together = len(cfg.samplers) * (1 if cfg.federation.per_seed else len(cfg.seeds))
    section = cfg.model
    kind = resolve_model_kind(section.kind, data) if section.factory is None else None
    key = ("model.factory", section.factory) if kind is None else ("model.kind", kind)
    return check_round_memory(
        training,
        data,
        model,
        clients=together * asked,
        runs=together,
        owner=source,
        batch=("training.batch_size", training.batch_size),
        model_key=("model.hidden", section.hidden) if kind == "mlp" else key,
        noun="key",
    )


def _loss(section: Any, source: str) -> Any:
    """The ``model.loss`` of a section: a name, or the callable its reference names (imported here)."""
    if section.loss in LOSS_NAMES:
        return section.loss
    return _reference(section.loss, section, "model.loss", source)


def _reference(reference: str, section: Any, key: str, source: str) -> Any:
    """The callable a ``[model]`` key names, imported from ``model.path`` first; a ``python:NAME`` is refused."""
    if reference.startswith("python:"):
        raise FedsampleError(
            f"The {key!r} key of {source} names a callable given from Python ({reference!r}), which no config "
            "can rebuild: run it from Python, fedsample.experiments.run_comparison(data, model, ...).",
            parameter=key,
        )
    return import_reference(reference, directory=section.path, key=key, source=source)


def check_model(model: ModelLike, data: FederatedDataset, section: Any, source: str) -> BoundModel:
    """``model`` bound to ``data`` (its module built, run and trained one step on the first rows), a failure
    restated as the config key that named the model; the runs train this bound model."""
    from fedsample.engine.model_binding import bind_to_data

    try:
        return bind_to_data(model, data, "build_experiment")
    except FedsampleError as exc:
        if exc.parameter == "loss":
            key = "model.loss"
        elif (exc.parameter or "").startswith("metrics"):
            key = "model.metrics"
        else:
            key = _model_key(section)
        reason = " ".join(str(exc).split())
        raise FedsampleError(
            f"The {key!r} key of {source} does not give a model for {data.name!r}: {reason}", parameter=key
        ) from exc


def _model_key(section: Any) -> str:
    """The config key that names the model: its factory, or its kind."""
    return "model.factory" if section.factory is not None else "model.kind"


def _after_the(exc: FedsampleError) -> str:
    """A library error's message after its subject (``must be ...``), to restate it about a config key."""
    text = " ".join(str(exc).split())
    return text[text.index(" must ") + 1 :] if " must " in text else text


def model_name(model: ModelLike | BoundModel) -> str:
    """What the run information calls a model: a ModelSpec's kind, a Model's name, or its module's."""
    from fedsample.engine.user_model import describe_module

    if isinstance(model, BoundModel):
        return model.name
    if isinstance(model, ModelSpec):
        return model.kind
    if isinstance(model, Model):
        return model.name or describe_module(model.module)
    return describe_module(model)


def build_participation(
    section: ParticipationSection,
    source: str = "config",
    num_clients: int | None = None,
    data: FederatedDataset | None = None,
) -> Participation:
    """The :class:`~fedsample.participation.setting.Participation` of a config's ``[participation]`` table
    (``num_clients``: the federation's, which an availability trace may not exceed; ``data``: whose labels
    ``availability_label_alpha`` ties the clients' availability to)."""
    availability: Availability = AlwaysAvailable()
    values = {name: getattr(section, name) for name in PARTICIPATION.parameters}
    if section.availability_trace is not None:
        try:
            availability = load_availability_trace(section.availability_trace, num_clients)
        except FedsampleError as exc:
            message = " ".join(str(exc).splitlines())
            raise FedsampleError(
                f"The 'participation.availability_trace' key of {source} must name a valid trace: {message}",
                parameter="participation.availability_trace",
            ) from exc
    else:
        labels = None
        if data is not None and data.task == "classification" and data.num_classes:
            labels = client_label_counts(data.train_targets, data.train_indptr, int(data.num_classes))
        try:
            availability = build_availability(values, label_counts=labels)
        except FedsampleError as exc:
            raise restate_error(exc, "participation", source) from exc
    return participation_from_values(values, availability)


def build_experiment(
    cfg: ExperimentConfig,
    *,
    data: FederatedDataset | None = None,
    model: ModelLike | None = None,
    states: Sequence[Any] | None = None,
) -> Experiment:
    """Build the federation, model, training configuration and runs of ``cfg``.

    A ``cfg`` the reader made (:func:`~fedsample.experiments.config.load_config`, a preset, ``--set``) is trusted;
    a hand-built one is validated here. Each sampler is initialised here, once: a sampler the data do not suit
    (``num_sampled`` too large for sampling without replacement...) fails before anything is written, and the
    state is its runs' first. The model is checked on the data's first rows. A model factory or loss the config
    names by reference is imported here: the config asks for it. ``states``: the runs' first states from a
    build of the same config elsewhere (a Ray task gets the driver's). ``data`` and ``model`` given from Python
    (:func:`~fedsample.experiments.comparison.run_comparison`) replace what ``cfg`` builds (``"python:NAME"``).
    """
    source = f"experiment {cfg.name!r}"
    if not is_read(cfg):  # a config the reader made is trusted; a hand-built one is read here, once
        cfg = config_from_dict(config_to_dict(cfg), source=source)
    if data is None:
        try:
            data = build_federation(cfg.federation, replicate=cfg.seeds[0] if cfg.federation.per_seed else None)
        except (ValueError, TypeError) as exc:
            raise restate_error(exc, "federation", source) from exc
    training = TrainingConfig(
        **cfg.training,
        algorithm=make_algorithm(cfg.algorithm.name, **cfg.algorithm.params),
        server=make_server_optimizer(cfg.server.name, **cfg.server.params),
    )
    federation = data.federation(importance=cast(Any, training.importance))
    participation = build_participation(cfg.participation, source, len(federation.importances), data)
    if cfg.system is not None:  # the simulated clock (docs/system.md); a trace is checked here, before training
        system = SystemModel(**cast(Any, cfg.system))
        if system.trace is not None:
            load_system_trace(system.trace, len(federation.importances))
        participation = dataclasses.replace(participation, system=system)
    asked = participation.num_asked(training.num_sampled)
    if model is None:
        model = build_model(cfg, data, source)
    counted = check_training_memory(cfg, data, training, asked, model, source)
    bound = check_model(model, data, cfg.model, source)
    if not counted:  # a factory that cannot be built on the meta device, counted once built
        check_training_memory(cfg, data, training, asked, bound, source)
    try:
        check_batches(bound, data.train_sizes(), training.batch_size, "training")
    except FedsampleError as exc:
        key = "training.batch_size" if exc.parameter == "batch_size" else _model_key(cfg.model)
        raise FedsampleError(f"The {key!r} key of {source} {_after_the(exc)}", parameter=key) from exc
    runs: list[RunSpec] = []
    for i, entry in enumerate(cfg.samplers):
        sampler = make_sampler(entry.name, **_data_params(entry.params, data, f"samplers[{i}]", source))
        try:  # a sampler that reads the model's layout (HiCS-FL: its output layer) is fitted to it first
            sampler = fit_to_model(sampler, bound)
            state = None if states is not None else sampler.init(federation, asked)
        except (ValueError, TypeError) as exc:
            if getattr(exc, "parameter", None) != "num_sampled":
                raise restate_error(exc, f"samplers[{i}]", source) from exc
            raise restate_error(exc, "training", source, detail=f" for samplers[{i}] ({entry.label!r})") from exc
        if states is not None:
            runs += [RunSpec(sampler, seed=seed, label=entry.label, state=states[len(runs)]) for seed in cfg.seeds]
            continue
        # Each run's first state (one init), unless its federation is its own or init reads the round times.
        timed = "durations" in sampler.init_reads and participation.system is not None
        reused = not cfg.federation.per_seed and not timed
        runs += [RunSpec(sampler, seed=seed, label=entry.label, state=state if reused else None) for seed in cfg.seeds]
    return Experiment(
        config=cfg, data=data, model=model, training=training, runs=runs, participation=participation, bound=bound
    )
