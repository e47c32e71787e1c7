"""The public Python entry points with hostile arguments (issue 32 item 10, part 5).

Each entry point is given a call that works (:data:`ENTRY_POINTS`), then each of its parameters in turn
gets every hostile value its annotation calls for (:func:`hostile_arguments.arguments`). The call must
raise the library's one-line error or return a valid result (no NaN in what it returns, a federation
whose importances form a distribution...), never another exception. Nothing trains: ``run_comparison``
reaches the checks ``run_experiment`` makes before a run (its run replaced by them), and
``run_experiment`` is given an executor that stops where training would begin. A new parameter of an
entry point is covered by being annotated; a new entry point by a line here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hostile_arguments import arguments
from hostile_samplers import SlowCase, time_limit
from hostile_values import Probe, assert_one_line

import fedsample
from fedsample import Federation, FedsampleError
from fedsample.data.federated import FederatedDataset
from fedsample.engine import ModelSpec, RunSpec, TrainingConfig
from fedsample.experiments import config_from_dict, run_comparison, run_experiment
from fedsample.experiments import runner as runner_module
from fedsample.experiments.executors import LocalExecutor
from fedsample.integrations import ServerUpdate
from fedsample.participation.availability import Dropout
from fedsample.participation.setting import Participation
from fedsample.samplers import MDSampler, make_sampler
from fedsample.stats import (
    adjusted_rand_index,
    compare_samplers,
    comparison_to_json,
    exact_statistics,
    format_comparison,
    monte_carlo_bias,
    monte_carlo_statistics,
    participation_statistics,
    weight_covariance,
)
from sampler_cases import contract_federation

CASE_SECONDS = 20.0


class WouldTrain(Exception):
    """Raised where a run would begin training: the arguments were all taken."""


class _Stop(LocalExecutor):
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise WouldTrain


def _md() -> tuple[Any, Any]:
    sampler = MDSampler()
    return sampler, sampler.init(contract_federation(), 3)


def _comparison() -> Any:
    return compare_samplers(contract_federation(), 3, [MDSampler()])


def _tiny_data() -> FederatedDataset:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 3)).astype(np.float32)
    y = rng.integers(0, 2, 12)
    return FederatedDataset(
        train_features=x,
        train_targets=y,
        train_indptr=np.array([0, 3, 6, 9, 12]),
        test_features=x[:4],
        test_targets=y[:4],
        test_indptr=np.array([0, 1, 2, 3, 4]),
    )


def _linear() -> torch.nn.Module:
    return torch.nn.Linear(3, 2)


TINY_TRAINING = {"rounds": 1, "num_sampled": 2, "local_steps": 1, "batch_size": 2}


def _tiny_config() -> Any:
    return config_from_dict({"name": "tiny", "seeds": 1, "training": TINY_TRAINING, "samplers": [{"name": "md"}]})


def _server_update_base() -> dict[str, Any]:
    torch.manual_seed(0)
    models = [torch.nn.Linear(2, 1).state_dict() for _ in range(3)]
    return {"global_model": models[0], "client_models": models[1:], "weights": [0.5, 0.5]}


@dataclasses.dataclass(frozen=True)
class Entry:
    """An entry point: the call, the keyword arguments of a call that works (built afresh), and what its
    result must be (beyond being returned)."""

    call: Callable[..., Any]
    base: Callable[[], dict[str, Any]]
    signature_of: Callable[..., Any] | None = None
    skip: tuple[str, ...] = ()
    positional: tuple[str, ...] = ()  # passed by position (a singledispatch function dispatches on its first)

    def __call__(self, **kwargs: Any) -> Any:
        args = [kwargs.pop(name) for name in self.positional]
        return self.call(*args, **kwargs)


ENTRY_POINTS: dict[str, Entry] = {
    "make_sampler": Entry(make_sampler, lambda: {"name": "md"}),
    "Federation.from_sizes": Entry(Federation.from_sizes, lambda: {"sizes": [5, 1, 3], "importance": "size"}),
    "Federation.from_importances": Entry(
        Federation.from_importances, lambda: {"importances": [0.2, 0.3, 0.5], "sizes": [2, 3, 5]}
    ),
    "exact_statistics": Entry(
        exact_statistics,
        lambda: {"design": _md()[0].design(_md()[1]), "importances": contract_federation().importances},
    ),
    "adjusted_rand_index": Entry(adjusted_rand_index, lambda: {"labels_a": [0, 0, 1, 1], "labels_b": [1, 1, 0, 0]}),
    "format_comparison": Entry(format_comparison, lambda: {"comparison": _comparison(), "importance_label": "size"}),
    "comparison_to_json": Entry(comparison_to_json, lambda: {"comparison": _comparison(), "importance": "size"}),
    "weight_covariance": Entry(
        weight_covariance,
        lambda: {"design": _md()[0].design(_md()[1]), "importances": contract_federation().importances},
    ),
    "monte_carlo_statistics": Entry(
        monte_carlo_statistics,
        lambda: {
            "sampler": _md()[0],
            "state": _md()[1],
            "rng": np.random.default_rng(0),
            "num_rounds": 50,
            "covariance": True,
        },
    ),
    "monte_carlo_bias": Entry(
        monte_carlo_bias,
        lambda: {
            "statistics": monte_carlo_statistics(*_md(), np.random.default_rng(0), num_rounds=50),
            "importances": contract_federation().importances,
        },
    ),
    "compare_samplers": Entry(
        compare_samplers,
        lambda: {
            "federation": contract_federation(),
            "num_sampled": 3,
            "samplers": [MDSampler()],
            "skip_infeasible": False,
            "monte_carlo_rounds": 20,
            "rng": np.random.default_rng(0),
        },
    ),
    "participation_statistics": Entry(
        participation_statistics,
        lambda: {
            "sampler": _md()[0],
            "state": _md()[1],
            "participation": Participation(dropout=Dropout(0.2)),
            "num_sampled": 3,
            "num_rounds": 50,
            "seed": 0,
            "policies": ("renormalise",),
            "warmup": 0,
        },
    ),
    "TrainingConfig": Entry(TrainingConfig, lambda: {}, signature_of=TrainingConfig),
    "ModelSpec": Entry(
        ModelSpec, lambda: {"kind": "mlp", "input_shape": (3,), "output_dim": 2}, signature_of=ModelSpec
    ),
    "RunSpec": Entry(RunSpec, lambda: {"sampler": MDSampler(), "seed": 0, "label": "md"}, signature_of=RunSpec),
    "ServerUpdate": Entry(ServerUpdate, lambda: {"optimizer": None, "buffers": ()}, signature_of=ServerUpdate),
    "ServerUpdate.apply": Entry(
        lambda **kw: ServerUpdate().apply(**kw), _server_update_base, signature_of=ServerUpdate.apply, skip=("self",)
    ),
    "run_comparison": Entry(
        run_comparison,
        lambda: {
            "data": _tiny_data(),
            "model": _linear,
            "samplers": ["md"],
            "out": "run",
            "name": "tiny",
            "seeds": 1,
            "training": dict(TINY_TRAINING),
        },
        skip=("progress", "on_round"),
    ),
    "run_experiment": Entry(
        run_experiment,
        lambda: {"config": _tiny_config(), "run_dir": "run", "executor": _Stop()},
        skip=("executor", "progress", "on_round", "data", "model"),
    ),
}

# Cases that expose a defect whose fix is another helper's (issue 32): "entry: parameter=label" -> reason
# (none known today).
KNOWN: dict[str, str] = {}


def _cases() -> list[Any]:
    out = []
    for name, entry in ENTRY_POINTS.items():
        signature = inspect.signature(entry.signature_of or entry.call)
        for parameter in signature.parameters.values():
            if parameter.kind is parameter.VAR_KEYWORD:  # make_sampler's hyperparameters: part 1 probes them
                probes = [Probe("an unknown keyword", {"nosuch": 1}, None)]
            elif parameter.name in entry.skip:
                continue
            else:
                probes = arguments(parameter.annotation)
            for probe in probes:
                case = f"{name}: {parameter.name}={probe.label}"
                marks = [pytest.mark.xfail(strict=True, reason=KNOWN[case])] if case in KNOWN else []
                out.append(pytest.param(name, parameter.name, probe, id=case, marks=marks))
    return out


@pytest.fixture
def stop_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_comparison's run replaced by the checks a run makes before it writes or trains."""

    def checked(config: Any, run_dir: Any, *, data: Any = None, model: Any = None, **options: Any) -> Any:
        runner_module.check_experiment(config, data=data, model=model)
        raise WouldTrain

    monkeypatch.setattr(runner_module, "run_experiment", checked)


