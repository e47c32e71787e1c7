"""What a run was computed from, by content: ``inputs.json``, which ``--resume`` checks first.

``config.toml`` names a run's data and model; this file records what those names held when the run
began, so that a run resumed on other data or another model's code is refused instead of finishing on
them. Each entry is keyed by the config key that names the input and holds a SHA-256:

- ``federation.dataset`` (and ``federation.test_path``): a data file, its bytes (read in blocks, never
  held whole); data given from Python (``run_comparison``), its arrays (each one's dtype, shape and
  bytes, read in place: nothing is copied but one block of a non-contiguous array at a time), task and
  classes; a built-in data set read from ``federation.path`` (MNIST, CIFAR-10, LEAF...), the arrays built
  from its files. The embedded and generated data sets (``digits``, ``mnist1d``, ``osmd-linear``) are
  rebuilt from the settings in ``config.toml``, which ``--resume`` compares already: nothing is recorded;
- ``participation.availability_trace`` and ``system.trace``: the trace file's bytes;
- ``model.factory``, ``model.loss`` and ``model.metrics.NAME``: for a ``"package.module:function"`` the
  bytes of the module's file; for an object given from Python, its source as :func:`inspect.getsource`
  reads it (a function's, or the classes of a module's layers with its printed structure; a lambda's
  compiled code, since its source line holds the call around it too). The papers'
  models are named by the settings in ``config.toml``: nothing is recorded. Code whose source cannot be
  read (typed at an interactive prompt) is not recorded either.

A run directory without ``inputs.json`` (written by a fedsample before it, or killed between its config
and this file) resumes as before, and records its inputs from then on. Nothing here reads
``runs.json``, the metrics or the sampler states.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedsample._imports import is_reference, locate_reference
from fedsample._io import write_text_atomic
from fedsample._reading import open_input
from fedsample.data.builders import DATASETS, is_data_file, is_python_data
from fedsample.errors import FedsampleError
from fedsample.experiments.config import ExperimentConfig
from fedsample.serialization import dump_json, read_json_file

__all__ = ["INPUTS_FILE", "Input", "check_inputs", "file_inputs", "record_inputs", "run_inputs"]

INPUTS_FILE = "inputs.json"
_FORMAT = "fedsample-inputs"
_BLOCK = 1 << 24  # bytes hashed at a time from a non-contiguous array
_GENERATED = ("digits", "mnist1d", "osmd-linear")  # rebuilt from config.toml's settings alone


@dataclass(frozen=True)
class Input:
    """One input of a run: ``what`` it is (``file 'data.csv'``) and the SHA-256 of its content."""

    what: str
    sha256: str


def file_inputs(config: ExperimentConfig) -> dict[str, Input]:
    """The inputs of ``config``'s run that are files: its data and trace files, and the module files its
    ``package.module:function`` references name, located without running them; ``--resume`` checks these
    before it imports the model's code."""
    spec = config.federation
    files = {
        "federation.dataset": spec.dataset if is_data_file(spec.dataset) else None,
        "federation.test_path": spec.test_path,
        "participation.availability_trace": config.participation.availability_trace,
        "system.trace": config.system.get("trace") if config.system is not None else None,
    }
    inputs = {key: _file(str(path), key) for key, path in files.items() if path is not None}
    section = config.model
    named = {"model.factory": section.factory, "model.loss": section.loss}
    named |= {f"model.metrics.{name}": reference for name, reference in dict(section.metrics or {}).items()}
    for key, reference in named.items():
        if isinstance(reference, str) and is_reference(reference) and not reference.startswith("python:"):
            path = locate_reference(reference, section.path)
            if path is not None and Path(path).is_file():
                inputs[key] = _file(path, key)
    return inputs


def run_inputs(config: ExperimentConfig, data: Any, model: Any) -> dict[str, Input]:
    """The inputs of ``config``'s run, by config key: :func:`file_inputs`, and what was given from Python or
    read from a data set's folder: ``data`` is the federation the run trains on (the first seed's),
    ``model`` what it trains (a model given from Python, or the one the config built)."""
    spec = config.federation
    inputs = file_inputs(config)
    if is_python_data(spec.dataset):
        inputs["federation.dataset"] = _arrays(data, f"the arrays given from Python as {spec.dataset}")
    elif spec.dataset in DATASETS and spec.dataset not in _GENERATED:
        where = repr(spec.path) if spec.path is not None else "its default directory"
        inputs["federation.dataset"] = _arrays(data, f"the {spec.dataset} data read from {where}")
    return inputs | _model_inputs(config, model)


def check_inputs(directory: Path, inputs: Mapping[str, Input]) -> None:
    """Refuse, in one line naming what changed, to resume the run in ``directory`` on other inputs than it
    recorded; a directory without a record (an older run) resumes as before."""
    saved = _read(directory)
    for key, now in inputs.items():
        before = saved.get(key)
        if before is not None and before.sha256 != now.sha256:
            kind = "model" if key.startswith("model.") else "data"
            raise FedsampleError(
                f"The '--resume' parameter must name a run whose inputs are unchanged. Got {str(directory)!r}, "
                f"whose {kind} changed since it started: {now.what}, named by {key}, had sha256 "
                f"{before.sha256[:16]}..., now {now.sha256[:16]}... (rerun without --resume, or with --overwrite), "
                "instead.",
                parameter="--resume",
            )


def record_inputs(directory: Path, inputs: Mapping[str, Input], *, resume: bool) -> None:
    """Write ``inputs.json`` into the open run directory: for a new run, or a resumed one without it."""
    if resume and (directory / INPUTS_FILE).exists():
        return
    entries = {key: {"what": value.what, "sha256": value.sha256} for key, value in sorted(inputs.items())}
    write_text_atomic(directory / INPUTS_FILE, dump_json({"format": _FORMAT, "inputs": entries}, indent=1) + "\n")


