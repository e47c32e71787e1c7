"""What a run directory holds for ``fedsample run --resume``, in words: said when a run is interrupted.

:func:`saved_work` reads the directory as ``--resume`` would (a suite's parts, ``runs.json``, the
local checkpoints, the Ray task files) and says what is saved: ``the checkpoint after round 30 of 200
is saved``. It reads the files; nothing it says comes from the interrupted process's memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from fedsample.errors import FedsampleError
from fedsample.experiments.distributed import TASKS_DIR
from fedsample.experiments.executors import local_checkpoints
from fedsample.experiments.rundir.directory import is_run_directory
from fedsample.experiments.runner import CONFIG_FILE, is_complete
from fedsample.experiments.suite import SUITE_FILE

__all__ = ["Saved", "saved_work"]


@dataclass(frozen=True)
class Saved:
    """What a run directory holds: ``text`` says it (``the checkpoint after round 30 of 200 is saved``);
    ``resumable``: ``--resume`` continues it; ``ray``: its saved work is Ray tasks (resumed with ``--ray``)."""

    text: str
    resumable: bool
    ray: bool = False


def saved_work(directory: Path) -> Saved:
    """What ``directory`` (a run directory or a suite's) holds for ``--resume``."""
    if not is_run_directory(directory):
        return Saved("nothing was written", resumable=False)
    index = directory / SUITE_FILE
    if index.is_file():
        try:
            parts = [str(part) for part in json.loads(index.read_text())["parts"]]
        except (OSError, ValueError, KeyError, TypeError):
            return Saved("the suite's index cannot be read", resumable=False)
        done = [part for part in parts if is_complete(directory / part)]
        rest = [part for part in parts if part not in done]
        if not rest:
            return Saved(f"all {len(parts)} parts are complete", resumable=True)
        inner = _saved_in_run(directory / rest[0])
        complete = f"{len(done)} of {len(parts)} parts are complete, and in part {rest[0]!r} "
        return Saved(complete + inner.text, resumable=True, ray=inner.ray)
    return _saved_in_run(directory)


def _saved_in_run(directory: Path) -> Saved:
    if is_complete(directory):
        return Saved("the run is complete", resumable=True)
    saved = [_checkpoint_round(path) for path in local_checkpoints(directory)]
    rounds = [(name, done, total) for name, done, total in saved if done is not None]
    if len(rounds) == 1:
        _, done, total = rounds[0]
        return Saved(f"the checkpoint after round {done} of {total} is saved", resumable=True)
    if rounds:
        each = ", ".join(f"{done} ({name})" for name, done, _ in rounds)
        return Saved(f"checkpoints after rounds {each} of {rounds[0][2]} are saved", resumable=True)
    tasks = sorted((directory / TASKS_DIR).glob("task-*.npz")) if (directory / TASKS_DIR).is_dir() else []
    if tasks:
        verb = "is" if len(tasks) == 1 else "are"
        plural = "" if len(tasks) == 1 else "s"
        return Saved(f"{len(tasks)} finished Ray task{plural} {verb} saved", resumable=True, ray=True)
    if (directory / CONFIG_FILE).is_file():
        return Saved("no checkpoint is saved yet (the runs start again from round 0)", resumable=True)
    return Saved("nothing was saved yet", resumable=False)


def _checkpoint_round(path: Path) -> tuple[str, int | None, int | None]:
    """The checkpoint's seed (``seed 3``, or ``""``), rounds done and rounds in all (None if unreadable)."""
    from fedsample.engine.checkpoint import load_checkpoint

    seed = re.fullmatch(r"checkpoint-seed([0-9]+)\.npz", path.name)
    name = f"seed {seed.group(1)}" if seed else ""
    try:
        checkpoint = load_checkpoint(path)
    except (FedsampleError, OSError):
        return name, None, None
    return name, checkpoint.rounds_done, checkpoint.rounds
