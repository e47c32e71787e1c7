"""Suites: the comparisons of one preset (one per swept value), each in a subdirectory, with an index.

A single comparison runs straight into its directory. A suite of several writes ``DIR/SUFFIX/``
per comparison (each a complete run directory), ``DIR/suite.json`` (the preset, the parts and each
part's resolved config), and ``DIR/report.md``, an index holding each part's summary table and a link
to its report. ``--resume DIR`` finishes whatever part is not complete, and runs a part the suite was
killed before it began from the config that ``suite.json`` saved. A preset of another kind than comparisons
(``impact-quadratic``: paper 003's closed form against its simulation,
:mod:`fedsample.experiments.quadratic.run`) runs here too, into a run directory opened, locked and
overwritten like any other.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsample._imports import warn_imports
from fedsample._io import write_text_atomic
from fedsample.errors import FedsampleError
from fedsample.experiments.config import ExperimentConfig, config_from_dict, load_config
from fedsample.experiments.config.reading import imported_references
from fedsample.experiments.config.sections import TrackingSection
from fedsample.experiments.config.toml_writer import config_to_toml
from fedsample.experiments.executors import Executor, LocalExecutor
from fedsample.experiments.progress import ProgressLine, ProgressReporter
from fedsample.experiments.results.report import read_bias
from fedsample.experiments.results.tables import summary_console
from fedsample.experiments.rundir.directory import check_new_run_directory, open_run_directory
from fedsample.experiments.rundir.inputs import INPUTS_FILE, check_inputs, run_inputs
from fedsample.experiments.runner import CONFIG_FILE, RunOutcome, check_experiment, is_complete, run_experiment
from fedsample.serialization import dump_json, load_json

if TYPE_CHECKING:
    from fedsample.engine.specs import RoundReport

__all__ = ["SUITE_FILE", "SuiteOutcome", "run_suite"]

SUITE_FILE = "suite.json"


@dataclass(frozen=True, eq=False)
class SuiteOutcome:
    """The finished parts of a suite (one for a single comparison) and the suite's directory."""

    directory: Path
    parts: list[tuple[str, RunOutcome]]

    def summary_text(self) -> str:
        """A plain-text digest: per part, per label, the final train loss and test accuracy and the bias,
        with the report's column names and number format (:func:`.report_tables.summary_console`)."""
        lines: list[str] = []
        for suffix, outcome in self.parts:
            lines.append(f"\n{suffix or outcome.run_dir.name} ({outcome.run_dir}):")
            if outcome.summary:
                lines.append(summary_console(outcome.summary, bias=read_bias(outcome.run_dir)))
        report = self.directory / "report.md"
        lines.append(f"\nreport: {report}")
        return "\n".join(lines)


def run_suite(
    suite: list[tuple[str, ExperimentConfig]] | None,
    directory: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressReporter | None = None,
    preset: str | None = None,
    executor: Executor | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
    tracking: Mapping[str, Any] | None = None,
) -> SuiteOutcome:
    """Run (or, with ``resume``, finish) the comparisons of ``suite`` into ``directory``, each with
    ``executor``, ``on_round`` and ``tracking`` (:func:`~fedsample.experiments.runner.run_experiment`)."""
    line = progress if progress is not None else ProgressLine()
    hooks = _Hooks(executor, on_round, tracking)
    index = directory / SUITE_FILE
    if resume:
        if index.is_file():
            saved = load_json(index.read_text())
            parts, configs = saved["parts"], saved.get("configs")
            configs = configs if isinstance(configs, dict) else {}
            for suffix in parts:  # a part begun on other inputs is refused before the suite writes anything
                _check_inputs_of_begun_part(directory / suffix, line)
            with open_run_directory(directory, resume=True):
                outcomes = [
                    (suffix, _finish_part(directory, suffix, configs.get(suffix), progress=line, hooks=hooks))
                    for suffix in parts
                ]
                _write_index(directory, outcomes, load_json(index.read_text()).get("preset"))
            return SuiteOutcome(directory, outcomes)
        return SuiteOutcome(
            directory, [("", run_experiment(None, directory, resume=True, progress=line, **hooks.options()))]
        )
    if preset is not None and _kind(preset) == "quadratic":
        tracked = any(config.tracking != TrackingSection() for _, config in suite or [])
        if on_round is not None or tracking or tracked:
            raise FedsampleError(
                f"The tracking options apply to comparisons trained round by round. Got them with the preset "
                f"{preset!r}, a closed form computed locally, instead (its rounds are in its files).",
                parameter="tracking",
            )
        return _run_quadratic(preset, directory, overwrite=overwrite, progress=line, executor=executor)
    if suite is None:
        raise FedsampleError("The 'suite' parameter of run_suite must list comparisons. Got None instead.")
    if len(suite) == 1 and suite[0][0] == "":
        outcome = run_experiment(suite[0][1], directory, overwrite=overwrite, progress=line, **hooks.options())
        return SuiteOutcome(directory, [("", outcome)])
    for _, config in suite:  # every part is checked before the first byte of the suite is written
        check_experiment(config)
    check_new_run_directory(directory, overwrite=overwrite)
    outcomes = []
    with open_run_directory(directory, overwrite=overwrite):
        configs = {suffix: config_to_toml(config) for suffix, config in suite}  # for --resume, if killed before a part
        write_text_atomic(index, dump_json({"preset": preset, "parts": list(configs), "configs": configs}, indent=1))
        for suffix, config in suite:
            outcomes.append((suffix, run_experiment(config, directory / suffix, progress=line, **hooks.options())))
        _write_index(directory, outcomes, preset)
    return SuiteOutcome(directory, outcomes)


