"""Experiments: validated configs, named presets, the comparison runner, results, plots and reports.

The names below need neither PyTorch nor matplotlib. The modules that train import PyTorch and are
imported on their own:

* :mod:`~fedsample.experiments.runner`: ``run_experiment(config, run_dir, resume=..., overwrite=...)``,
  one config's runs (every sampler, every seed) with checkpoints, metrics, plots and a report;
* :mod:`~fedsample.experiments.comparison`: ``run_comparison(data, model, samplers, out, ...)``, the same
  run directory for your own data and model, set up in Python (also ``fedsample.experiments.run_comparison``;
  its settings are the fields of ``ComparisonSpec``);
* :mod:`~fedsample.experiments.executors`: where those runs execute, here (``LocalExecutor``) or
  as Ray tasks (``RayExecutor``, :mod:`~fedsample.experiments.distributed`);
* :mod:`~fedsample.experiments.suite`: ``run_suite``, the configs of a preset and their index report
  (or a preset of another kind, such as the quadratic experiment);
* :mod:`~fedsample.experiments.quadratic.run`: paper 003's closed-form quadratic experiment;
* :mod:`~fedsample.experiments.results.report` and :mod:`~fedsample.experiments.results.plots`: reports and
  figures rebuilt from a finished run directory.

The rooms: :mod:`~fedsample.experiments.config` (reading a config, its sections, samplers, overrides, TOML),
:mod:`~fedsample.experiments.presets`, :mod:`~fedsample.experiments.rundir` (the run directory: manifest,
lock, inputs, what can resume) and :mod:`~fedsample.experiments.results` (metrics, summary and tables,
report, plots, bias, tracking); the runner, its executors, their tasks and the suites stay at the top.
"""

from typing import Any

from fedsample._imports import lazy_attribute
from fedsample.experiments.config import ExperimentConfig, config_from_dict, config_to_dict, load_config
from fedsample.experiments.config.overrides import apply_overrides, parse_override
from fedsample.experiments.config.toml_writer import config_to_toml, write_config
from fedsample.experiments.presets.catalogue import PRESETS, Preset, preset_configs

__all__ = [
    "PRESETS",
    "ExperimentConfig",
    "Preset",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "config_to_toml",
    "load_config",
    "parse_override",
    "preset_configs",
    "run_comparison",
    "run_experiment",
    "write_config",
]

# These train, so they import PyTorch: imported on first use (fedsample.experiments stays light).
_LAZY = {"run_comparison": "fedsample.experiments.comparison", "run_experiment": "fedsample.experiments.runner"}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)
