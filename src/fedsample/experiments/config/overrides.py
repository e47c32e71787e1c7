"""Overrides of experiment configs: dotted keys replaced in a resolved config, which is validated again.

:func:`apply_overrides` takes ``{"training.rounds": 100, "samplers[1].eta": 0.01}``;
:func:`parse_override` reads the command line's ``--set training.rounds=100`` into such a pair.
Both are re-exported by :mod:`fedsample.experiments.config.reading`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedsample._keyvalue import DOTTED_KEY, parse_key_value
from fedsample._validation import reowned
from fedsample.data.builders import has_own_clients
from fedsample.errors import FedsampleError
from fedsample.experiments.config.experiment import ExperimentConfig, config_to_dict, is_read
from fedsample.experiments.config.reader import restate_error
from fedsample.experiments.config.reading import config_from_dict

__all__ = ["apply_overrides", "parse_override"]


def parse_override(text: str) -> tuple[str, object]:
    """``"training.rounds=100"`` into ``("training.rounds", 100)``.

    The value is read by :func:`fedsample._keyvalue.read_value`: a TOML value (``3``, ``0.1``, ``true``,
    ``"x"``, ``[0, 1]``), else a JSON value, else kept as a bare string (``md``, ``cuda:0``).

    >>> parse_override("seeds=[0, 1]"), parse_override("samplers=md,osmd")
    (('seeds', [0, 1]), ('samplers', 'md,osmd'))
    """
    return parse_key_value(text, flag="--set", form="KEY", key=DOTTED_KEY, example="training.rounds=100")


def apply_overrides(
    cfg: ExperimentConfig,
    overrides: Mapping[str, object],
    *,
    source: str = "config",
    origins: Mapping[str, str] | None = None,
) -> ExperimentConfig:
    """``cfg`` with dotted keys replaced, validated again (same errors as :func:`config_from_dict`).

    ``source`` names the config in errors; ``origins`` may name where each key's value came from
    (``{"training.lr": "--set"}``), and an error about that key, or about a key inside or above it, then
    names it instead: ``The 'training.lr' key of --set is not one of the keys of [training]: ...``.

    Keys name a value (``"training.rounds"``, ``"seeds"``, ``"server.lr"``, ``"samplers[1].eta"``);
    ``None`` removes it (back to its default). ``"samplers"`` takes a list of sampler names (or a
    comma-separated string, or tables) and replaces the samplers. Changing a component's ``name``
    (``algorithm.name``, ``server.name``, ``samplers[i].name``) resets its hyperparameters and label
    to the new one's defaults, and changing ``federation.dataset`` between a naturally federated and
    a centralised data set (a data file is naturally federated when it has the client column) resets
    ``federation.partition`` to the new data set's default, unless those are set in the same call.

    >>> cfg = config_from_dict({"name": "x", "samplers": [{"name": "md"}]})
    >>> new = apply_overrides(cfg, {"training.rounds": 3, "samplers": "md,uniform"})
    >>> new.training.rounds, [s.label for s in new.samplers]
    (3, ['md', 'uniform'])
    """
    if not overrides and is_read(cfg):  # nothing entered: the config stays as the reader made it
        return cfg
    data = config_to_dict(cfg)
    given = dict(origins or {})
    # Names first, so that a hyperparameter set in the same call survives the reset.
    for key in sorted(overrides, key=lambda k: not k.endswith(".name")):
        value = overrides[key]
        if DOTTED_KEY.fullmatch(key) is None:
            raise FedsampleError(
                f"The {key!r} override of {given.get(key, source)} is not a dotted key such as 'training.rounds'.",
                parameter=key,
            )
        if key == "samplers":
            value = _sampler_list(value)
        parent, last = _parent(data, key, given.get(key, source))
        if last == "name" and key != "name" and not key.startswith("federation."):
            parent.clear()
        if value is None:
            parent.pop(last, None)
        else:
            parent[last] = value
    federation = data.get("federation")
    if "federation.dataset" in overrides and "federation.partition" not in overrides and isinstance(federation, dict):
        _fit_partition(federation, source)
    try:
        return config_from_dict(data, source=source)
    except FedsampleError as exc:
        origin = _origin(exc.parameter, given)
        if origin is None:
            raise
        raise reowned(exc, origin) from None


def _origin(key: str | None, origins: Mapping[str, str]) -> str | None:
    """Where the value of the config key ``key`` came from: the origin of the override that set it, of
    one that set a key inside it, or of one that set the table holding it (``samplers`` holds ``samplers[0].name``)."""
    if key is None:
        return None
    for given, origin in origins.items():
        if key == given or any(key.startswith(given + c) or given.startswith(key + c) for c in ".["):
            return origin
    return None


def _fit_partition(federation: dict[str, Any], source: str) -> None:
    """After ``federation.dataset`` changed: a partition that does not suit the new data set (natural
    for data split into clients, not natural otherwise) goes, so that the reader fills in its default."""
    dataset, partition = federation.get("dataset"), federation.get("partition")
    column = federation.get("client_column", "client")
    if not isinstance(dataset, str) or not isinstance(column, str) or partition is None:
        return  # the reader reports a bad value
    try:
        natural = has_own_clients(dataset, client_column=column)
    except FedsampleError as exc:
        raise restate_error(exc, "federation", source) from exc
    if (partition == "natural") != natural:
        del federation["partition"]


def _sampler_list(value: object) -> object:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        return value  # validation reports it
    return [{"name": item.strip()} if isinstance(item, str) else item for item in items]


def _parent(data: dict[str, Any], key: str, source: str) -> tuple[dict[str, Any], str]:
    """The table holding the last segment of ``key`` (created when missing), and that segment."""
    *path, last = key.split(".")
    container: Any = data
    for depth, segment in enumerate(path):
        name, _, index = segment.partition("[")
        child = container.setdefault(name, {} if not index else [])
        if index:
            position = int(index.rstrip("]"))
            if not isinstance(child, list) or position >= len(child):
                count = len(child) if isinstance(child, list) else 0
                raise FedsampleError(
                    f"The {key!r} override of {source} names an entry {name}[{position}] that does not exist "
                    f"({count} entries).",
                    parameter=key,
                )
            child = child[position]
        container = child
        if not isinstance(container, dict):
            inside = ".".join(path[: depth + 1])
            raise FedsampleError(
                f"The {key!r} override of {source} goes inside {inside!r}, which is not a table.", parameter=key
            )
    if "[" in last:
        raise FedsampleError(f"The {key!r} override of {source} must end with a key name, not an index.", parameter=key)
    return container, last
