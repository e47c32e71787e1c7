"""The torch-free registry: names and parameter tables that the torch classes and the config read."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import fedsample.engine as engine
from fedsample.engine import registry
from fedsample.engine.paper_models import ModelSpec
from fedsample.errors import FedsampleError


def test_importing_the_registry_does_not_import_torch() -> None:
    script = "import sys, fedsample.engine.registry; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", script], check=True)


def test_the_lazy_package_still_exports_every_name() -> None:
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = engine.no_such_name  # type: ignore[attr-defined]


def test_the_typed_imports_and_the_lazy_homes_agree() -> None:
    # The package names each export twice: an ``X as X`` import for type checkers, and its home for
    # __getattr__ (from which __all__ is built). Both must name the same objects.
    source = Path(engine.__file__).read_text(encoding="utf-8")
    block = next(n for n in ast.parse(source).body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    imports = [(alias, node.module) for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names]
    assert all(alias.asname == alias.name for alias, _ in imports)  # "X as X": exported for mypy
    typed = {alias.name: str(module) for alias, module in imports}
    assert sorted(typed) == engine.__all__
    for name, module in typed.items():
        assert getattr(engine, name) is getattr(importlib.import_module(module), name), name


def _entries() -> list[registry.Component]:
    return [registry.TRAINING, registry.MODEL, *registry.ALGORITHMS.values(), *registry.SERVER_OPTIMIZERS.values()]


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e.owner)
def test_every_default_satisfies_its_constraint(entry: registry.Component) -> None:
    for key, parameter in entry.parameters.items():
        assert parameter.constraint.is_satisfied_by(parameter.default), (entry.owner, key)


def test_the_registry_names_are_the_engines() -> None:
    assert tuple(registry.ALGORITHMS) == tuple(engine.ALGORITHMS)
    assert tuple(registry.SERVER_OPTIMIZERS) == tuple(engine.SERVER_OPTIMIZERS)
    assert registry.MODEL_KINDS == engine.MODEL_KINDS
    assert registry.BACKENDS == ("batched", "sequential")


def _fields(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.name != "name"}


@pytest.mark.parametrize("name", list(registry.ALGORITHMS))
def test_algorithm_classes_take_their_table(name: str) -> None:
    table = registry.ALGORITHMS[name]
    assert engine.ALGORITHMS[name].__name__ == table.owner
    assert _fields(engine.ALGORITHMS[name]) == table.defaults


@pytest.mark.parametrize("name", list(registry.SERVER_OPTIMIZERS))
def test_server_classes_take_their_table(name: str) -> None:
    table = registry.SERVER_OPTIMIZERS[name]
    assert engine.SERVER_OPTIMIZERS[name].__name__ == table.owner
    assert _fields(engine.SERVER_OPTIMIZERS[name]) == table.defaults


def test_training_config_and_model_spec_take_their_tables() -> None:
    scalars = {k: v for k, v in _fields(engine.TrainingConfig).items() if k in registry.TRAINING.parameters}
    assert scalars == registry.TRAINING.defaults
    assert set(registry.TRAINING.parameters) <= set(_fields(engine.TrainingConfig))
    model = {k: v for k, v in _fields(ModelSpec).items() if k in ("hidden", "bias", "zero_init")}
    assert model == {k: registry.MODEL.defaults[k] for k in model}


@pytest.mark.parametrize(
    ("entry", "build", "key", "value"),
    [
        (registry.ALGORITHMS["fedprox"], lambda **kw: engine.FedProx(**kw), "mu", -0.5),
        (registry.SERVER_OPTIMIZERS["fedyogi"], lambda **kw: engine.FedYogi(**kw), "beta2", 1.0),
        (registry.SERVER_OPTIMIZERS["fedavgm"], lambda **kw: engine.ServerMomentum(**kw), "nesterov", 1),
        (registry.TRAINING, lambda **kw: engine.TrainingConfig(**kw), "device", "cuda:"),
        (registry.TRAINING, lambda **kw: engine.TrainingConfig(**kw), "lr_decay", 0.0),
    ],
)
def test_the_table_and_the_class_raise_the_same_error(
    entry: registry.Component, build: Any, key: str, value: object
) -> None:
    with pytest.raises(FedsampleError) as from_table:
        entry.check({key: value})
    with pytest.raises(FedsampleError) as from_class:
        build(**{key: value})
    assert str(from_table.value) == str(from_class.value)
    assert f"The {key!r} parameter of {entry.owner} must be" in str(from_table.value)


def test_check_completes_defaults_and_refuses_unknown_keys() -> None:
    assert registry.SERVER_OPTIMIZERS["fedavgm"].check({"beta": 0.5}) == {"lr": 1.0, "beta": 0.5, "nesterov": False}
    with pytest.raises(
        FedsampleError,
        match=r"The 'beta2' parameter of FedAdagrad is not one of the parameters of FedAdagrad: .* mean 'beta1'",
    ):
        registry.SERVER_OPTIMIZERS["fedadagrad"].check({"beta2": 0.9})
    with pytest.raises(FedsampleError, match=r"The 'algorithm' parameter of .* must be one of \{'fedavg'"):
        registry.component("algorithm", "fedsgd")
    assert registry.component("server", "fedadam").owner == "FedAdam"
