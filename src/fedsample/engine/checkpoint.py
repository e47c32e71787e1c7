"""Checkpoints of a simulation: everything the round loop needs to continue where it stopped.

A :class:`SimulationCheckpoint` holds, after ``rounds_done`` rounds of every run simulated
together: the global models, the server optimizer's state (momentum, second moments), the local
algorithm's state (SCAFFOLD's control variates), every sampler's state, and the metrics recorded
so far. There is no random-generator state to save: every random draw of the loop comes from a
stream keyed by ``(seed, stream, round, client)`` (:func:`fedsample.rng.stream_rng`), so round
``t`` draws the same numbers whether or not the run was interrupted before it. A resumed
simulation therefore ends with the same models and metrics as an uninterrupted one (the wall-clock
``round_seconds`` aside).

Files are archives that cannot run code (:func:`save_archive`): numpy's ``.npz`` (a zip of
``.npy`` arrays, stored uncompressed) whose member ``header`` is UTF-8 JSON naming the format and
its version and describing the structure, and whose other members are the tensors and arrays, read
with ``allow_pickle=False``. Typed objects are rebuilt from a closed list (the engine's states and
results named here, and the sampler states registered as plain data in
:mod:`fedsample.serialization`); any other type named in a file is refused. Files are written
atomically (:mod:`fedsample._io`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from fedsample._io import atomic_path
from fedsample.engine.history import ROUND_METRICS
from fedsample.errors import FedsampleError
from fedsample.serialization import from_jsonable, to_jsonable

__all__ = [
    "SimulationCheckpoint",
    "load_archive",
    "load_checkpoint",
    "save_archive",
    "save_checkpoint",
    "tree_map_tensors",
]

FORMAT = "fedsample-simulation-checkpoint"
# Version 1 was a pickle (checkpoint.pkl); it is never read, since unpickling runs code named in the file.
VERSION = 2

_HEADER = "header"
_ZIP_MAGIC = b"PK\x03\x04"
# Arrays of these kinds only (bool, signed, unsigned, float): no objects, strings or records.
_ARRAY_KINDS = "biuf"


def tree_map_tensors(function: Any, tree: Any) -> Any:
    """Apply ``function`` to every tensor of a tree of dicts, lists, tuples, NamedTuples and dataclasses."""
    if isinstance(tree, torch.Tensor):
        return function(tree)
    if isinstance(tree, dict):
        return {key: tree_map_tensors(function, value) for key, value in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # NamedTuple
        return type(tree)(*(tree_map_tensors(function, value) for value in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map_tensors(function, value) for value in tree)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        fields = {f.name: tree_map_tensors(function, getattr(tree, f.name)) for f in dataclasses.fields(tree) if f.init}
        return dataclasses.replace(tree, **fields)
    return tree


@dataclass(frozen=True, eq=False)
class SimulationCheckpoint:
    """The loop's state after ``rounds_done`` rounds of the runs ``run_keys`` (label, sampler, seed).

    ``globals`` are the stacked global models' parameters ``(runs, ...)`` and ``buffers`` their buffers
    (BatchNorm's running statistics; empty for a model without any, and in a checkpoint written
    before buffers were kept); ``server_state`` and ``algorithm_state`` are the server optimizer's and
    local algorithm's states (tensors on the CPU); ``metrics`` holds the per-round arrays and
    ``evaluations`` the evaluations so far (per run: objective, test loss, test accuracy, then the
    model's extra metrics); ``memory`` the remembered updates of the memory policies
    (:class:`~fedsample.engine.aggregation.UpdateMemory`, ``None`` under the others).
    """

    rounds_done: int
    rounds: int
    run_keys: tuple[tuple[str, str, int], ...]
    globals: dict[str, torch.Tensor]
    server_state: Any
    algorithm_state: Any
    sampler_states: tuple[Any, ...]
    metrics: dict[str, np.ndarray]
    eval_rounds: tuple[int, ...]
    evaluations: tuple[tuple[np.ndarray, ...], ...]
    buffers: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    memory: Any = None


def _engine_types() -> dict[str, type]:
    """The closed list of engine types an archive may name (sampler states come from their own registry)."""
    # Imported here: the loop imports this module.
    from fedsample.engine.aggregation import UpdateMemory
    from fedsample.engine.algorithms import ScaffoldState
    from fedsample.engine.history import History
    from fedsample.engine.server import AdaptiveState, MomentumState
    from fedsample.engine.specs import RunResult

    kinds = (SimulationCheckpoint, MomentumState, AdaptiveState, ScaffoldState, History, RunResult, UpdateMemory)
    return {kind.__name__: kind for kind in kinds}


# --- the archive: JSON header + arrays ------------------------------------------------------------


def save_archive(path: str | os.PathLike[str], content: Any, *, format: str, version: int) -> None:
    """Write ``content`` to ``path`` as an archive of ``format`` and ``version``, atomically.

    ``content`` is a tree of dicts with string keys, lists, tuples, scalars, strings, numpy arrays,
    tensors, plain-data objects (:func:`fedsample.serialization.plain_data`) and the engine's
    checkpoint, optimizer, algorithm and result types. A crash mid-write keeps the previous file.
    """
    arrays: list[np.ndarray] = []
    try:
        encoded = _encode(content, arrays, _engine_types())
    except TypeError as exc:
        raise FedsampleError(
            f"The 'content' parameter of save_archive must hold only arrays, tensors, plain data and the engine's "
            f"states. Got one that does not ({exc}) instead.",
            parameter="content",
        ) from None
    header = json.dumps({"format": format, "version": version, "content": encoded}, allow_nan=False)
    members = {_HEADER: np.frombuffer(header.encode("utf-8"), dtype=np.uint8)}
    members.update({f"a{index}": array for index, array in enumerate(arrays)})
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.savez(handle, allow_pickle=False, **members)


def load_archive(path: str | os.PathLike[str], *, format: str, version: int, parameter: str) -> Any:
    """The content of an archive written by :func:`save_archive` with ``format`` and ``version``.

    Nothing in the file is executed: arrays are read with ``allow_pickle=False``, each member no
    larger than the file itself, and objects are rebuilt from a closed list of types. A missing,
    truncated or foreign file, another format or another version raise a one-line
    :class:`~fedsample.FedsampleError` naming ``parameter``.
    """
    source = Path(path)

    def refuse(reason: str) -> FedsampleError:
        return FedsampleError(
            f"The '{parameter}' parameter must name a {format} file of version {version}. Got {str(source)!r}, "
            f"{reason}, instead.",
            parameter=parameter,
        )

    try:
        with open(source, "rb") as handle:
            if handle.read(len(_ZIP_MAGIC)) != _ZIP_MAGIC:
                raise refuse("which is not an archive of arrays (.npz)")
            handle.seek(0)
            header, arrays = _read_members(handle, os.fstat(handle.fileno()).st_size, refuse)
    except FileNotFoundError:
        raise FedsampleError(
            f"The '{parameter}' parameter must name an existing file. Got {str(source)!r} instead.",
            parameter=parameter,
        ) from None
    except IsADirectoryError:
        raise refuse("which is a directory") from None
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
        raise refuse(f"which cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})") from None
    if not isinstance(header, dict) or header.get("format") != format or "content" not in header:
        raise refuse("which is not one")
    if header.get("version") != version:
        raise refuse(f"which is of version {header.get('version')!r:.20} (this fedsample reads version {version} only)")
    try:
        return _decode(header["content"], arrays, _engine_types())
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, OverflowError) as exc:
        # FedsampleError is a ValueError: a plain-data type the registry does not know lands here too.
        raise refuse(
            f"whose content cannot be decoded ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
        ) from None


def _read_members(
    handle: IO[bytes], file_size: int, refuse: Callable[[str], FedsampleError]
) -> tuple[Any, list[np.ndarray]]:
    """The decoded JSON header and the arrays ``a0, a1, ...`` of an open archive."""
    with zipfile.ZipFile(handle) as archive:
        infos = archive.infolist()
        names = {info.filename for info in infos}
        expected = {f"{_HEADER}.npy"} | {f"a{index}.npy" for index in range(len(infos) - 1)}
        if len(names) != len(infos) or names != expected:
            raise refuse("whose members are not a header and numbered arrays")
        # Stored members only, and no larger in all than the file: memory stays bounded by its size.
        stored = all(i.compress_type == zipfile.ZIP_STORED and i.file_size == i.compress_size for i in infos)
        if not stored or sum(info.file_size for info in infos) > file_size:
            raise refuse("whose members are compressed or larger than the file")
        by_name = {info.filename: info for info in infos}
        text = _read_array(archive, by_name[f"{_HEADER}.npy"], refuse)
        if text.dtype != np.uint8 or text.ndim != 1:
            raise refuse("whose header is not UTF-8 text")
        try:
            header = json.loads(text.tobytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise refuse(f"whose header is not JSON ({type(exc).__name__})") from None
        arrays = [_read_array(archive, by_name[f"a{index}.npy"], refuse) for index in range(len(infos) - 1)]
    return header, arrays


def _read_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, refuse: Callable[[str], FedsampleError]) -> np.ndarray:
    """One ``.npy`` member: its header checked (plain numeric dtype, declared size within the member) first."""
    fmt = np.lib.format
    with archive.open(info) as member:
        try:
            major_minor = fmt.read_magic(member)
            if major_minor == (1, 0):
                shape, _, dtype = fmt.read_array_header_1_0(member)
            elif major_minor == (2, 0):
                shape, _, dtype = fmt.read_array_header_2_0(member)
            else:
                raise refuse(f"whose member {info.filename!r} has .npy version {major_minor}")
        except ValueError as exc:
            if isinstance(exc, FedsampleError):
                raise
            raise refuse(
                f"whose member {info.filename!r} is not an array ({' '.join(str(exc).split())[:80]})"
            ) from None
    if dtype.kind not in _ARRAY_KINDS or dtype.hasobject or not dtype.isnative:
        raise refuse(f"whose member {info.filename!r} has dtype {dtype.str!r} (numbers only)")
    if math.prod(shape) * dtype.itemsize > info.file_size:
        raise refuse(f"whose member {info.filename!r} declares more data than it holds")
    with archive.open(info) as member:
        try:
            array: np.ndarray = fmt.read_array(member, allow_pickle=False)
        except ValueError as exc:
            raise refuse(f"whose member {info.filename!r} is truncated ({' '.join(str(exc).split())[:80]})") from None
    return array


def _encode(obj: Any, arrays: list[np.ndarray], types: dict[str, type]) -> Any:
    """The JSON encoding of :mod:`fedsample.serialization`, extended with tensors and the engine's types."""
    if isinstance(obj, torch.Tensor):
        array = obj.detach().to("cpu").numpy()  # TypeError for dtypes numpy lacks (bfloat16)
        if array.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"cannot store a tensor of dtype {obj.dtype}")
        arrays.append(array)
        return {"__tensor__": len(arrays) - 1}
    kind = type(obj)
    if types.get(kind.__name__) is kind:
        if isinstance(obj, tuple):  # a NamedTuple
            values = obj._asdict()  # type: ignore[attr-defined]
        else:
            values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
        return {"__engine__": kind.__name__, "fields": {k: _encode(v, arrays, types) for k, v in values.items()}}
    if kind is tuple:
        return {"__tuple__": [_encode(v, arrays, types) for v in obj]}
    if kind is list:
        return [_encode(v, arrays, types) for v in obj]
    if kind is dict and all(isinstance(k, str) for k in obj):
        return {"__dict__": {k: _encode(v, arrays, types) for k, v in obj.items()}}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        raise TypeError(f"{kind.__name__} is not one of the engine's known types")
    return to_jsonable(obj, arrays=arrays)


