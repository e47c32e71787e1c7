"""Experiment configs: one TOML file describes a comparison, checked once where it is read.

:mod:`~fedsample.experiments.config.experiment` describes a config (:class:`ExperimentConfig`, its tables
and their defaults) and writes it back as plain data; :mod:`~fedsample.experiments.config.reading` reads it
(:func:`load_config`, :func:`config_from_dict`); :mod:`~fedsample.experiments.config.reader` reads one table
against its declared parameters (:mod:`~fedsample.experiments.config.sections`);
:mod:`~fedsample.experiments.config.samplers` reads the ``[[samplers]]`` entries;
:mod:`~fedsample.experiments.config.overrides` applies ``--set KEY=VALUE``; and
:mod:`~fedsample.experiments.config.toml_writer` writes the resolved config as TOML.
"""

from fedsample.data.builders import NATURAL_DATASETS
from fedsample.experiments.config.experiment import CONFIG_KEYS, ComponentEntry, ExperimentConfig, config_to_dict
from fedsample.experiments.config.reader import TOML_INT_MAX, restate_error
from fedsample.experiments.config.reading import config_from_dict, load_config
from fedsample.experiments.config.samplers import SamplerEntry
from fedsample.experiments.config.sections import (
    ModelSection,
    ParticipationSection,
    ReportSection,
    RunSection,
    SystemSection,
    TrainingSection,
)

__all__ = [
    "CONFIG_KEYS",
    "NATURAL_DATASETS",
    "TOML_INT_MAX",
    "ComponentEntry",
    "ExperimentConfig",
    "ModelSection",
    "ParticipationSection",
    "ReportSection",
    "RunSection",
    "SamplerEntry",
    "SystemSection",
    "TrainingSection",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "restate_error",
]
