"""Where the runs of an experiment execute: here (:class:`LocalExecutor`) or as Ray tasks (:class:`RayExecutor`).

An :class:`Executor` trains every run of a checked :class:`~fedsample.experiments.build.Experiment` and
returns the results; the runner (:func:`~fedsample.experiments.runner.run_experiment`) owns the run
directory around it: it opens and locks it, writes the config before and the results after, and
then removes the executor's intermediate files (:func:`discard_intermediate_files`). Executors keep
their checkpoints in the run directory so that ``--resume`` continues them: the local executor's
``checkpoint.npz`` (or one ``checkpoint-seed{SEED}.npz`` per seed with ``federation.per_seed``), the
Ray executor's ``tasks/`` (:mod:`fedsample.experiments.distributed`). Ray is imported only when a
:class:`RayExecutor` runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fedsample._io import write_fault
from fedsample.errors import FedsampleError
from fedsample.experiments.build import Experiment
from fedsample.experiments.config.reading import ExperimentConfig
from fedsample.experiments.distributed import TASKS_DIR, RayOptions, run_tasks
from fedsample.experiments.progress import ProgressReporter
from fedsample.experiments.rundir.directory import current_run_directory
from fedsample.experiments.tasks import simulate_baseline, simulate_group

if TYPE_CHECKING:
    from fedsample.engine import RoundReport, RunResult

__all__ = [
    "CHECKPOINT_FILE",
    "Executed",
    "Executor",
    "LocalExecutor",
    "RayExecutor",
    "checkpoint_file",
    "discard_intermediate_files",
    "local_checkpoints",
]

CHECKPOINT_FILE = "checkpoint.npz"


@dataclass(frozen=True, eq=False)
class Executed:
    """What an executor returns: every run's result (the experiment's runs in order, then the
    centralized baseline's, one per seed) and the round the earliest resumed checkpoint had reached."""

    results: list[RunResult]
    resumed_from: int | None = None


class Executor(Protocol):
    """Trains the runs of ``experiment``, keeping its checkpoints in ``directory`` (the run directory,
    already opened by the runner) and continuing them with ``resume``; reports to ``progress``.
    ``check`` refuses, before the runner writes anything, what this executor cannot run."""

    def check(self, experiment: Experiment) -> None: ...

    def execute(
        self,
        experiment: Experiment,
        directory: Path,
        *,
        resume: bool,
        progress: ProgressReporter,
        on_round: Callable[[RoundReport], None] | None = None,
    ) -> Executed: ...


@dataclass(frozen=True)
class LocalExecutor:
    """The runs trained in this process, batched, one federation group after another, with checkpoints."""

    def check(self, experiment: Experiment) -> None:
        """Refuse a CUDA device that this process cannot see (the engine would, once the directory is made)."""
        import torch

        device = experiment.training.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise FedsampleError(
                f"The 'training.device' parameter must name a device this machine has. Got {device!r} "
                "(PyTorch sees no CUDA device) instead.",
                parameter="training.device",
            )

    def execute(
        self,
        experiment: Experiment,
        directory: Path,
        *,
        resume: bool,
        progress: ProgressReporter,
        on_round: Callable[[RoundReport], None] | None = None,
    ) -> Executed:
        """Every run here; ``on_round`` receives each round's report as the runs train (the rounds a resumed
        group runs)."""
        from fedsample.engine import load_checkpoint, save_checkpoint

        config = experiment.config
        labels = [run.label or run.sampler.name for run in experiment.runs]
        progress.begin(f"{config.name}: {len(experiment.runs)} runs", labels)
        groups = experiment.federation_groups()
        results: list[Any] = [None] * len(experiment.runs)
        resumed_from: int | None = None
        for number, (data, indices) in enumerate(groups):
            path = directory / checkpoint_file(config, experiment.runs[indices[0]].seed)
            loaded = load_checkpoint(path) if resume and path.exists() else None
            if loaded is not None:
                progress.message(f"resuming {path} after round {loaded.rounds_done} of {config.training.rounds}")
                resumed_from = loaded.rounds_done if resumed_from is None else min(resumed_from, loaded.rounds_done)

            def save(checkpoint: Any, path: Path = path) -> None:
                save_checkpoint(path, checkpoint)

            def report_group(p: Any, offset: int = number * config.training.rounds) -> None:
                progress.update(offset + p.done, len(groups) * p.total, p.train_loss)

            group_results = simulate_group(
                experiment,
                data,
                indices,
                progress=report_group,
                on_round=on_round,
                checkpoint=save,
                checkpoint_every=config.run.checkpoint_every,
                resume=loaded,
            )
            for index, result in zip(indices, group_results, strict=True):
                results[index] = result
        if config.centralized:
            progress.begin(f"{config.name}: centralized baseline", ["centralized"] * len(config.seeds))
            for index, seed in enumerate(config.seeds):

                def report(p: Any, index: int = index) -> None:
                    progress.update(index * p.total + p.done, p.total * len(config.seeds), None)

                results.append(simulate_baseline(experiment, seed, progress=report, on_round=on_round))
        progress.close()
        return Executed(results, resumed_from)


