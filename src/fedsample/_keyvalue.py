"""The one reader of ``KEY=VALUE`` items, as the command line's ``--set``, ``--param``,
``--algorithm-param`` and ``--server-param`` take them.

:func:`parse_key_value` splits an item at its first ``=``, checks the key against the flag's form and
reads the value with :func:`read_value`; a malformed item raises one error naming the flag, the form
and the item.
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib

from fedsample.errors import FedsampleError

__all__ = ["DOTTED_KEY", "SAMPLER_KEY", "parse_key_value", "read_value"]

_SEGMENT = r"[A-Za-z0-9_-]+(?:\[[0-9]+\])?"
DOTTED_KEY = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
"""A config key: dotted names, each optionally indexed (``training.rounds``, ``samplers[1].eta``)."""
SAMPLER_KEY = re.compile(r".+\.[^.]+")
"""``SAMPLER.NAME``: a sampler (name or label) and, after its last dot, one of its hyperparameters."""
_NAME = re.compile(r"[^.]+")


def parse_key_value(
    text: str, *, flag: str, form: str = "NAME", key: re.Pattern[str] = _NAME, example: str = ""
) -> tuple[str, object]:
    """``"rounds=3"`` into ``("rounds", 3)``; blanks around the key and the value are dropped.

    ``key`` is the pattern the whole key must match (a name without dots unless told otherwise) and
    ``form`` how the error spells it, with an optional ``example`` of a well-formed item.

    >>> parse_key_value("training.rounds=100", flag="--set", form="KEY", key=DOTTED_KEY)
    ('training.rounds', 100)
    >>> parse_key_value("poisson.capped=true", flag="--param", form="SAMPLER.NAME", key=SAMPLER_KEY)
    ('poisson.capped', True)
    """
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or key.fullmatch(name) is None:
        hint = f" ({example})" if example else ""
        raise FedsampleError(
            f"The {flag!r} parameter must look like {form}=VALUE{hint}. Got {text!r} instead.", parameter=flag
        )
    return name, read_value(raw.strip())


def read_value(raw: str) -> object:
    """A command-line value: a TOML value (``3``, ``0.1``, ``inf``, ``true``, ``"x"``, ``[0, 1]``), else a
    JSON value (``null``, ``{"a": 1}``), else the text itself (``md``, ``cuda:0``, ``2024-01-01``).

    >>> read_value("[0, 1]"), read_value("null"), read_value("md,osmd")
    ([0, 1], None, 'md,osmd')
    """
    # ValueError covers TOMLDecodeError, JSONDecodeError and an int of more than 4300 digits (Python's
    # int-to-text limit); RecursionError, arrays or objects nested thousands deep. Such text stays text.
    try:
        parsed = tomllib.loads(f"value = {raw}")
    except (ValueError, RecursionError):
        pass
    else:
        value = parsed.get("value")
        if set(parsed) == {"value"} and not isinstance(value, (datetime.date, datetime.time)):
            return value
        return raw  # a date, or text that TOML reads as more than one value
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw
