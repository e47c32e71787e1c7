"""Named presets: the papers' experiments (and fedsample's own) as suites of configs.

:mod:`~fedsample.experiments.presets.catalogue` names them (``fedsample presets`` lists it); the other
modules build each preset's configs.
"""

from fedsample.experiments.presets.catalogue import DEFAULT_PRESET, PRESETS, Preset, preset_configs

__all__ = ["DEFAULT_PRESET", "PRESETS", "Preset", "preset_configs"]
