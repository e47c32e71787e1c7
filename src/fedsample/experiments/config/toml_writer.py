"""The TOML writer of experiment configs: the resolved config as a document ``tomllib`` reads back.

:func:`config_to_toml` writes :func:`~fedsample.experiments.config.reading.config_to_dict`'s tables in a fixed
order, every default filled in and ``None`` values left out (TOML has no null); loading the text
with :func:`~fedsample.experiments.config.reading.config_from_dict` gives the same config back, less the user and
password of an MLflow store's URI, which no file holds.
:func:`write_config` writes it to a file atomically. Both are re-exported by
:mod:`fedsample.experiments.config.reading`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from fedsample._io import write_text_atomic
from fedsample._redaction import without_credentials
from fedsample._validation import is_control
from fedsample.experiments.config.reading import TOML_INT_MAX, ExperimentConfig, config_to_dict

__all__ = ["config_to_toml", "write_config"]


def config_to_toml(cfg: ExperimentConfig) -> str:
    """The resolved config as a TOML document (``tomllib.loads`` and ``config_from_dict`` give ``cfg`` back, less
    the credentials of ``tracking.mlflow_uri``)."""
    lines = ["# fedsample experiment config, resolved: every default is filled in."]
    tables: list[str] = []
    for key, value in config_to_dict(cfg).items():
        if key == "tracking" and value.get("mlflow_uri"):  # a file never holds a store's password (docs/tracking.md)
            value = {**value, "mlflow_uri": without_credentials(value["mlflow_uri"])}
        if isinstance(value, Mapping):
            tables += ["", f"[{_toml_key(key)}]", *_toml_pairs(value)]
        elif isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            for item in value:
                tables += ["", f"[[{_toml_key(key)}]]", *_toml_pairs(item)]
        else:
            lines += _toml_pairs({key: value})
    return "\n".join(lines + tables) + "\n"


def write_config(cfg: ExperimentConfig, path: str | os.PathLike[str]) -> None:
    """Write the resolved config to ``path`` as TOML, atomically."""
    write_text_atomic(path, config_to_toml(cfg))


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_pairs(values: Mapping[str, Any]) -> list[str]:
    return [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in values.items() if value is not None]


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_string(text: str) -> str:
    escaped = (_TOML_ESCAPES.get(c) or (f"\\u{ord(c):04X}" if is_control(c) else c) for c in text)
    return '"' + "".join(escaped) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -(2**63) <= value <= TOML_INT_MAX:
            raise ValueError(f"TOML cannot hold the integer {value}")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # shortest round-tripping form: 0.1, 1.0, 1e-05, 1e+16 are all TOML floats
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):  # an inline table (a model factory's keyword arguments)
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} values to a config file")
