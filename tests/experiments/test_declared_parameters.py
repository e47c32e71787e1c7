"""Every declared parameter reaches the config file and ``fedsample run --set`` alike.

The walk goes over the declared tables themselves (:data:`fedsample.experiments.config.sections.SECTIONS`,
and every local algorithm and server optimizer of the engine's registry), so a parameter added to a
table is walked without editing this file. For each parameter it checks that a config file
without the key gets the declared default, that a value given in the file and the same value given
with ``--set`` resolve to the same config or fail with the same one-line error, and that a value
breaking the constraint fails in both with an error whose fields (key, constraint, value) are the
declared ones.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import fedsample.experiments.suite as suite_module
from fedsample._params import Parameter, declared
from fedsample._validation import Boolean, Interval, NoneOr, Options
from fedsample.cli import main
from fedsample.engine.registry import ALGORITHMS, SERVER_OPTIMIZERS
from fedsample.errors import FedsampleError
from fedsample.experiments.config.reading import ExperimentConfig, config_to_dict, load_config
from fedsample.experiments.config.sections import SECTIONS, SystemSection
from fedsample.samplers import sampler_class

# The inclusion-probability and optimal samplers of issue 14, walked through their ``[[samplers]]`` table.
WALKED_SAMPLERS = ("bernoulli", "systematic", "optimal", "optimal-distribution")

# (table in the file, key, the component's name when the table names one, the declaration)
CASES: list[tuple[str, str, str | None, Parameter[Any]]] = [
    *((section, key, None, p) for section, table in SECTIONS.items() for key, p in table.parameters.items()),
    *(("algorithm", key, name, p) for name, c in ALGORITHMS.items() for key, p in c.parameters.items()),
    *(("server", key, name, p) for name, c in SERVER_OPTIMIZERS.items() for key, p in c.parameters.items()),
    *(
        ("samplers[0]", key, name, p)
        for name in WALKED_SAMPLERS
        for key, p in declared(sampler_class(name), name).parameters.items()
    ),
]
IDS = [f"{section}.{key}" + (f"[{name}]" if name else "") for section, key, name, _ in CASES]


def _other(parameter: Parameter[Any]) -> Any:
    """A value other than the default that the constraint takes (the default when none is found)."""
    constraint, default = parameter.constraint, parameter.default
    if isinstance(constraint, NoneOr):
        return _other(Parameter(None, constraint.inner))
    if isinstance(constraint, Options):
        return next((v for v in constraint.values if v != default), default)
    if isinstance(constraint, Boolean):
        return not default
    if isinstance(constraint, Interval):
        for value in (2, 3, 0.5, 0.25, 1, 0):
            candidate = constraint.kind(value)
            if candidate != default and constraint.is_satisfied_by(candidate):
                return candidate
    return default if default is not None else "/nonexistent/x"  # a path: absolute, as a file would resolve it


def _breaking(parameter: Parameter[Any]) -> list[Any]:
    """Values that break the constraint: one of the wrong type, and one past a bound or outside the options."""
    constraint = parameter.constraint
    inner = constraint.inner if isinstance(constraint, NoneOr) else constraint
    values: list[Any] = [[]]
    if isinstance(inner, Interval) and inner.left is not None and math.isfinite(inner.left):
        values.append(inner.kind(inner.left - 1))
    elif isinstance(inner, Options):
        values.append("no-such-option")
    return values


def _document(section: str, key: str, name: str | None, value: Any) -> str:
    """A config file with ``section.key = value`` (and the component ``name``); JSON scalars are TOML."""
    if section == "samplers[0]":  # the sampler's own table
        lines = ['name = "walk"', "[[samplers]]", f"name = {json.dumps(name)}"]
    else:
        lines = ['name = "walk"', "[[samplers]]", 'name = "md"', f"[{section}]"]
    if name is not None and section != "samplers[0]":
        lines.append(f"name = {json.dumps(name)}")
    if value is not None:
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _from_file(tmp_path: Path, text: str) -> ExperimentConfig | str:
    file = tmp_path / "walk.toml"
    file.write_text(text)
    try:
        return load_config(file)
    except FedsampleError as exc:
        return " ".join(str(exc).split())


def _from_cli(
    tmp_path: Path, sets: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> ExperimentConfig | str:
    """The config ``fedsample run walk.toml --set ...`` would run, or the one-line error it prints."""
    file = tmp_path / "walk.toml"
    file.write_text(_document("run", "checkpoint_every", None, None))
    ran: list[ExperimentConfig] = []
    monkeypatch.setattr(suite_module, "run_suite", lambda suite, *args, **kwargs: ran.extend(c for _, c in suite))
    capsys.readouterr()
    code = main(["run", str(file), "-q", "-o", str(tmp_path / "out"), *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err
    if code != 0:
        assert code == 2, err
        assert len(err.splitlines()) == 1, err
        return err.strip().removeprefix("fedsample run: error: ")
    return ran[0]


def _as_if_from(source: str, result: ExperimentConfig | str) -> ExperimentConfig | str:
    """The command line's result, its error said of the file ``source`` instead of ``--set``."""
    return result.replace(" key of --set ", f" key of {source} ") if isinstance(result, str) else result


