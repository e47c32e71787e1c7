"""Each value checked once where it enters (issue 33 item 4): how often one run reads its config, checks
``num_sampled`` and initialises a sampler, counted, so that a new re-check shows up here.

The counts are taken with a profiler hook (``sys.setprofile``) on the functions themselves, so an import
by name (``from fedsample._validation import check_param``) is counted as well. The ceilings are today's
counts: lower them when a check goes, never raise them without a reason in the commit.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from fedsample._validation import check_param
from fedsample.experiments.config import config_from_dict, load_config
from fedsample.experiments.distributed import _run_task
from fedsample.experiments.executors import LocalExecutor
from fedsample.experiments.runner import check_experiment
from fedsample.samplers import _base

CONFIG = """
name = "checked-once"
seeds = 2
[federation]
dataset = "osmd-linear"
num_clients = 12
sigma = 3.0
seed = 1
[algorithm]
name = "minibatch-sgd"
[training]
rounds = 1
num_sampled = 3
local_steps = 1
batch_size = 8
local_lr = 0.05
[[samplers]]
name = "md"
[[samplers]]
name = "uniform"
"""
SAMPLERS, SEEDS = 2, 2
RUNS = SAMPLERS * SEEDS

_READ = config_from_dict.__code__
_CHECK = check_param.__code__
_SAMPLERS = str(Path(_base.__file__).parent)


def _is_sampler_init(frame: FrameType) -> bool:
    return frame.f_code.co_name == "init" and frame.f_code.co_filename.startswith(_SAMPLERS)


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """Counts of config reads, ``num_sampled`` checks and sampler inits (a sampler's init calling its
    parent's, or the base class's wrapper calling the sampler's, is one init) made inside the block."""
    counts: Counter[str] = Counter()

    def hook(frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        if frame.f_code is _READ:
            counts["config reads"] += 1
        elif frame.f_code is _CHECK and frame.f_locals.get("name") == "num_sampled":
            counts["num_sampled checks"] += 1
        elif _is_sampler_init(frame) and not (frame.f_back is not None and _is_sampler_init(frame.f_back)):
            counts["sampler inits"] += 1

    previous: Callable[..., Any] | None = sys.getprofile()
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)  # type: ignore[arg-type]


class Quiet:
    def begin(self, phase: str, labels: Any) -> None: ...
    def update(self, done: int, total: int, losses: np.ndarray | None = None) -> None: ...
    def message(self, text: str) -> None: ...
    def close(self) -> None: ...


def test_a_config_run_reads_its_config_once_and_checks_what_it_built_no_more(tmp_path: Path) -> None:
    """``load_config``, then what ``run_experiment`` does before it writes (``check_experiment``) and the
    local executor's runs: the file is read once (the run trusts what the reader made).

    Each sampler is initialised once, before anything is written (a sampler the data do not suit is
    refused there), and that state is its runs' first; ``num_sampled`` is checked there and by the
    training settings. Before issue 33 the run read its config twice and initialised each sampler once
    more per run. (The results' files are left out: plotting under the profiler hook takes seconds.)
    """
    import fedsample.engine.loop  # noqa: F401  (imported outside the counted block, which profiles every call)

    path = _written(tmp_path)
    with counted() as counts:
        experiment = check_experiment(load_config(path))
        executed = LocalExecutor().execute(experiment, tmp_path, resume=False, progress=Quiet())
    assert len(executed.results) == RUNS
    assert counts["config reads"] == 1, counts
    assert counts["sampler inits"] == SAMPLERS, counts
    assert counts["num_sampled checks"] <= 1 + SAMPLERS, counts


def test_a_ray_task_trusts_the_config_the_driver_read(tmp_path: Path) -> None:
    """The body of a Ray task (what a worker runs, here in this process): the driver's config and its runs'
    first sampler states are trusted, neither read nor initialised again (before issue 33 the task read the
    config twice and initialised each sampler once, then once per run)."""
    import torch

    config = load_config(_written(tmp_path))
    states = [run.state for run in check_experiment(config).runs]  # the driver's, sent with the config
    threads = torch.get_num_threads()
    try:
        with counted() as counts:
            results = _run_task(config, states, list(range(RUNS)), centralized=False)
    finally:
        torch.set_num_threads(threads)  # the task sets the worker's
    assert len(results) == RUNS
    assert counts["config reads"] == 0, counts
    assert counts["sampler inits"] == 0, counts


def test_a_hand_built_config_is_read_once_where_it_enters(tmp_path: Path) -> None:
    """A config the reader did not make (``dataclasses.replace`` of one) is checked by the build, once."""
    import dataclasses

    from fedsample.experiments.build import build_experiment

    config = dataclasses.replace(load_config(_written(tmp_path)), description="edited")
    with counted() as counts:
        build_experiment(config)
    assert counts["config reads"] == 1, counts


def _written(directory: Path) -> Path:
    path = directory / "c.toml"
    path.write_text(CONFIG)
    return path


def test_no_override_reads_the_config_again(tmp_path: Path) -> None:
    """``fedsample run CONFIG`` without flags passes its config through ``apply_overrides``: nothing entered,
    nothing read again (before issue 33 the command line read a config three times in a plain run)."""
    from fedsample.experiments.config.overrides import apply_overrides

    config = load_config(_written(tmp_path))
    with counted() as counts:
        same = apply_overrides(config, {})
        changed = apply_overrides(config, {"training.rounds": 2})
    assert same is config
    assert changed.training.rounds == 2
    assert counts["config reads"] == 1, counts
