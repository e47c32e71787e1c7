"""The comparison runner: every sampler x seed of a config on one federation, results in a run directory.

All runs share the federation (built once from ``federation.seed``), the initial model and the
training configuration; they train together, batched, in one call of
:func:`fedsample.engine.simulate`. With ``federation.per_seed`` each seed's runs train together on
that seed's realization, one call per seed. The run directory holds:

- ``config.toml``: the resolved config (every default filled in); ``fedsample run RUN_DIR/config.toml``
  repeats the run;
- ``checkpoint.npz`` while the run is in progress (every ``run.checkpoint_every`` rounds), removed
  when it completes; ``fedsample run --resume RUN_DIR`` continues from it. With
  ``federation.per_seed`` the runs of each seed train on their own federation, one seed after
  another, and each seed has its own ``checkpoint-seed{SEED}.npz``. Checkpoints are archives of
  arrays with a JSON header (:mod:`fedsample.engine.checkpoint`): reading one runs no code. The
  pickled ``checkpoint*.pkl`` of earlier versions are never read, and ``--resume`` refuses them;
- ``metrics.parquet`` and ``metrics.csv`` (per round, every run), ``summary.csv``/``summary.md``/``summary.tex``,
  ``plots/*.png`` and ``report.md`` (:mod:`fedsample.experiments.results.report`);
- ``bias.json`` with ``[report] measure_bias = true``: each sampler's bias measured on a fixed
  feedback sequence (:mod:`fedsample.experiments.results.bias`), shown in ``report.md``;
- ``states/*.json``: each run's final sampler state (``fedsample stats --sampler-state FILE``);
- ``tensorboard/`` and ``mlflow.db`` with ``[tracking]``: every round's metrics as the runs train
  (:mod:`fedsample.experiments.results.tracking`);
- ``runs.json``: the runs (label, sampler, hyperparameters, seed, privacy report, state file) and
  run information; written last, its ``"complete": true`` marks a finished run;
- ``inputs.json``: the SHA-256 of the data and of the model's code the run began with, which
  ``--resume`` checks before it writes anything (:mod:`fedsample.experiments.rundir.inputs`).

- ``manifest.json``: every file fedsample wrote here (:mod:`fedsample.experiments.rundir.directory`), so that
  ``--overwrite`` removes those and nothing else; ``.fedsample.lock`` while a process writes the
  directory.

Every file is written atomically, so a run killed at any moment leaves no truncated file. The
config, the data, the samplers, the model and the memory the history needs are all checked before
the first byte is written. The runs themselves execute here or as Ray tasks
(:mod:`fedsample.experiments.executors`); the runner owns the directory around them.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fedsample import __version__
from fedsample._imports import warn_imports
from fedsample._io import checked_path, write_text_atomic
from fedsample._validation import invalid
from fedsample.errors import FedsampleError
from fedsample.experiments.build import Experiment, build_experiment, model_name
from fedsample.experiments.config import ExperimentConfig, config_to_dict, load_config, restate_error
from fedsample.experiments.config.reading import imported_references
from fedsample.experiments.config.sections import TRACKING, TrackingSection
from fedsample.experiments.config.toml_writer import config_to_toml
from fedsample.experiments.executors import Executor, LocalExecutor, discard_intermediate_files
from fedsample.experiments.progress import ProgressLine, ProgressReporter, format_seconds
from fedsample.experiments.results.bias import BIAS_FILE, measure_bias
from fedsample.experiments.results.metrics import metrics_table
from fedsample.experiments.results.metrics_files import write_metrics
from fedsample.experiments.results.report import write_report
from fedsample.experiments.results.summary import SummaryRow, summarize
from fedsample.experiments.results.tracking import Trackers, check_trackers, flat_parameters, open_trackers
from fedsample.experiments.rundir.directory import is_run_directory, open_run_directory
from fedsample.experiments.rundir.inputs import check_inputs, file_inputs, record_inputs, run_inputs
from fedsample.serialization import dump_json, json_value, load_json

if TYPE_CHECKING:
    from fedsample.data.federated import FederatedDataset
    from fedsample.engine.specs import RoundReport
    from fedsample.engine.user_model import ModelLike

__all__ = ["CONFIG_FILE", "RUNS_FILE", "RunOutcome", "check_experiment", "is_complete", "run_experiment"]

# The pickled checkpoints of fedsample before checkpoint format 2: refused, never unpickled.
LEGACY_CHECKPOINTS = ("checkpoint.pkl", "checkpoint-seed*.pkl")
CONFIG_FILE = "config.toml"
RUNS_FILE = "runs.json"


@dataclass(frozen=True, eq=False)
class RunOutcome:
    """A finished comparison: its directory, every run's result, the summary, and where it resumed."""

    run_dir: Path
    results: list[Any]
    summary: list[SummaryRow]
    resumed_from: int | None
    seconds: float