def _same(a: ExperimentConfig | str, b: ExperimentConfig | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return config_to_dict(a) == config_to_dict(b)


def _value(cfg: ExperimentConfig, section: str, key: str) -> Any:
    if section in ("algorithm", "server"):
        return getattr(cfg, section).params.get(key)
    if section == "baselines":
        return cfg.centralized
    if section == "samplers[0]":
        return cfg.samplers[0].params.get(key)
    if section == "system" and cfg.system is None:  # no [system] table: no clock; a table given has these defaults
        return SystemSection()[key]
    return getattr(getattr(cfg, section), key)


def test_the_walk_covers_every_section_of_a_config() -> None:
    sections = {section for section, *_ in CASES}
    assert sections == {
        "federation",
        "model",
        "training",
        "baselines",
        "report",
        "run",
        "participation",
        "system",
        "tracking",
    } | {
        "algorithm",
        "server",
        "samplers[0]",
    }
    walked = {(name, key) for section, key, name, _ in CASES if section == "samplers[0]"}
    assert {name for name, _ in walked} == set(WALKED_SAMPLERS)
    assert {("optimal", "mode"), ("optimal-distribution", "alpha"), ("systematic", "order")} <= walked
    assert len(CASES) >= 40


@pytest.mark.parametrize(("section", "key", "name", "parameter"), CASES, ids=IDS)
def test_declared_parameter_reaches_file_and_set_alike(
    section: str,
    key: str,
    name: str | None,
    parameter: Parameter[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    component = [f"{section}.name={name}"] if name else []
    # The default: a file without the key, and the command line without --set, give the declared one.
    default = _from_file(tmp_path, _document(section, key, name, None))
    assert not isinstance(default, str), default
    assert _value(default, section, key) == parameter.default
    cli_default = _from_cli(tmp_path, component, monkeypatch, capsys)
    assert not isinstance(cli_default, str), cli_default
    assert _value(cli_default, section, key) == parameter.default
    # A value the constraint takes: the same resolved config, or the same error of a combination.
    other = _other(parameter)
    source = str(tmp_path / "walk.toml")
    from_file = _from_file(tmp_path, _document(section, key, name, other))
    from_cli = _from_cli(tmp_path, [*component, f"{section}.{key}={json.dumps(other)}"], monkeypatch, capsys)
    assert _same(from_file, _as_if_from(source, from_cli)), (from_file, from_cli)
    # Values breaking it: the same one-line error, whose fields are the declared ones.
    for bad in _breaking(parameter):
        from_file = _from_file(tmp_path, _document(section, key, name, bad))
        with pytest.raises(FedsampleError) as caught:
            load_config(tmp_path / "walk.toml")
        error = caught.value
        from_cli = _from_cli(tmp_path, [*component, f"{section}.{key}={json.dumps(bad)}"], monkeypatch, capsys)
        assert isinstance(from_file, str), (bad, from_file)
        assert isinstance(from_cli, str), (bad, from_cli)
        assert f"'{section}.{key}' key of --set " in from_cli  # the value came from --set, and the line says so
        assert from_file == _as_if_from(source, from_cli), (bad, from_file, from_cli)
        assert (error.parameter, error.owner, error.value) == (f"{section}.{key}", source, bad)
        assert str(error.constraint) == str(parameter.constraint)
        assert f"'{section}.{key}'" in from_file
        assert str(parameter.constraint) in from_file
