"""Every config key at its bounds through ``fedsample run --set KEY=VALUE`` (issue 32 item 10, part 3).

Generated from the config's declared tables (:data:`fedsample.experiments.config.sections.SECTIONS`, and the
engine's registry for ``algorithm.*`` and ``server.*``): each key gets the probes of its constraint
(:func:`hostile_values.probes`), written as the command line writes them. A value the table refuses
must end the command with status 2, one line on stderr, nothing on stdout and nothing written; a value
it takes reaches the resolved config, and the run's checks before training
(:func:`~fedsample.experiments.runner.check_experiment`, which builds the federation, the samplers and
the model and writes nothing) either pass or refuse it the same way. No run trains: the command's
``run_suite`` is replaced by those checks. The default suite checks a taken value's experiment for the
probes at the ends of each range; the slow sweep for all.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile_samplers import SlowCase, time_limit
from hostile_values import Probe, probes

from cli_helpers import digits_config, run_cli, snapshot
from fedsample._keyvalue import read_value
from fedsample.engine.registry import ALGORITHMS, SERVER_OPTIMIZERS
from fedsample.experiments import suite as suite_module
from fedsample.experiments.config.reading import config_to_dict
from fedsample.experiments.config.sections import SECTIONS
from fedsample.experiments.runner import check_experiment

CONFIG = digits_config(seeds=1, rounds=2)
CASE_SECONDS = 30.0


@cache
def _keys() -> list[tuple[str, tuple[str, ...], Any]]:
    """(key, the --set items that come before it, its constraint) for every declared key."""
    keys: list[tuple[str, tuple[str, ...], Any]] = []
    for section, table in SECTIONS.items():
        keys += [(f"{section}.{name}", (), p.constraint) for name, p in table.parameters.items()]
    for kind, registry in (("algorithm", ALGORITHMS), ("server", SERVER_OPTIMIZERS)):
        for component, table in registry.items():
            before = (f"{kind}.name={component}",)
            keys += [(f"{kind}.{name}", before, p.constraint) for name, p in table.parameters.items()]
    return keys


def render(value: Any) -> str | None:
    """``value`` as ``--set`` text that reads back as it (None: the command line cannot say it)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = (
            "nan"
            if math.isnan(value)
            else "inf"
            if value == math.inf
            else "-inf"
            if value == -math.inf
            else repr(value)
        )
    elif value is None or isinstance(value, (int, str, list, dict)):
        text = json.dumps(value)
    else:  # a tuple: the command line has lists only
        return None
    parsed = read_value(text)
    same = parsed == value or (isinstance(parsed, float) and isinstance(value, float) and math.isnan(parsed))
    return text if same and type(parsed) is type(value) else None


# The default suite reads, per key, REFUSED_PER_KEY of the probes its table refuses and TAKEN_PER_KEY of
# those it takes (whose experiment is checked), each key starting at another place in its list so that
# every kind of probe is read somewhere; the slow sweep reads them all.
REFUSED_PER_KEY, TAKEN_PER_KEY = 2, 1

CASES: list[tuple[str, tuple[str, ...], Probe, str]] = []
for _key, _before, _constraint in _keys():
    for _probe in probes(_constraint):
        _text = render(_probe.value)
        if _text is not None:
            CASES.append((_key, _before, _probe, _text))


def _is_taken(key: str, before: tuple[str, ...], probe: Probe) -> bool:
    """Whether the table takes the probe (None resets the key to its default)."""
    constraint = next(c for k, b, c in _keys() if (k, b) == (key, before))
    return probe.value is None or bool(constraint.is_satisfied_by(probe.value))


def _in_default() -> set[int]:
    chosen: set[int] = set()
    for number, (key, before, _) in enumerate(_keys()):
        mine = [i for i, case in enumerate(CASES) if case[0] == key and case[1] == before]
        for taken, count in ((False, REFUSED_PER_KEY), (True, TAKEN_PER_KEY)):
            group = [i for i in mine if _is_taken(key, before, CASES[i][2]) == taken]
            chosen.update(group[(number * count + k) % len(group)] for k in range(min(count, len(group))))
    return chosen


# Values the sweeps found refused with a traceback, read in the default suite: (key, before, value).
FOUND: list[tuple[str, tuple[str, ...], Any]] = [
    ("model.hidden", (), 2**63 - 1),  # PyTorch's storage size overflowed (RuntimeError) building the MLP
    ("participation.availability_trace", (), "a\x00b"),  # open() raised ValueError: embedded null byte
    ("system.trace", (), "a\x00b"),
]


def _params(checked: bool) -> list[Any]:
    out, default = [], _in_default()
    if checked:
        for key, before, value in FOUND:
            out.append(
                pytest.param(key, before, Probe("found", value, None), render(value), id=f"{key}={value!r} (found)")
            )
    for index, (key, before, probe, text) in enumerate(CASES):
        if (index in default) == checked:
            where = "".join(f" ({b})" for b in before)
            out.append(pytest.param(key, before, probe, text, id=f"{key}={probe.label}{where}"))
    return out


@pytest.fixture
def checks_only(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``run_suite`` replaced by the checks a run makes before its first byte; the configs it was given."""
    given: list[Any] = []

    def run_suite(suite: Any, directory: Path, **options: Any) -> Any:
        for _, config in suite or []:
            check_experiment(config)
            given.append(config)
        return suite_module.SuiteOutcome(directory, [])

    monkeypatch.setattr(suite_module, "run_suite", run_suite)
    return given


@pytest.mark.parametrize(("key", "before", "probe", "text"), _params(checked=True))
def test_a_config_key_at_its_bound(
    key: str,
    before: tuple[str, ...],
    probe: Probe,
    text: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    checks_only: list[Any],
) -> None:
    _run_set(key, before, probe, text, tmp_path, monkeypatch, capsys, checks_only)


@pytest.mark.slow
@pytest.mark.parametrize(("key", "before", "probe", "text"), _params(checked=False))
def test_a_config_key_at_its_bound_sweep(
    key: str,
    before: tuple[str, ...],
    probe: Probe,
    text: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    checks_only: list[Any],
) -> None:
    _run_set(key, before, probe, text, tmp_path, monkeypatch, capsys, checks_only)


def _run_set(
    key: str,
    before: tuple[str, ...],
    probe: Probe,
    text: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    given: list[Any],
) -> None:
    (tmp_path / "tiny.toml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    start = snapshot(tmp_path)
    sets = [item for b in before for item in ("--set", b)]
    try:
        with time_limit(CASE_SECONDS):
            code, out, err = run_cli(["run", "tiny.toml", "-q", *sets, "--set", f"{key}={text}"], capsys)
    except SlowCase:
        pytest.fail(f"--set {key}={text} was still being checked after {CASE_SECONDS} s")
    assert "Traceback" not in err, err
    assert snapshot(tmp_path) == start, "a command wrote files"
    if code != 0 or not _is_taken(key, before, probe):
        assert (code, out, len(err.splitlines())) == (2, "", 1), (code, out, err)
        return
    assert err == "", err
    assert given, "run_suite was not reached"
    section, _, name = key.partition(".")
    held = config_to_dict(given[0]).get(section, {})
    if probe.value is not None and name in held:  # the value reached the resolved config
        assert held[name] == probe.value or _same_path(held[name], probe.value), (held[name], probe.value)


def _same_path(held: Any, given: Any) -> bool:
    """A path the config records absolute (a data file, a trace)."""
    return isinstance(held, str) and isinstance(given, str) and held.endswith(given.lstrip("~"))
