"""Experiment configs: reading and checking a TOML document, its sections, its samplers, overrides and writing.

:mod:`~fedsample.experiments.config.reading` holds the schema (:class:`ExperimentConfig`) and the reading
(:func:`load_config`, :func:`config_from_dict`); :mod:`~fedsample.experiments.config.reader` reads one table
against its declared parameters (:mod:`~fedsample.experiments.config.sections`),
:mod:`~fedsample.experiments.config.samplers` the ``[[samplers]]`` entries,
:mod:`~fedsample.experiments.config.overrides` applies ``--set KEY=VALUE`` and
:mod:`~fedsample.experiments.config.toml_writer` writes the resolved config back.
"""

from fedsample.experiments.config.reading import (
    CONFIG_KEYS,
    ComponentEntry,
    ExperimentConfig,
    config_from_dict,
    config_to_dict,
    load_config,
)

__all__ = ["CONFIG_KEYS", "ComponentEntry", "ExperimentConfig", "config_from_dict", "config_to_dict", "load_config"]
