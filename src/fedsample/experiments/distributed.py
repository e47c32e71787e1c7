"""The runs of a comparison as Ray tasks: the same run directory as a local run, computed on a cluster.

Each task receives the resolved config and the indices of its runs (one sampler x seed by default),
builds the federation and the initial model from the config exactly as the local runner does
(:func:`~fedsample.experiments.build.build_experiment`), simulates its runs and returns their
results; the centralized baseline runs one task per seed. The runner writes the run directory from
the results (:class:`~fedsample.experiments.executors.RayExecutor`), so the files are those of a
local run. The engine makes a run's numbers independent of the runs it is batched with (one model
evaluated at a time, each client's batch padded to a width set by its own size), so the numbers
are the local run's, bit for bit, where PyTorch's kernels give the same bits at the task's thread
count (``docs/experiments.md``).

Checkpoints: each finished task's results are saved in ``RUN_DIR/tasks/`` as it completes, as
archives of arrays with a JSON header that run no code when read (:mod:`fedsample.engine.checkpoint`).
``fedsample run --resume RUN_DIR --ray`` keeps them and runs only the unfinished tasks (those start
from round 0: tasks do not checkpoint mid-way). The folder is removed when the run completes.

Needs the ``ray`` extra (``pip install 'fedsample[ray]'``); Ray is imported here only, when used.
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from fedsample._imports import require
from fedsample._interrupts import reclaim_signals
from fedsample._validation import Constraint, Interval, NoneOr, Text, check_params
from fedsample.errors import FedsampleError, one_line
from fedsample.experiments.config import ExperimentConfig
from fedsample.experiments.progress import ProgressReporter
from fedsample.experiments.rundir.directory import resume_target

if TYPE_CHECKING:
    from fedsample.engine import RoundReport, RunResult
    from fedsample.experiments.build import Experiment

__all__ = ["TASKS_DIR", "TASK_RETRIES", "RayOptions", "connect", "ray_session", "run_tasks"]

TASKS_DIR = "tasks"
# A task whose worker dies (killed, out of memory, its node lost) runs again, at most this many times;
# an exception raised by the task itself is not retried (the same inputs would raise it again).
TASK_RETRIES = 2
_FORMAT = "fedsample-ray-task"
# Version 1 was a pickle (task-NNNN.pkl); such files are never read, and their tasks run again.
_VERSION = 2


@dataclass(frozen=True)
class RayOptions:
    """Where and how to run: ``address`` of the cluster (None: the instance this process is attached
    to, else a new local one; ``"auto"``; ``"HOST:PORT"``; ``"ray://HOST:10001"``), the number of
    runs (sampler x seed) each task simulates together, and the CPUs (PyTorch threads) of a task."""

    address: str | None = None
    runs_per_task: int = 1
    cpus_per_task: int = 1

    # The constraints (fedsample._params.declared reads them with the defaults above).
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "address": NoneOr(Text("a string")),
        "runs_per_task": Interval(int, 1, None, closed="left"),
        "cpus_per_task": Interval(int, 1, None, closed="left"),
    }

    def __post_init__(self) -> None:
        constraints = self._parameter_constraints
        check_params("RayOptions", {name: getattr(self, name) for name in constraints}, constraints)


def _import_ray() -> Any:
    return require("ray", extra="ray", package="Ray", owner="The '--ray' parameter", parameter="--ray")


def _unreachable(address: str, reason: str) -> FedsampleError:
    return FedsampleError(
        "The '--ray' parameter must name a reachable Ray cluster (auto, HOST:PORT or ray://HOST:10001). "
        f"Got {address!r}, which cannot be reached ({reason}) instead.",
        parameter="--ray",
    )


def _check_reachable(address: str) -> None:
    """Fail fast on an explicit ``HOST:PORT`` that accepts no connection (Ray itself retries for minutes)."""
    if address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise _unreachable(address, "not HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except OSError as exc:
        raise _unreachable(address, exc.strerror or type(exc).__name__) from None


def connect(address: str | None) -> bool:
    """Attach to the Ray cluster at ``address`` (see :class:`RayOptions`); True when this call
    initialised Ray (the caller then shuts it down). A process already attached keeps its instance."""
    ray = _import_ray()
    if ray.is_initialized():
        return False
    if address is not None:
        _check_reachable(address)
    try:
        with warnings.catch_warnings():  # Ray's tips about future defaults are not the user's business
            warnings.simplefilter("ignore", FutureWarning)
            ray.init(address=address, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError or ValueError with long messages
        raise _unreachable(address or "local", " ".join(str(exc).split())[:200] or type(exc).__name__) from None
    finally:
        reclaim_signals()  # ray.init's SIGTERM handler exits on the spot: the command line's says what is saved
    return True


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray attached for the duration of the block; shut down after it when the block started it."""
    started = connect(address)
    try:
        yield
    finally:
        if started:
            _import_ray().shutdown()