@dataclass(frozen=True)
class RayExecutor:
    """The runs as Ray tasks (:mod:`fedsample.experiments.distributed`); the files are a local run's.

    A run directory holding a local run's checkpoint is not resumed here (resume it without Ray).
    """

    options: RayOptions = field(default_factory=RayOptions)

    def check(self, experiment: Experiment) -> None:
        """A comparison set up in Python is refused: the workers rebuild the data and the model from the
        config, which names them ``python:NAME``. The device is the workers' business."""
        names = (experiment.config.federation.dataset, experiment.config.model.factory or "")
        if any(name.startswith("python:") for name in names):
            raise FedsampleError(
                "The '--ray' parameter needs an experiment its workers can rebuild from the config. Got one whose "
                "data or model were given from Python (run_comparison) instead: run it locally.",
                parameter="--ray",
            )

    def execute(
        self,
        experiment: Experiment,
        directory: Path,
        *,
        resume: bool,
        progress: ProgressReporter,
        on_round: Callable[[RoundReport], None] | None = None,
    ) -> Executed:
        """Every run as Ray tasks; ``on_round`` receives the reports of a task's runs when it returns (every
        round of them, in order), those of the tasks a resumed run kept were given before."""
        if resume and local_checkpoints(directory):
            raise FedsampleError(
                f"The '--ray' parameter cannot resume {str(directory)!r}, which holds a local run's checkpoint "
                "(resume it without --ray).",
                parameter="--ray",
            )
        return Executed(run_tasks(experiment, directory, self.options, progress=progress, on_round=on_round))


def checkpoint_file(config: ExperimentConfig, seed: int) -> str:
    """The checkpoint of the runs of ``seed``: ``checkpoint.npz`` for all runs together, or one
    ``checkpoint-seed{seed}.npz`` per seed when each seed has its own federation (``per_seed``)."""
    return f"checkpoint-seed{seed}.npz" if config.federation.per_seed else CHECKPOINT_FILE


def local_checkpoints(directory: Path) -> list[Path]:
    """The local executor's checkpoints present in ``directory``."""
    found = sorted(directory.glob("checkpoint-seed*.npz"))
    single = directory / CHECKPOINT_FILE
    return [single, *found] if single.exists() else found


def discard_intermediate_files(directory: Path) -> None:
    """Remove every executor's checkpoints from a run directory whose results are written (an
    interrupted Ray run finished locally leaves its task files, and they go too). Inside the open run
    directory, only while it is still the one opened (a link is removed, never followed), and its
    manifest then lists only what is left."""
    opened = current_run_directory()
    if opened is not None:
        opened.check()
    try:
        for path in local_checkpoints(directory):
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise write_fault(exc, exc.filename or directory, action="Removing") from None
    shutil.rmtree(directory / TASKS_DIR, ignore_errors=True)  # refuses a link (left in place)
    if opened is not None and opened.path == directory:
        opened.prune()  # the manifest lists what is there
