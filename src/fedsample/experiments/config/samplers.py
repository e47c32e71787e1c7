"""The ``[[samplers]]`` array of an experiment config: each compared sampler's entry.

An entry names a sampler of the registry, an optional ``label`` and the sampler's hyperparameters,
checked by building the sampler and stored resolved (every hyperparameter's own default filled in).
A label defaults to the sampler's name, made unique by suffixes (two unlabelled ``md`` entries are
``md`` and ``md-2``, skipping labels given explicitly); labels are single-line, at most 100 characters and unique, and
``centralized`` is reserved when the pooled baseline is on. :mod:`fedsample.experiments.config.reading`
reads the rest of the file and re-exports :class:`SamplerEntry`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedsample._validation import Options, Text
from fedsample.errors import FedsampleError
from fedsample.experiments.config.reader import (
    ConfigTable,
    coerce_float,
    holds_in_toml,
    key_error,
    plain,
    restate_error,
)
from fedsample.samplers import make_sampler, sampler_class, sampler_names

__all__ = ["CENTRALIZED_LABEL", "SamplerEntry", "read_samplers"]

CENTRALIZED_LABEL = "centralized"
# A label names its runs' state files (states/LABEL-seedS.json): beyond a few hundred bytes the
# file system refuses the name, after the run has trained.
_LABEL = Text("a non-empty single-line string of at most 100 characters", pattern=r".{1,100}", single_line=True)


@dataclass(frozen=True, kw_only=True)
class SamplerEntry:
    """One compared sampler: its registry name, its label in tables and plots, its hyperparameters."""

    name: str
    label: str
    params: dict[str, Any] = field(default_factory=dict)


def read_samplers(data: object, source: str, centralized: bool) -> tuple[SamplerEntry, ...]:
    """The entries of the ``[[samplers]]`` array ``data``, labelled (``centralized``: the baseline is on)."""
    if not isinstance(data, list) or not data:
        raise key_error("samplers", source, "a non-empty array of tables ([[samplers]])", data)
    names = sampler_names()
    entries: list[tuple[str, str | None, dict[str, Any]]] = []
    taken: dict[str, int] = {}
    for i, item in enumerate(data):
        table = ConfigTable(item, f"samplers[{i}]", source)
        name = table.get("name", Options(tuple(names)))
        label = table.get("label", _LABEL, None)
        if label is not None:
            if label in taken:
                constraint = f"a label no other sampler has (samplers[{taken[label]}] has it)"
                raise key_error(table.key("label"), source, constraint, label)
            if centralized and label == CENTRALIZED_LABEL:
                constraint = "a label other than 'centralized' (the baseline's) when baselines.centralized is on"
                raise key_error(table.key("label"), source, constraint, label)
            taken[label] = i
        entries.append((name, label, _sampler_params(table, name)))
    used = set(taken) | ({CENTRALIZED_LABEL} if centralized else set())
    resolved = []
    for name, label, params in entries:
        if label is None:
            label, suffix = name, 1
            while label in used:
                suffix += 1
                label = f"{name}-{suffix}"
            used.add(label)
        resolved.append(SamplerEntry(name=name, label=label, params=params))
    return tuple(resolved)


def _sampler_params(table: ConfigTable, name: str) -> dict[str, Any]:
    """The resolved hyperparameters of the sampler ``name`` (checked by building it)."""
    cls = sampler_class(name)
    fields = [f for f in dataclasses.fields(cls) if f.name != "name"]
    for key, hint in cls._renamed_parameters.items():  # a renamed key gets its hint, not the list of known keys
        if key in table.data:
            raise FedsampleError(
                f"The {table.key(key)!r} key of {table.source} no longer exists: {hint}. "
                f"Got {table.data[key]!r} instead.",
                parameter=table.key(key),
                owner=table.source,
            )
    table.reject_unknown([f.name for f in fields])
    try:
        sampler = make_sampler(name, **table.rest())
    except (ValueError, TypeError) as exc:
        raise restate_error(exc, table.path, table.source) from exc
    resolved = {f.name: coerce_float(f.type, plain(getattr(sampler, f.name))) for f in fields}
    for key, value in resolved.items():  # the resolved config is written back as TOML, whose integers are int64
        if not holds_in_toml(value):
            constraint = f"a value that TOML can hold (integers within int64) for {name}'s {key!r}"
            raise key_error(table.key(key), table.source, constraint, value)
    return {key: value for key, value in resolved.items() if value is not None}