@dataclass(frozen=True)
class _Hooks:
    """What the suite passes to each part's run_experiment, besides the progress line."""

    executor: Executor | None
    on_round: Callable[[RoundReport], None] | None
    tracking: Mapping[str, Any] | None

    def options(self) -> dict[str, Any]:
        return {"executor": self.executor, "on_round": self.on_round, "tracking": self.tracking}


def _finish_part(
    directory: Path, suffix: str, saved: object, *, progress: ProgressReporter, hooks: _Hooks
) -> RunOutcome:
    """Resume the part ``suffix``; one the suite was killed before (no config.toml yet) runs from ``saved``."""
    part = directory / suffix
    if (part / CONFIG_FILE).is_file() or not isinstance(saved, str):  # begun, or a suite.json without configs
        return run_experiment(None, part, resume=True, progress=progress, **hooks.options())
    source = f"{str(directory / SUITE_FILE)!r} (part {suffix!r})"
    try:
        config = config_from_dict(tomllib.loads(saved), source=source)
    except (ValueError, RecursionError) as exc:  # tomllib's errors are ValueErrors
        raise FedsampleError(f"The suite file {source} must hold the part's config as TOML: {exc}.") from exc
    warn_imports(imported_references(config.model), source)
    return run_experiment(config, part, overwrite=True, progress=progress, **hooks.options())


def _check_inputs_of_begun_part(part: Path, progress: ProgressReporter) -> None:
    """Refuse to resume a part begun, not complete, whose data or model changed since (:mod:`.inputs`)."""
    if is_complete(part) or not (part / INPUTS_FILE).is_file() or not (part / CONFIG_FILE).is_file():
        return
    config = load_config(part / CONFIG_FILE)
    imported = imported_references(config.model)
    if imported:  # said before it is imported, as run_experiment says it
        progress.message(f"{part}: importing {' and '.join(imported)}, named by its {CONFIG_FILE}")
    experiment = check_experiment(config)
    check_inputs(part, run_inputs(config, experiment.data, experiment.model))


def _kind(preset: str) -> str:
    from fedsample.experiments.presets.catalogue import PRESETS

    return PRESETS[preset].kind if preset in PRESETS else "comparison"


def _run_quadratic(
    name: str, directory: Path, *, overwrite: bool, progress: ProgressReporter, executor: Executor | None
) -> SuiteOutcome:
    """The closed-form preset ``name`` into ``directory``: computed here, whatever the executor."""
    from fedsample.experiments.quadratic.run import run_quadratic_experiment

    if executor is not None and not isinstance(executor, LocalExecutor):
        raise FedsampleError(
            f"The '--ray' parameter applies to comparisons of samplers x seeds. Got the preset {name!r}, "
            "a closed form computed locally, instead.",
            parameter="--ray",
        )
    with open_run_directory(directory, overwrite=overwrite, resumable=False):
        progress.message(f"{name}: closed form and simulated rounds into {directory}")
        run_quadratic_experiment(directory)
    progress.message(f"{name}: done")
    return SuiteOutcome(directory, [])


def _write_index(directory: Path, outcomes: list[tuple[str, RunOutcome]], preset: str | None) -> None:
    lines = [f"# {preset or directory.name}", ""]
    first = outcomes[0][1].run_dir / CONFIG_FILE
    if first.is_file():
        description = load_config(first).description
        if description:
            lines += [description, ""]
    for suffix, outcome in outcomes:
        lines.append(f"## {suffix}")
        lines.append("")
        summary = outcome.run_dir / "summary.md"
        if summary.is_file():
            lines.append(summary.read_text().strip())
            lines.append("")
        lines.append(f"Full report: [{suffix}/report.md]({suffix}/report.md)")
        lines.append("")
    write_text_atomic(directory / "report.md", "\n".join(lines))