def _run_task(
    config: ExperimentConfig, states: list[Any], indices: list[int], centralized: bool, threads: int = 1
) -> list[Any]:
    """One task: the runs ``indices`` of the config (or, with ``centralized``, the baseline of those seeds)."""
    from fedsample._threads import prefer_passive_waiting

    prefer_passive_waiting()  # before this worker's first torch import (fedsample._threads)
    import torch

    from fedsample.experiments.build import build_experiment
    from fedsample.experiments.tasks import simulate_baseline, simulate_group

    # As many threads as the task has CPUs, whatever the worker process ran before; training.threads =
    # "auto" keeps that count (capped at the worker's usable CPUs), an explicit count replaces it.
    torch.set_num_threads(threads)
    # The driver's config (read there once, and marked so) and its runs' first sampler states: trusted.
    experiment = build_experiment(config, states=states)
    if centralized:
        return [simulate_baseline(experiment, experiment.config.seeds[index]) for index in indices]
    results: dict[int, Any] = {}
    for data, group in experiment.federation_groups(indices):
        results.update(zip(group, simulate_group(experiment, data, group), strict=True))
    return [results[index] for index in indices]


def _tasks(config: ExperimentConfig, num_runs: int, runs_per_task: int) -> list[tuple[bool, list[int]]]:
    """The tasks: chunks of the federated runs, then one per seed of the centralized baseline."""
    tasks = [(False, list(range(i, min(i + runs_per_task, num_runs)))) for i in range(0, num_runs, runs_per_task)]
    if config.centralized:
        tasks += [(True, [index]) for index in range(len(config.seeds))]
    return tasks


def _task_file(directory: Path, number: int) -> Path:
    return directory / TASKS_DIR / f"task-{number:04d}.npz"


def _save_task(path: Path, key: tuple[bool, list[int]], results: list[Any]) -> None:
    """Save a finished task's results (atomically, as an archive that runs no code when read)."""
    from fedsample.engine.checkpoint import save_archive

    save_archive(path, {"task": key, "results": results}, format=_FORMAT, version=_VERSION)


def _load_task(path: Path, key: tuple[bool, list[int]]) -> list[Any] | None:
    """A finished task's results; None when the file is missing or holds another task (it runs again).

    A file that is not a task file of this version (truncated, foreign, a pickle) is a one-line
    FedsampleError naming it: nothing in it is executed.
    """
    from fedsample.engine import RunResult
    from fedsample.engine.checkpoint import load_archive

    if not path.exists():
        return None
    payload = load_archive(path, format=_FORMAT, version=_VERSION, parameter="--resume")
    task, results = (payload.get("task"), payload.get("results")) if isinstance(payload, dict) else (None, None)
    if _is_task_key(task) and task != key:
        return None  # a task of another split (runs_per_task changed): run this one again
    complete = isinstance(results, list) and len(results) == len(key[1])
    if task != key or not complete or not all(isinstance(result, RunResult) for result in results or []):
        raise FedsampleError(
            f"The '--resume' parameter must name a run directory whose Ray task files hold their task's results. "
            f"Got {str(path)!r}, which does not (delete it to run that task again), instead.",
            parameter="--resume",
        )
    return results


def _is_task_key(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], bool)
        and isinstance(value[1], list)
        and all(isinstance(index, int) and not isinstance(index, bool) for index in value[1])
    )


