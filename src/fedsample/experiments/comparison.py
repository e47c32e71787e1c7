"""A comparison set up in Python: your data and your model, the run directory ``fedsample run`` writes.

:func:`run_comparison` takes a :class:`~fedsample.data.FederatedDataset` (your arrays, split into
clients: :mod:`fedsample.data`), any model :func:`~fedsample.engine.simulate` takes (an
``nn.Module``, a factory, a :class:`~fedsample.engine.user_model.Model` or a ``ModelSpec``) and the
samplers to compare, and writes the run directory of a config run: ``config.toml``, the metrics
(Parquet and CSV), the summary, the plots, ``report.md``, the sampler states and checkpoints, so that
``fedsample report`` and ``fedsample plot`` work on it and ``resume=True`` finishes an interrupted one.

The settings are the tables of a config file (docs/experiments.md), given as mappings
(:class:`ComparisonSpec`, the one description of such a comparison) and checked once by the same reader,
so a bad value is one error naming its key. The data and the model live in your
program, not in a file: ``config.toml`` names them ``"python:NAME"`` (``federation.dataset``,
``model.factory``), and ``fedsample run`` on that config refuses in one line to rebuild them; run
it again from Python, with the same objects, to repeat or resume it.

>>> import numpy as np
>>> from fedsample.data import FederatedDataset
>>> data = FederatedDataset(
...     train_features=np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32),
...     train_targets=np.arange(40) % 2, train_indptr=[0, 10, 20, 30, 40],
...     test_features=np.zeros((0, 4), np.float32), test_targets=np.zeros(0, int), test_indptr=[0] * 5,
...     name="toy")
>>> def make_model(): ...
>>> spec = ComparisonSpec(data=data, model=make_model, samplers=["md", {"name": "uniform", "label": "u"}], name="toy")
>>> config = spec.config()
>>> config.federation.dataset, config.model.factory, [entry.label for entry in config.samplers]
('python:toy', 'python:make_model', ['md', 'u'])
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from fedsample._io import checked_path
from fedsample._validation import invalid
from fedsample.errors import FedsampleError
from fedsample.experiments.config import ExperimentConfig, config_from_dict

if TYPE_CHECKING:
    from fedsample.data.federated import FederatedDataset
    from fedsample.engine.specs import RoundReport
    from fedsample.engine.user_model import ModelLike
    from fedsample.experiments.progress import ProgressReporter
    from fedsample.experiments.runner import RunOutcome
    from fedsample.samplers import Sampler

__all__ = ["ComparisonSpec", "run_comparison"]

_OWNER = "run_comparison"


@dataclass(frozen=True, kw_only=True)
class ComparisonSpec:
    """A comparison set up in Python, described once: the objects it runs and the config tables it sets.

    ``samplers``: names (``"md"``), config tables (``{"name": "osmd", "eta": 0.01, "label": "OSMD"}``)
    or sampler objects. ``seeds``: a count ``n`` (seeds ``0..n-1``) or a list. ``training``,
    ``participation`` and ``report`` are the config tables of those names (``{"rounds": 30,
    "num_sampled": 5, "local_lr": 0.05}``); ``algorithm`` and ``server`` a name or a table with its
    hyperparameters (``{"name": "fedprox", "mu": 0.01}``); ``checkpoint_every`` the rounds between
    checkpoints (the config's default when None); ``centralized`` adds the pooled-data baseline.
    :meth:`config` checks it all once, by the config reader, and gives the config the runner runs
    (:func:`run_comparison`'s keywords are these fields).
    """

    data: FederatedDataset
    model: ModelLike
    samplers: Sequence[str | Mapping[str, Any] | Sampler[Any]]
    name: str = "comparison"
    description: str = ""
    seeds: int | Sequence[int] = 1
    training: Mapping[str, Any] | None = None
    algorithm: str | Mapping[str, Any] = "fedavg"
    server: str | Mapping[str, Any] = "sgd"
    participation: Mapping[str, Any] | None = None
    report: Mapping[str, Any] | None = None
    checkpoint_every: int | None = None
    centralized: bool = False

    def config(self) -> ExperimentConfig:
        """The validated config of this comparison (data and model named ``python:NAME``)."""
        from fedsample.data.federated import FederatedDataset

        if not isinstance(self.data, FederatedDataset):
            raise invalid("data", _OWNER, "a FederatedDataset (fedsample.data)", type(self.data).__name__)
        samplers = self.samplers
        if isinstance(samplers, (str, Mapping)) or not isinstance(samplers, Sequence) or not samplers:
            raise invalid("samplers", _OWNER, "a non-empty list of sampler names, tables or samplers", samplers)
        seeds = self.seeds
        document: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "seeds": list(seeds) if isinstance(seeds, Sequence) else seeds,
            "federation": {"dataset": _python_name(self.data.name or "data"), "partition": "natural"},
            "model": _model_table(self.model),
            "training": dict(_mapping(self.training, "training")),
            "algorithm": _component(self.algorithm, "algorithm"),
            "server": _component(self.server, "server"),
            "samplers": [_sampler_table(entry, index) for index, entry in enumerate(samplers)],
            "baselines": {"centralized": self.centralized},
            "report": dict(_mapping(self.report, "report")),
        }
        if self.checkpoint_every is not None:
            document["run"] = {"checkpoint_every": self.checkpoint_every}
        if self.participation is not None:
            document["participation"] = dict(_mapping(self.participation, "participation"))
        return config_from_dict(document, source=_OWNER)


# How the run goes, beside what it compares (run_experiment's options).
_RUN_OPTIONS = ("resume", "overwrite", "progress", "on_round", "tracking")
_SETTINGS = tuple(f.name for f in fields(ComparisonSpec) if f.name not in ("data", "model", "samplers"))


def run_comparison(
    data: FederatedDataset,
    model: ModelLike,
    samplers: Sequence[str | Mapping[str, Any] | Sampler[Any]],
    out: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressReporter | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
    tracking: Mapping[str, Any] | None = None,
    **settings: Any,
) -> RunOutcome:
    """Compare ``samplers`` x ``seeds`` on ``data`` with ``model`` and write the run directory ``out``.

    ``settings`` are the fields of :class:`ComparisonSpec` (``name``, ``description``, ``seeds``,
    ``training``, ``algorithm``, ``server``, ``participation``, ``report``, ``checkpoint_every``,
    ``centralized``), which describes the comparison; the signature shows them.
    ``resume`` finishes the run in ``out`` (same data, model and settings); ``overwrite`` replaces it.
    ``on_round`` and ``tracking`` (a ``[tracking]`` table: TensorBoard, MLflow) receive every round's
    metrics (:func:`~fedsample.experiments.runner.run_experiment`, docs/tracking.md). Returns the runner's
    :class:`~fedsample.experiments.runner.RunOutcome` (results, summary).
    """
    from fedsample.experiments.runner import run_experiment

    directory = checked_path("out", "run_comparison", out)  # before the data and the model are read
    unknown = [key for key in settings if key not in _SETTINGS]
    if unknown:
        known = ", ".join(_SETTINGS + _RUN_OPTIONS)
        raise FedsampleError(
            f"run_comparison takes no keyword {unknown[0]!r}: its keywords are {known}.", parameter=unknown[0]
        )
    spec = ComparisonSpec(data=data, model=model, samplers=samplers, **settings)
    return run_experiment(
        spec.config(),
        directory,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        data=spec.data,
        model=spec.model,
        on_round=on_round,
        tracking=tracking,
    )


def _signature() -> inspect.Signature:
    """run_comparison's signature as callers see it: the arguments, then ComparisonSpec's settings, then the run's."""
    own = list(inspect.signature(run_comparison).parameters.values())
    spec = inspect.signature(ComparisonSpec).parameters
    return inspect.Signature(
        [*own[:4], *(spec[name] for name in _SETTINGS), *own[4:-1]],
        return_annotation=inspect.signature(run_comparison).return_annotation,
    )


run_comparison.__signature__ = _signature()  # type: ignore[attr-defined]


def _python_name(text: str) -> str:
    """``python:NAME``: ``text`` with blanks replaced and cut to 100 characters."""
    return "python:" + (re.sub(r"\s+", "_", str(text).strip()) or "object")[:100]


def _model_table(model: Any) -> dict[str, Any]:
    """The ``[model]`` table naming ``model``: a ModelSpec's own keys, else ``python:NAME`` and its loss."""
    from fedsample.engine.paper_models import ModelSpec
    from fedsample.engine.user_model import describe_module

    if isinstance(model, ModelSpec):
        return {"kind": model.kind, "hidden": model.hidden, "bias": model.bias, "zero_init": model.zero_init}
    loss = getattr(model, "loss", "auto")
    name = getattr(model, "name", None) or describe_module(getattr(model, "module", model))
    table: dict[str, Any] = {"factory": _python_name(name)}
    table["loss"] = loss if isinstance(loss, str) else _python_name(_callable_name(loss))
    metrics = getattr(model, "metrics", None) or {}
    if metrics:
        table["metrics"] = {key: _python_name(_callable_name(metric)) for key, metric in metrics.items()}
    return table


def _callable_name(function: Any) -> str:
    return str(getattr(function, "__qualname__", None) or type(function).__name__)


def _mapping(value: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid(key, _OWNER, f"a mapping of [{key}] keys to values, or None", value)
    return value


def _component(value: str | Mapping[str, Any], key: str) -> dict[str, Any]:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, Mapping):
        return dict(value)
    raise invalid(key, _OWNER, f"a {key} name or a table with its name and hyperparameters", value)


def _sampler_table(entry: Any, index: int) -> dict[str, Any]:
    if isinstance(entry, str):
        return {"name": entry}
    if isinstance(entry, Mapping):
        return dict(entry)
    params = getattr(entry, "get_params", None)
    if callable(params) and isinstance(getattr(entry, "name", None), str):
        return {"name": entry.name, **params()}
    raise invalid(f"samplers[{index}]", _OWNER, "a sampler name, a [[samplers]] table or a sampler", entry)
