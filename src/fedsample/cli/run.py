"""``fedsample run [PRESET | CONFIG]``: run a comparison (samplers x seeds) into a run directory.

The experiment comes from a preset name (``fedsample presets``), a TOML config file, or, with
``--resume``, the run directory itself. The options below override the experiment's settings
(``--set KEY=VALUE`` reaches any key of the config). Without a target, the ``default`` preset runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO, cast

from fedsample._interrupts import BEFORE_IT_BEGAN, Interrupted
from fedsample._keyvalue import SAMPLER_KEY, parse_key_value
from fedsample._suggestions import close_names
from fedsample._validation import OptionsOrPath, invalid, one_of
from fedsample.cli._app import CommandError, add_command
from fedsample.cli._inputs import flag_options
from fedsample.experiments.config import ExperimentConfig
from fedsample.experiments.config.sections import parameter_of
from fedsample.experiments.progress import ProgressReporter
from fedsample.experiments.rundir.manifest import MANIFEST_FILE
from fedsample.samplers import sampler_names

# Flag aliases of config keys: flag -> (key, help). A flag's type and choices come from its key's
# declared constraint (fedsample.experiments.config.sections); every other key is reached with --set KEY=VALUE.
_ALIASES: dict[str, tuple[str, str]] = {
    "--dataset": (
        "federation.dataset",
        "a data file is relative to the working directory (docs/data.md); with --full: run a full form that "
        "reads MNIST on fashion-mnist or kmnist (fashion-mnist defaults to /usr/share/datasets/fashion-mnist, "
        "where the Debian package dataset-fashion-mnist installs it)",
    ),
    "--data-dir": ("federation.path", "directory of the dataset files (file-backed data sets)"),
    "--partition": ("federation.partition", ""),
    "--num-clients": ("federation.num_clients", ""),
    "--num-samples": ("federation.num_samples", "samples generated (mnist1d)"),
    "--alpha": ("federation.alpha", "Dirichlet concentration"),
    "--sizes": ("federation.sizes", "built-in client sizes"),
    "--test-fraction": ("federation.test_fraction", ""),
    "--sigma": ("federation.sigma", "heterogeneity of the osmd-linear data"),
    "--model": ("model.kind", ""),
    "--hidden": ("model.hidden", "hidden units of the MLP"),
    "--algorithm": ("algorithm.name", "local algorithm"),
    "--mu": ("algorithm.mu", "FedProx's proximal weight"),
    "--server": ("server.name", "server optimizer"),
    "--server-lr": ("server.lr", "server learning rate eta_g"),
    "--rounds": ("training.rounds", ""),
    "--num-sampled": ("training.num_sampled", "clients per round"),
    "--local-steps": ("training.local_steps", ""),
    "--batch-size": ("training.batch_size", ""),
    "--lr": ("training.local_lr", "local learning rate eta_l"),
    "--lr-decay": ("training.lr_decay", "per-round decay of eta_l"),
    "--importance": ("training.importance", ""),
    "--eval-every": ("training.eval_every", ""),
    "--backend": ("training.backend", ""),
    "--device": ("training.device", "cpu or cuda[:index]"),
    "--threads": ("training.threads", "PyTorch threads: auto (the CPUs this process may use) or a count"),
    "--checkpoint-every": ("run.checkpoint_every", ""),
}
_SHORT = {"--num-sampled": "-m"}
_METAVARS = {"--num-sampled": "M", "--local-steps": "N", "--batch-size": "B", "--checkpoint-every": "ROUNDS"}


def _alias_options(flag: str) -> dict[str, Any]:
    """argparse options of an alias: its key's type and choices, and its help naming the key."""
    key, note = _ALIASES[flag]
    options = flag_options(parameter_of(key).constraint)
    described = "; ".join(text for text in (options.pop("help", ""), note) if text)
    metavar = _METAVARS.get(flag, options.pop("metavar", None))
    return {**options, "help": f"{described} ({key})" if described else key, "metavar": metavar}


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "run")
    parser.add_argument("target", nargs="?", metavar="PRESET|CONFIG", help="preset name or config file")
    out = parser.add_argument_group("run directory")
    out.add_argument("-o", "--out", metavar="DIR", help="run directory (default: runs/NAME)")
    out.add_argument("--resume", action="store_true", help="continue the run in --out (or TARGET, a run directory)")
    out.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    out.add_argument("--full", action="store_true", help="the preset's full-scale variant (needs --data-dir)")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress and no summary on stderr")
    out.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the sampler x seed runs as Ray tasks (needs the 'ray' extra): alone, the attached or a new local "
        "instance; 'auto', HOST:PORT or ray://HOST:10001 for a cluster",
    )
    tracking = parser.add_argument_group("tracking (every round's metrics, also on --resume)")
    tracking.add_argument(
        "--tensorboard",
        action="store_true",
        help="TensorBoard event files in RUN_DIR/tensorboard (needs the 'tensorboard' extra) (tracking.tensorboard)",
    )
    tracking.add_argument(
        "--mlflow",
        action="store_true",
        help="MLflow runs, by default in the SQLite store RUN_DIR/mlflow.db (needs the 'mlflow' extra) "
        "(tracking.mlflow)",
    )
    tracking.add_argument(
        "--mlflow-uri",
        metavar="URI",
        help="the MLflow store (sqlite:///PATH, http://HOST:PORT); implies --mlflow (tracking.mlflow_uri). A "
        "password in it is never shown or saved: give it again with --resume, or use MLflow's variables",
    )
    over = parser.add_argument_group("overrides")
    over.add_argument("--set", action="append", metavar="KEY=VALUE", help="set a config key (training.rounds=20)")
    over.add_argument("--sampler", action="append", help=f"a sampler to compare (repeat); {', '.join(sampler_names())}")
    over.add_argument("--param", action="append", metavar="SAMPLER.NAME=VALUE", help="a sampler hyperparameter")
    over.add_argument("--seed", type=int, help="one seed (the run's randomness)")
    over.add_argument("--seeds", type=int, metavar="N", help="seeds 0..N-1")
    for flag in _ALIASES:
        over.add_argument(*[f for f in (_SHORT.get(flag), flag) if f], **_alias_options(flag))
    over.add_argument("--algorithm-param", action="append", metavar="NAME=VALUE", help="an algorithm hyperparameter")
    over.add_argument("--server-param", action="append", metavar="NAME=VALUE", help="a server hyperparameter")
    over.add_argument("--centralized", action="store_true", help="add the centralized baseline")
    return "run", run


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the experiment; a SIGINT or SIGTERM ends in one line saying what is saved and how to
    resume (:func:`_interrupted`)."""
    from fedsample.experiments.progress import ProgressLine

    line = _Watched(ProgressLine(stream=cast(TextIO, _Null()) if args.quiet else sys.stderr))
    target = args.target
    if args.ray and target is None and _names_experiment(args.ray):  # `run --ray PRESET`: no address given
        target, args.ray = args.ray, ""
    ray = _ray_options(args.ray)
    if args.resume and args.out is None and target is not None:  # `run --resume DIR`: the target is the directory
        args.out, target = target, None
    directory: Path | None = None
    written: tuple[int, int] | None = None
    try:
        from fedsample.experiments.suite import run_suite

        suite, directory, preset = _experiment(args, target)
        written = _manifest_identity(directory)
        with _ray_attached(ray):
            outcome = run_suite(
                suite,
                directory,
                resume=args.resume,
                overwrite=args.overwrite,
                progress=line,
                preset=preset,
                executor=_executor(ray),
                tracking=_tracking(args) or None,  # (a fresh run's config holds them too)
            )
    except KeyboardInterrupt as exc:
        line.close()
        # Said of the directory only when this command wrote into it (or resumes it): another run's is not ours.
        ours = directory is not None and (args.resume or _manifest_identity(directory) != written)
        raise _interrupted(exc, directory if ours else None, line, args.ray) from None
    _print_outcome(outcome, args.quiet)
    return 0


def _experiment(
    args: argparse.Namespace, target: str | None
) -> tuple[list[tuple[str, ExperimentConfig]] | None, Path, str | None]:
    """The comparisons to run (None to resume), their directory, and the preset named."""
    from fedsample.experiments.config import load_config
    from fedsample.experiments.presets.catalogue import DEFAULT_PRESET, PRESETS, preset_configs

    if args.resume:
        if args.out is None:
            raise CommandError(
                "The '--resume' parameter needs the run directory (--out DIR or TARGET). Got none instead.",
                parameter="--resume",
            )
        return None, Path(args.out), None
    name = target or DEFAULT_PRESET
    suite: list[tuple[str, ExperimentConfig]]
    if name in PRESETS:
        suite = preset_configs(
            name, full=args.full, data_dir=args.data_dir, dataset=args.dataset if args.full else None
        )
    elif Path(name).suffix == ".toml" or Path(name).is_file():
        if args.full:
            raise CommandError("The '--full' parameter applies to presets only. Got a config file.", parameter="--full")
        suite = [("", load_config(name))]
    else:
        raise invalid("PRESET|CONFIG", "", OptionsOrPath(tuple(PRESETS), (".toml",)), name)
    suite = [(suffix, _override(config, args, name)) for suffix, config in suite]
    directory = Path(args.out) if args.out else Path("runs") / (name if name in PRESETS else suite[0][1].name)
    return suite, directory, name


def _manifest_identity(directory: Path) -> tuple[int, int] | None:
    """The run directory's manifest as a file (inode, modification time), None without one: every run that
    opens the directory rewrites it, so a change says that this command wrote there."""
    try:
        info = os.stat(directory / MANIFEST_FILE)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns


def _interrupted(exc: KeyboardInterrupt, directory: Path | None, line: _Watched, ray: str | None) -> Interrupted:
    """The interruption, with the one line that says where the run stopped, what is saved and how to resume:
    ``after 37 of 200 rounds; the checkpoint after round 30 of 200 is saved: resume with `fedsample run
    --resume runs/x```."""
    from fedsample.experiments.rundir.resumable import saved_work

    interrupted = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
    if directory is None:
        interrupted.detail = BEFORE_IT_BEGAN
        return interrupted
    where = f"after {line.done} of {line.total} rounds" if line.total else "before the first round"
    saved = saved_work(directory)
    if not saved.resumable:
        interrupted.detail = f"{where}; {saved.text} in {directory}: run the command again"
        return interrupted
    command = ["fedsample", "run", "--resume", str(directory)] + (
        ["--ray", *([ray] if ray else [])] if ray is not None else []
    )
    interrupted.detail = f"{where}; {saved.text}: resume with `{shlex.join(command)}`"
    return interrupted


class _Watched:
    """A progress reporter passed through to ``inner``, remembering the rounds done (for the interrupt line)."""

    def __init__(self, inner: ProgressReporter) -> None:
        self.inner = inner
        self.done = self.total = 0

    def begin(self, phase: str, labels: tuple[str, ...] | list[str]) -> None:
        self.inner.begin(phase, labels)

    def update(self, done: int, total: int, losses: Any = None) -> None:
        self.done, self.total = done, total
        self.inner.update(done, total, losses)

    def message(self, text: str) -> None:
        self.inner.message(text)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # what else the reporter offers
        return getattr(self.inner, name)


def _names_experiment(value: str) -> bool:
    """Whether ``--ray``'s value is the experiment (a preset or a config file) rather than an address."""
    from fedsample.experiments.presets.catalogue import PRESETS

    return value in PRESETS or Path(value).suffix == ".toml" or Path(value).is_dir()