def run_tasks(
    experiment: Experiment,
    directory: Path,
    options: RayOptions,
    *,
    progress: ProgressReporter,
    on_round: Callable[[RoundReport], None] | None = None,
) -> list[RunResult]:
    """Every run of ``experiment`` (then the centralized baseline's) as Ray tasks, in the run directory
    the runner has opened: the tasks already saved in ``RUN_DIR/tasks/`` are kept, the others run.
    ``on_round`` receives the round reports of each task's runs as the task returns."""
    config = experiment.config
    tasks = _tasks(config, len(experiment.runs), options.runs_per_task)
    results: list[list[Any] | None] = [_load_task(_task_file(directory, i), key) for i, key in enumerate(tasks)]
    kept = sum(r is not None for r in results)
    if kept:
        progress.message(f"resuming {directory}: {kept} of {len(tasks)} Ray tasks already done")
    _run_remaining(experiment, directory, tasks, results, progress, options.cpus_per_task, on_round)
    return [result for chunk in results if chunk is not None for result in chunk]


def _run_remaining(
    experiment: Experiment,
    directory: Path,
    tasks: list[tuple[bool, list[int]]],
    results: list[list[Any] | None],
    line: ProgressReporter,
    threads: int,
    on_round: Callable[[RoundReport], None] | None = None,
) -> None:
    """Submit the tasks without results, save each one's results as it finishes, report runs done.

    A task that fails after its retries does not stop the others: their results are saved, then the
    run ends in one line naming the failed task and the command that completes the run. A
    :class:`~fedsample.FedsampleError` raised by a task (bad input) ends the run at once.
    """
    ray = _import_ray()
    if not ray.is_initialized():
        connect(None)
    config = experiment.config
    gpu = 1 if config.training.device.startswith("cuda") else 0
    remote = ray.remote(num_cpus=threads, num_gpus=gpu, max_retries=TASK_RETRIES)(_run_task)
    reference = ray.put(config)
    states = ray.put([run.state for run in experiment.runs])
    pending: dict[Any, int] = {}
    for number, (centralized, indices) in enumerate(tasks):
        if results[number] is None:
            pending[remote.remote(reference, states, indices, centralized, threads)] = number
    rounds = config.training.rounds
    total = sum(len(indices) for _, indices in tasks)
    done = sum(len(tasks[i][1]) for i, r in enumerate(results) if r is not None)
    failed: list[tuple[int, BaseException]] = []
    line.begin(f"{config.name}: {total} runs on Ray ({len(tasks)} tasks)", [])
    line.update(done * rounds, total * rounds, None)
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            number = pending.pop(ready[0])
            try:
                chunk = ray.get(ready[0])
            except Exception as exc:
                cause = getattr(exc, "cause", None) or exc
                if isinstance(cause, FedsampleError):
                    raise cause from None
                failed.append((number, exc))
                continue
            results[number] = chunk
            key = tasks[number]
            _save_task(_task_file(directory, number), key, chunk)
            if on_round is not None:
                from fedsample.experiments.results.tracking import reports_from_histories

                for report in reports_from_histories([result.history for result in chunk]):
                    on_round(report)
            done += len(key[1])
            line.update(done * rounds, total * rounds, None)
    finally:
        for ref in pending:
            ray.cancel(ref)
    line.close()
    if failed:
        raise _task_failure(experiment, directory, tasks, failed, sum(r is not None for r in results), ray)


def _task_failure(
    experiment: Experiment,
    directory: Path,
    tasks: list[tuple[bool, list[int]]],
    failed: list[tuple[int, BaseException]],
    finished: int,
    ray: Any,
) -> FedsampleError:
    """One line: the first failed task (its runs, labels and seeds), why, and how the run is completed."""
    number, exc = failed[0]
    centralized, indices = tasks[number]
    if centralized:
        runs = [f"centralized seed {experiment.config.seeds[index]}" for index in indices]
    else:
        runs = [
            f"{experiment.runs[i].label or experiment.runs[i].sampler.name} seed {experiment.runs[i].seed}"
            for i in indices
        ]
    if isinstance(exc, ray.exceptions.RayTaskError):  # the task raised: not retried
        reason = one_line(getattr(exc, "cause", None) or exc, 160)
    else:  # its worker died on every attempt
        reason = f"{type(exc).__name__} on each of its {TASK_RETRIES + 1} attempts"
    others = f" (and {len(failed) - 1} more tasks)" if len(failed) > 1 else ""
    target = resume_target(directory)
    return FedsampleError(
        f"The Ray task {number} (runs: {', '.join(runs)}){others} failed: {reason}. The {finished} finished tasks are "
        f"saved in {str(directory / TASKS_DIR)!r}: `fedsample run --resume {target} --ray` completes the run "
        "(without --ray, it runs every run again here).",
        parameter="--ray",
    )