def _decode(data: Any, arrays: list[np.ndarray], types: dict[str, type]) -> Any:
    """Invert :func:`_encode`; a type name outside ``types`` and the plain-data registry is refused."""
    if isinstance(data, list):
        return [_decode(v, arrays, types) for v in data]
    if not isinstance(data, dict):
        return from_jsonable(data)
    if "__tensor__" in data:
        index = data["__tensor__"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(arrays):
            raise ValueError(f"a tensor refers to array {index!r:.20} of {len(arrays)}")
        array = arrays[index]
        return torch.from_numpy(array if array.flags.writeable else array.copy())
    if "__engine__" in data:
        kind = types.get(data["__engine__"]) if isinstance(data["__engine__"], str) else None
        if kind is None:
            raise ValueError(f"unknown type {data['__engine__']!r:.40}")
        fields = data["fields"]
        if not isinstance(fields, dict):
            raise TypeError(f"the fields of {kind.__name__} are not a mapping")
        return kind(**{k: _decode(v, arrays, types) for k, v in fields.items()})
    if "__tuple__" in data:
        return tuple(_decode(v, arrays, types) for v in data["__tuple__"])
    if "__dict__" in data:
        return {k: _decode(v, arrays, types) for k, v in data["__dict__"].items()}
    return from_jsonable(data, arrays=arrays)


# --- checkpoints ------------------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike[str], checkpoint: SimulationCheckpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically (a crash mid-write keeps the previous file)."""
    save_archive(path, checkpoint, format=FORMAT, version=VERSION)


def load_checkpoint(path: str | os.PathLike[str]) -> SimulationCheckpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    A missing, truncated or foreign file, a checkpoint of another version, or one whose parts do
    not fit together is a one-line FedsampleError (parameter ``checkpoint``). Nothing in the file
    is executed.
    """
    checkpoint = load_archive(path, format=FORMAT, version=VERSION, parameter="checkpoint")
    problem = _structure_problem(checkpoint)
    if problem is not None:
        raise FedsampleError(
            f"The 'checkpoint' parameter must name a consistent fedsample checkpoint. Got {str(path)!r}, {problem}, "
            "instead.",
            parameter="checkpoint",
        )
    result: SimulationCheckpoint = checkpoint
    return result


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _structure_problem(checkpoint: Any) -> str | None:
    """What keeps ``checkpoint`` from being one the loop can restore, or None."""
    if not isinstance(checkpoint, SimulationCheckpoint):
        return f"which holds a {type(checkpoint).__name__}"
    c: Any = checkpoint  # read from a file: the annotations are what is being checked
    if not (_is_int(c.rounds) and _is_int(c.rounds_done) and 0 <= c.rounds_done <= c.rounds):
        return f"whose rounds ({c.rounds_done!r:.20} of {c.rounds!r:.20}) are not counts"
    keys = c.run_keys
    well_keyed = isinstance(keys, tuple) and all(
        isinstance(k, tuple) and len(k) == 3 and isinstance(k[0], str) and isinstance(k[1], str) and _is_int(k[2])
        for k in keys
    )
    if not well_keyed or not keys:
        return "whose run keys are not (label, sampler, seed) triples"
    runs = len(keys)
    for part in (c.globals, c.buffers):
        if not isinstance(part, dict) or not all(
            isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == runs for v in part.values()
        ):
            return f"whose global models are not tensors stacked over its {runs} runs"
    if c.memory is not None:
        parts = [getattr(c.memory, "updates", None), getattr(c.memory, "average", None)]
        if not all(
            isinstance(part, dict)
            and all(isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == runs for v in part.values())
            for part in parts
        ):
            return f"whose remembered updates are not tensors stacked over its {runs} runs"
    if not isinstance(c.sampler_states, tuple) or len(c.sampler_states) != runs:
        return f"which does not hold one sampler state per run ({runs})"
    for index, state in enumerate(c.sampler_states):
        # The engine starts every sampler afresh and updates it once a round, plus once for an initial
        # phase (DivFL, high-loss: every client's report before the first selection): a state's round
        # counter (which bounds its own counters, such as Oort's last_round) is at most the rounds done + 1.
        counted = getattr(state, "round", None)
        if _is_int(counted) and counted > c.rounds_done + 1:
            return f"whose run {index} has a sampler state at round {counted}, beyond the {c.rounds_done} rounds done"
    metrics = c.metrics
    if not isinstance(metrics, dict) or not all(isinstance(v, np.ndarray) for v in metrics.values()):
        return "whose metrics are not arrays"
    shapes: dict[str, tuple[int, ...]] = {
        m.name: (runs, c.rounds) if m.per_run else (c.rounds,)
        for m in ROUND_METRICS
        if not m.optional or m.name in metrics
    }
    for name, shape in shapes.items():
        if name not in metrics or metrics[name].shape != shape:
            return f"whose metric {name!r} is not an array of shape {shape}"
    evaluations = c.evaluations
    if not (isinstance(c.eval_rounds, tuple) and all(_is_int(t) for t in c.eval_rounds)):
        return "whose evaluation rounds are not counts"
    if not isinstance(evaluations, tuple) or len(evaluations) != len(c.eval_rounds):
        return "which does not hold one evaluation per evaluation round"
    widths = {len(evaluation) if isinstance(evaluation, tuple) else 0 for evaluation in evaluations}
    for evaluation in evaluations:
        if not (isinstance(evaluation, tuple) and len(evaluation) >= 3 and len(widths) == 1):
            return "whose evaluations are not (objective, test loss, test accuracy, metrics...) tuples of one width"
        if not all(isinstance(v, np.ndarray) and v.shape == (runs,) for v in evaluation):
            return f"whose evaluations are not arrays over its {runs} runs"
    return None
