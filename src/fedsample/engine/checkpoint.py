"""Checkpoints of a simulation: everything the round loop needs to continue where it stopped.

A :class:`SimulationCheckpoint` holds, after ``rounds_done`` rounds of every run simulated
together: the global models, the server optimizer's state (momentum, second moments), the local
algorithm's state (SCAFFOLD's control variates), every sampler's state, and the metrics recorded
so far. There is no random-generator state to save: every random draw of the loop comes from a
stream keyed by ``(seed, stream, round, client)`` (:func:`fedsample.rng.stream_rng`), so round
``t`` draws the same numbers whether or not the run was interrupted before it. A resumed
simulation therefore ends with the same models and metrics as an uninterrupted one (the wall-clock
``round_seconds`` aside).

Files are pickles written atomically (:mod:`fedsample._io`). Load only checkpoints you wrote:
unpickling runs code named in the file.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsample._io import write_bytes_atomic
from fedsample.errors import FedsampleError

__all__ = ["SimulationCheckpoint", "load_checkpoint", "save_checkpoint", "tree_map_tensors"]

FORMAT = "fedsample-simulation-checkpoint"
VERSION = 1


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

    ``globals`` are the stacked global models ``(runs, ...)``; ``server_state`` and
    ``algorithm_state`` are the server optimizer's and local algorithm's states (tensors on the
    CPU); ``metrics`` holds the per-round arrays and ``evaluations`` the evaluations so far.
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
    evaluations: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]


def save_checkpoint(path: str | os.PathLike[str], checkpoint: SimulationCheckpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically (a crash mid-write keeps the previous file)."""
    payload = {"format": FORMAT, "version": VERSION, "checkpoint": checkpoint}
    write_bytes_atomic(path, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))


def load_checkpoint(path: str | os.PathLike[str]) -> SimulationCheckpoint:
    """Read a checkpoint written by :func:`save_checkpoint`; a missing or foreign file is a FedsampleError."""
    source = Path(path)
    try:
        payload = pickle.loads(source.read_bytes())
    except FileNotFoundError:
        raise FedsampleError(
            f"The 'checkpoint' parameter must name an existing file. Got {str(source)!r} instead.",
            parameter="checkpoint",
        ) from None
    except Exception as exc:  # truncated or foreign bytes
        raise FedsampleError(
            f"The 'checkpoint' parameter must name a fedsample checkpoint. Got {str(source)!r}, which cannot be "
            f"read ({type(exc).__name__}) instead.",
            parameter="checkpoint",
        ) from None
    valid = isinstance(payload, dict) and payload.get("format") == FORMAT and payload.get("version") == VERSION
    if not valid or not isinstance(payload.get("checkpoint"), SimulationCheckpoint):
        raise FedsampleError(
            f"The 'checkpoint' parameter must name a fedsample checkpoint of version {VERSION}. Got {str(source)!r} "
            "instead.",
            parameter="checkpoint",
        )
    checkpoint: SimulationCheckpoint = payload["checkpoint"]
    return checkpoint