def _ray_options(value: str | None) -> Any:
    """``--ray``'s options (None without the flag); Ray itself is imported only when the runs start."""
    if value is None:
        return None
    from fedsample.experiments.distributed import RayOptions

    return RayOptions(address=value or None)


def _executor(ray: Any) -> Any:
    """Where the runs execute: here (None) or, with ``--ray``, as Ray tasks."""
    if ray is None:
        return None
    from fedsample.experiments.executors import RayExecutor

    return RayExecutor(ray)


@contextmanager
def _ray_attached(ray: Any) -> Iterator[None]:
    """Ray attached (and shut down after, if this command started it) when ``--ray`` is given."""
    if ray is None:
        yield
        return
    from fedsample.experiments.distributed import ray_session

    with ray_session(ray.address):
        yield


def _print_outcome(outcome: Any, quiet: bool) -> None:
    if quiet:
        return
    sys.stderr.write(outcome.summary_text() + "\n")


def _key_values(items: list[str] | None, parameter: str) -> dict[str, Any]:
    """``["beta=0.9", "nesterov=true"]`` into ``{"beta": 0.9, "nesterov": True}``."""
    return dict(parse_key_value(item, flag=parameter) for item in items or [])


def _override(config: ExperimentConfig, args: argparse.Namespace, source: str) -> ExperimentConfig:
    """The experiment with the command line's overrides (:func:`~fedsample.experiments.apply_overrides`);
    an error about a key a flag set names that flag."""
    from fedsample.experiments.config.overrides import apply_overrides, parse_override

    overrides: dict[str, object] = {}
    origins: dict[str, str] = {}

    def given(key: str, value: object, flag: str) -> None:
        overrides[key], origins[key] = value, flag

    for flag, (key, _) in _ALIASES.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            given(key, _from_working_directory(key, value), flag)
    for name, value in _key_values(args.algorithm_param, "--algorithm-param").items():
        given(f"algorithm.{name}", value, "--algorithm-param")
    for name, value in _key_values(args.server_param, "--server-param").items():
        given(f"server.{name}", value, "--server-param")
    if args.sampler:
        given("samplers", list(args.sampler), "--sampler")
    if args.seed is not None:
        given("seeds", [args.seed], "--seed")
    if args.seeds is not None:
        given("seeds", args.seeds, "--seeds")
    if args.centralized:
        given("baselines.centralized", True, "--centralized")
    for key, value in _tracking(args).items():
        implied = key == "mlflow_uri" or (key == "mlflow" and not args.mlflow)
        given(f"tracking.{key}", value, "--mlflow-uri" if implied else f"--{key}")
    config = apply_overrides(config, overrides, source=source, origins=origins)
    # Second pass: --param names samplers of the (possibly replaced) list; --set comes last.
    overrides, origins = {}, {}
    for item in args.param or []:
        key, value = parse_key_value(item, flag="--param", form="SAMPLER.NAME", key=SAMPLER_KEY)
        who, _, field = key.rpartition(".")
        chosen = [i for i, entry in enumerate(config.samplers) if who in (entry.label, entry.name)]
        if not chosen:
            used = list(dict.fromkeys(name for entry in config.samplers for name in (entry.label, entry.name)))
            rule = f"SAMPLER.NAME naming a sampler being used, {one_of(used)}"
            raise invalid("--param", "", rule, who, suggestions=close_names(who, used))
        for index in chosen:
            given(f"samplers[{index}].{field}", value, "--param")
    for item in args.set or []:
        key, value = parse_override(item)
        given(key, _from_working_directory(key, value), "--set")
    return apply_overrides(config, overrides, source=source, origins=origins) if overrides else config


def _tracking(args: argparse.Namespace) -> dict[str, object]:
    """The ``[tracking]`` keys the tracking flags set (a fresh run records them in its config; a resumed run
    adds them to its own)."""
    chosen: dict[str, object] = {}
    if args.tensorboard:
        chosen["tensorboard"] = True
    if args.mlflow or args.mlflow_uri is not None:
        chosen["mlflow"] = True
    if args.mlflow_uri is not None:
        from fedsample.experiments.results.tracking import absolute_store_uri

        chosen["mlflow_uri"] = absolute_store_uri(args.mlflow_uri, os.getcwd())  # relative to the working directory
    return chosen


def _from_working_directory(key: str, value: object) -> object:
    """A data file named on the command line (``--dataset``, ``federation.test_path``) is relative to
    the working directory: the config, and the ``config.toml`` of the run, record it absolute."""
    from fedsample.data.builders import is_data_file

    if key in ("federation.dataset", "federation.test_path") and is_data_file(value):
        return str(Path(cast(str, value)).expanduser().resolve())
    return value


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False