def run_experiment(
    config: ExperimentConfig | None,
    run_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressReporter | None = None,
    executor: Executor | None = None,
    data: FederatedDataset | None = None,
    model: ModelLike | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
    tracking: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """Run ``config`` into ``run_dir`` (or, with ``resume``, finish the run already there).

    ``config`` may be None only with ``resume`` (the directory's own config is used). A directory
    that already holds a run is refused unless ``resume`` (continue it; its config must equal
    ``config``) or ``overwrite`` (replace it). The runs execute with ``executor`` (default: here,
    :class:`~fedsample.experiments.executors.LocalExecutor`; a
    :class:`~fedsample.experiments.executors.RayExecutor` runs them as Ray tasks, same files);
    ``progress`` receives their progress (default: a :class:`ProgressLine` on stderr). ``data`` and
    ``model`` are those of a comparison set up in Python
    (:func:`~fedsample.experiments.comparison.run_comparison`), which ``config`` names as ``python:NAME``.

    A config that names a model factory or loss by reference imports it here, before anything is
    written; resuming imports what the run's own ``config.toml`` names, and says so first in a
    :class:`~fedsample._imports.CodeImportWarning`.

    Every round's metrics record (:class:`~fedsample.engine.specs.RoundReport`) goes to the trackers
    of the config's ``[tracking]`` (TensorBoard, MLflow: :mod:`fedsample.experiments.results.tracking`), whose keys
    ``tracking`` replaces (a resumed run may add or change trackers: they change no result), then to
    ``on_round``.
    """
    begin = time.perf_counter()
    directory = checked_path("run_dir", "run_experiment", run_dir)
    given: object = config  # checked as what it is, whatever the annotation says
    if not (given is None or isinstance(given, ExperimentConfig)):
        rule = "an ExperimentConfig (config_from_dict, load_config), or None to resume"
        raise invalid("config", "run_experiment", rule, given)
    if tracking is not None and not (isinstance(tracking, Mapping) and all(isinstance(k, str) for k in tracking)):
        raise invalid("tracking", "run_experiment", "None or a mapping of [tracking] keys (str) to values", tracking)
    line = progress if progress is not None else ProgressLine()
    config = _resolve_config(config, directory, resume=resume)
    if resume:
        _refuse_legacy_checkpoints(directory)
        check_inputs(directory, file_inputs(config))  # changed files are refused before any code is imported
        warn_imports(imported_references(config.model), str(directory / CONFIG_FILE))  # -q or not
    if resume and is_complete(directory):
        if is_run_directory(directory):  # killed after it was marked complete: the checkpoints and the lock go
            with open_run_directory(directory, resume=True):
                discard_intermediate_files(directory)
        line.message(f"{directory} holds a complete run; nothing to resume")
        return RunOutcome(directory, [], _saved_summary(directory, config), config.training.rounds, 0.0)
    # Everything is built and checked before the first byte is written: a rejected run leaves nothing.
    experiment = check_experiment(config, data=data, model=model)
    chosen = executor or LocalExecutor()
    chosen.check(experiment)
    inputs = run_inputs(config, experiment.data, experiment.model)  # the data's and the model's content
    if resume:
        check_inputs(directory, inputs)
    tracked = TRACKING.check({**config.tracking, **(tracking or {})})
    check_trackers(tracked, experiment=config.name)  # a user's MLflow store opens before a file is written
    config_text = config_to_toml(config)
    with open_run_directory(directory, overwrite=overwrite, resume=resume) as opened:
        if opened.stale_owner is not None:
            owner = opened.stale_owner.get("pid")
            line.message(f"{directory}: taking over the lock left by process {owner}, which is no longer running")
        trackers = _trackers(config, tracked, directory, resume=resume, on_round=on_round, say=line.message)
        if not resume:
            write_text_atomic(directory / CONFIG_FILE, config_text)
        record_inputs(directory, inputs, resume=resume)
        complete = False
        try:
            hooks = {"on_round": trackers} if trackers else {}  # an executor of a user's may not take it
            executed = chosen.execute(experiment, directory, resume=resume, progress=line, **hooks)
            complete = True
        finally:
            trackers.close(complete=complete)
            if not complete:
                line.close()  # ends a drawn line and its ticker (an executor closes it on success)
        _write_results(directory, experiment, executed.results, begin, executed.resumed_from)
        discard_intermediate_files(directory)
    summary = _saved_summary(directory, config)
    seconds = time.perf_counter() - begin
    line.message(f"{config.name}: done in {format_seconds(seconds)}; results in {directory}")
    return RunOutcome(directory, executed.results, summary, executed.resumed_from, seconds)


def _trackers(
    config: ExperimentConfig,
    tracking: dict[str, Any],
    directory: Path,
    *,
    resume: bool,
    on_round: Callable[[RoundReport], None] | None,
    say: Callable[[str], None],
) -> Trackers:
    """The run's trackers, with the config's keys as the parameters of every tracked run and each sampler's
    hyperparameters as its own."""
    resolved = config_to_dict(config)
    common = flat_parameters({k: v for k, v in resolved.items() if k not in ("samplers", "tracking")})
    own: dict[str, dict[str, Any]] = {
        entry.label: {"sampler": entry.name, **{f"sampler.{k}": v for k, v in sorted(entry.params.items())}}
        for entry in config.samplers
    }
    own["centralized"] = {"sampler": "centralized"}
    return open_trackers(
        tracking,
        directory,
        experiment=config.name,
        parameters=common,
        run_parameters=own,
        resume=resume,
        on_round=on_round,
        say=say,
        checkpoint_every=config.run.checkpoint_every,  # the trackers write what they hold before each checkpoint
    )


def _refuse_legacy_checkpoints(directory: Path) -> None:
    """Refuse to resume from a pickled checkpoint of an earlier fedsample: unpickling runs code."""
    found = sorted(path for pattern in LEGACY_CHECKPOINTS for path in directory.glob(pattern))
    if found:
        raise FedsampleError(
            f"The '--resume' parameter must name a run directory whose checkpoints fedsample can read safely. Got "
            f"{str(directory)!r}, which holds {str(found[0])!r}, a pickle of an earlier fedsample that is never read "
            "(unpickling can run code); delete it to restart the unfinished runs from round 0, instead.",
            parameter="--resume",
        )


def check_experiment(
    config: ExperimentConfig, *, data: FederatedDataset | None = None, model: ModelLike | None = None
) -> Experiment:
    """Build ``config``'s experiment and check what the run will need, writing nothing.

    Beyond :func:`~fedsample.experiments.build.build_experiment` (config, data, samplers, model,
    participation), the history of the runs trained together must fit in memory
    (:func:`fedsample.engine.loop.check_history_memory`).
    """
    from fedsample.engine.specs import check_history_memory

    experiment = build_experiment(config, data=data, model=model)
    largest = max(len(indices) for _, indices in _run_groups(experiment))
    try:
        check_history_memory(experiment.training, largest, "TrainingConfig")
    except FedsampleError as exc:
        raise restate_error(exc, "training", f"experiment {config.name!r}") from exc
    return experiment


def _run_groups(experiment: Experiment) -> list[tuple[int, list[int]]]:
    """The runs trained together, by seed with ``per_seed`` (no federation is built here)."""
    if not experiment.config.federation.per_seed:
        return [(0, list(range(len(experiment.runs))))]
    groups: dict[int, list[int]] = {}
    for index, run in enumerate(experiment.runs):
        groups.setdefault(run.seed, []).append(index)
    return list(groups.items())


def _resolve_config(config: ExperimentConfig | None, directory: Path, *, resume: bool) -> ExperimentConfig:
    """The config to run: ``config``, or with ``resume`` the directory's own (which ``config`` must equal)."""
    saved = directory / CONFIG_FILE
    if resume:
        if not saved.is_file():
            found = (
                "which does not exist"
                if not directory.exists()
                else "which is not a directory"
                if not directory.is_dir()
                else f"which holds no {CONFIG_FILE}"
            )
            raise FedsampleError(
                f"The '--resume' parameter must name a run directory holding {CONFIG_FILE}. Got "
                f"{str(directory)!r}, {found}, instead.",
                parameter="--resume",
            )
        saved_config = load_config(saved)
        untracked = TrackingSection()  # the trackers may change on resume: they change no result
        if config is not None and config_to_toml(dataclasses.replace(config, tracking=untracked)) != config_to_toml(
            dataclasses.replace(saved_config, tracking=untracked)
        ):
            raise FedsampleError(
                f"The '--resume' parameter must name a run of the same config. Got {str(directory)!r}, whose "
                f"{CONFIG_FILE} differs (resume without a config, or choose another --out) instead.",
                parameter="--resume",
            )
        return saved_config
    if config is None:
        raise FedsampleError("The 'config' parameter of run_experiment must be a config. Got None instead.")
    return config


def is_complete(directory: Path) -> bool:
    """Whether ``directory`` holds a complete run (its ``runs.json`` says so)."""
    try:
        return bool(load_json((directory / RUNS_FILE).read_text()).get("complete"))
    except (OSError, ValueError, AttributeError, RecursionError):  # a missing or damaged runs.json
        return False


def _saved_summary(directory: Path, config: ExperimentConfig) -> list[SummaryRow]:
    from fedsample.experiments.results.metrics_files import read_metrics

    return summarize(
        read_metrics(directory),
        target_accuracy=config.report.target_accuracy,
        target_loss=config.report.target_loss,
    )


def _file_name(label: str, seed: int, taken: set[str]) -> str:
    """The state file of a run: its label made safe for a file name, a suffix where two labels give the same."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"
    name, suffix = f"{base}-seed{seed}.json", 1
    while name in taken:  # labels "a b" and "a_b" would otherwise share (and overwrite) one file
        suffix += 1
        name = f"{base}-{suffix}-seed{seed}.json"
    taken.add(name)
    return name


def _measured_bias(experiment: Experiment) -> dict[str, Any]:
    """Each sampler entry's bias on the first seed's federation (:mod:`fedsample.experiments.results.bias`)."""
    samplers: dict[str, Any] = {}
    for spec in experiment.runs:
        samplers.setdefault(spec.label or spec.sampler.name, spec.sampler)
    federation = experiment.data.federation(importance=cast(Any, experiment.training.importance))
    return measure_bias(list(samplers.items()), federation, experiment.training.num_sampled)


def _write_results(
    directory: Path, experiment: Experiment, results: Sequence[Any], begin: float, resumed_from: int | None
) -> None:
    import torch

    from fedsample.samplers.persistence import sampler_to_dict

    states = directory / "states"  # created by its first write, once the manifest lists it
    runs: list[dict[str, Any]] = []
    federated = list(zip(experiment.runs, results, strict=False))
    taken: set[str] = set()
    for spec, result in federated:
        sampler = spec.sampler
        name = _file_name(result.history.label, spec.seed, taken)
        write_text_atomic(states / name, dump_json(sampler_to_dict(sampler, result.sampler_state)))
        report = getattr(sampler, "privacy", None)
        runs.append(
            {
                "label": result.history.label,
                "sampler": sampler.name,
                "seed": spec.seed,
                "params": json_value(sampler.get_params()),
                "privacy": report(result.sampler_state).to_dict() if report is not None else None,
                "state": f"states/{name}",
            }
        )
    for result in results[len(experiment.runs) :]:  # the centralized baseline
        info = result.history.info
        runs.append(
            {
                "label": result.history.label,
                "sampler": "centralized",
                "seed": result.history.seed,
                "params": {"samples_per_round": info.get("samples_per_round")},
                "privacy": None,
                "state": None,
            }
        )
    histories = [result.history for result in results]
    data = experiment.data
    info = {
        "fedsample": __version__,
        "torch": torch.__version__,
        "federation": {
            "name": getattr(data, "name", ""),
            "num_clients": int(data.num_clients),
            "train_samples": int(data.train_sizes().sum()),
        },
        "model": model_name(experiment.model),
        "backend": histories[0].info.get("backend"),
        "device": histories[0].info.get("device"),
        "seconds": time.perf_counter() - begin,
        "resumed_from_round": resumed_from,
    }
    # runs.json first (the report reads its privacy reports), marked complete only at the very end.
    payload: dict[str, Any] = {"complete": False, "runs": runs, "info": info}
    write_text_atomic(directory / RUNS_FILE, dump_json(payload, indent=1))
    write_metrics(metrics_table(histories), directory)
    if experiment.config.report.measure_bias:  # the report reads it
        write_text_atomic(directory / BIAS_FILE, dump_json(_measured_bias(experiment), indent=1))
    write_report(directory)
    payload["complete"] = True
    write_text_atomic(directory / RUNS_FILE, dump_json(payload, indent=1))