@pytest.mark.parametrize(("name", "parameter", "probe"), _cases())
def test_a_hostile_argument(
    name: str, parameter: str, probe: Probe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_before_training: None
) -> None:
    monkeypatch.chdir(tmp_path)
    entry = ENTRY_POINTS[name]
    kwargs = entry.base()
    if parameter == "params" and name == "make_sampler":
        kwargs |= probe.value
    else:
        kwargs[parameter] = probe.value
    try:
        with time_limit(CASE_SECONDS):
            result = entry(**kwargs)
    except FedsampleError as error:
        assert_one_line(error)
        return
    except WouldTrain:
        return  # every argument was taken, up to where training begins
    except SlowCase:
        pytest.fail(f"{name} with {parameter}={probe.label} was still running after {CASE_SECONDS} s")
    _valid(result)


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_the_base_call_works(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_before_training: None
) -> None:
    """The control: each entry point's base call is taken (so a refusal above is the hostile value's doing)."""
    monkeypatch.chdir(tmp_path)
    entry = ENTRY_POINTS[name]
    with contextlib.suppress(WouldTrain):  # run_experiment stops where it would train
        _valid(entry(**entry.base()))


def _valid(result: Any, depth: int = 0) -> None:
    """No NaN anywhere in what an entry point returns; a Federation's importances form a distribution."""
    if isinstance(result, Federation):
        assert np.all(result.sizes > 0), result
        assert np.isclose(result.importances.sum(), 1.0), result
    if depth > 6 or result is None or isinstance(result, (str, bytes, torch.nn.Module)):
        return
    if isinstance(result, float):
        assert result == result, "NaN in a result"
    elif isinstance(result, np.ndarray):
        if result.dtype.kind in "fc":
            assert not np.isnan(result).any(), result
    elif isinstance(result, torch.Tensor):
        assert not torch.isnan(result).any()
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        for f in dataclasses.fields(result):
            _valid(getattr(result, f.name, None), depth + 1)
    elif isinstance(result, Mapping):
        for value in result.values():
            _valid(value, depth + 1)
    elif isinstance(result, (list, tuple)):
        for value in result[:100]:
            _valid(value, depth + 1)


# Public functions of fedsample.stats that are not entry points of their own, with the reason.
NOT_ENTRY_POINTS = {
    # A singledispatch registry: register(...) is its public use, and exact_statistics checks the design
    # and the importances before it calls it (called directly with a list, it raised AttributeError).
    "design_moments",
}


def test_every_public_statistics_function_is_an_entry() -> None:
    """A function added to fedsample.stats is probed only once it has a line in ENTRY_POINTS."""
    listed = {entry.call for entry in ENTRY_POINTS.values()}
    functions = {getattr(fedsample.stats, name) for name in fedsample.stats.__all__}
    names = {getattr(f, "__name__", "") for f in functions if callable(f) and not isinstance(f, type)}
    missing = sorted(name for name in names - NOT_ENTRY_POINTS if getattr(fedsample.stats, name) not in listed)
    assert not missing, f"add to ENTRY_POINTS: {missing}"