def _read(directory: Path) -> dict[str, Input]:
    path = directory / INPUTS_FILE
    if not path.exists():
        return {}
    payload = read_json_file(path, parameter="--resume", max_bytes=1 << 20)
    entries = payload.get("inputs") if isinstance(payload, dict) and payload.get("format") == _FORMAT else None
    if not isinstance(entries, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("what"), str) and isinstance(entry.get("sha256"), str)
        for entry in entries.values()
    ):
        raise FedsampleError(
            f"The '--resume' parameter must name a run directory whose {INPUTS_FILE} lists its inputs. Got "
            f"{str(directory)!r}, whose {INPUTS_FILE} does not (delete it to resume without checking them), instead.",
            parameter="--resume",
        )
    return {str(key): Input(entry["what"], entry["sha256"]) for key, entry in entries.items()}


def _file(path: str, key: str) -> Input:
    """The SHA-256 of the file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    try:
        with open_input(path) as handle:
            for block in iter(functools.partial(handle.read, 1 << 20), b""):
                digest.update(block)
    except OSError as exc:  # read by the run a moment ago: gone since
        raise FedsampleError(
            f"The {key!r} key must name a file that stays readable while the run starts. Got {path!r} "
            f"({exc.strerror or exc}) instead.",
            parameter=key,
        ) from None
    return Input(f"file {path!r}", digest.hexdigest())


def _arrays(data: Any, what: str) -> Input:
    """The SHA-256 of a federated data set's arrays (dtype, shape, bytes of each), task and classes."""
    digest = hashlib.sha256(f"task={data.task} classes={data.num_classes}\n".encode())
    for name in ("train_features", "train_targets", "train_indptr", "test_features", "test_targets", "test_indptr"):
        _hash_array(digest, name, np.asarray(getattr(data, name)))
    return Input(what, digest.hexdigest())


def _hash_array(digest: Any, name: str, array: np.ndarray) -> None:
    digest.update(f"{name} {array.dtype.str} {array.shape}\n".encode())
    if array.flags.c_contiguous:
        digest.update(array.reshape(-1).view(np.uint8).data)  # the array's own memory, not a copy
        return
    rows = max(1, _BLOCK // max(1, array[:1].nbytes))
    for start in range(0, array.shape[0], rows):  # a strided view: one block copied at a time
        digest.update(np.ascontiguousarray(array[start : start + rows]).reshape(-1).view(np.uint8).data)


def _model_inputs(config: ExperimentConfig, model: Any) -> dict[str, Input]:
    """``model.factory``, ``model.loss`` and ``model.metrics.NAME``: a reference's module file, or the source
    of the object given from Python (the papers' models, named by their settings, have none)."""
    from fedsample.engine.user_model import Model

    section = config.model
    named = {"model.factory": section.factory, "model.loss": section.loss}
    named |= {f"model.metrics.{name}": reference for name, reference in dict(section.metrics or {}).items()}
    wrapped = isinstance(model, Model)
    given = {"model.factory": model.module if wrapped else model, "model.loss": model.loss if wrapped else None}
    given |= {f"model.metrics.{name}": metric for name, metric in (model.metrics if wrapped else {}).items()}
    inputs: dict[str, Input] = {}
    for key, reference in named.items():
        if isinstance(reference, str) and reference.startswith("python:"):  # the module files: file_inputs
            found = _source(given.get(key))
            if found is not None:
                inputs[key] = found
    return inputs


def _source(given: Any) -> Input | None:
    """The source of a function, class or module given from Python, None where Python cannot read it."""
    text = _source_text(given)
    if text is None:
        return None
    named = given.func if isinstance(given, functools.partial) else given
    name = getattr(named, "__qualname__", None) or type(named).__qualname__
    return Input(f"the source of {name}", hashlib.sha256(text.encode()).hexdigest())


def _source_text(given: Any) -> str | None:
    try:
        if isinstance(given, functools.partial):
            inner = _source_text(given.func)
            return None if inner is None else f"{inner}\n{_plain(given.args)}\n{_plain(given.keywords)}"
        if inspect.isfunction(given) and given.__name__ == "<lambda>":
            return _compiled(given.__code__)
        if inspect.isfunction(given) or inspect.ismethod(given) or inspect.isclass(given):
            return inspect.getsource(given)
        import torch

        if isinstance(given, torch.nn.Module):  # its own classes' source and its structure (layer sizes)
            classes = dict.fromkeys(type(layer) for layer in given.modules())
            own = [inspect.getsource(cls) for cls in classes if not cls.__module__.startswith("torch.")]
            return "\n".join([*own, repr(given)])
        return inspect.getsource(type(given)) if callable(given) else None
    except (OSError, TypeError):  # defined at an interactive prompt, or built in: nothing to read
        return None


def _compiled(code: types.CodeType) -> str:
    """A lambda's bytecode, names and constants: its source is the whole line around it, which holds the
    call it is passed to as well (``resume=True`` the second time)."""
    constants = [_compiled(value) if isinstance(value, types.CodeType) else _plain(value) for value in code.co_consts]
    return f"{code.co_code.hex()} {code.co_names} {code.co_varnames} {constants}"


def _plain(value: Any) -> str:
    """``repr`` of numbers, strings and containers of them; the type name of anything else (whose repr may
    hold a memory address that differs from one process to the next)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_plain(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {_plain(item)}" for key, item in value.items()) + "}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return type(value).__qualname__
