"""The ``[participation]`` table of experiment configs: defaults, validation, TOML round trip,
overrides, and the :class:`~fedsample.participation.setting.Participation` a run is built with."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample import FedsampleError
from fedsample.experiments.config import (
    ParticipationSection,
    config_from_dict,
    config_to_dict,
    load_config,
)
from fedsample.experiments.config.overrides import apply_overrides, parse_override
from fedsample.experiments.config.toml_writer import config_to_toml
from fedsample.participation.availability import AlwaysAvailable, BernoulliAvailability, TraceAvailability


def _config(**participation: Any) -> dict[str, Any]:
    return {"name": "x", "samplers": [{"name": "md"}], "participation": participation}


def test_the_default_is_no_failure_and_is_not_written() -> None:
    cfg = config_from_dict({"name": "x", "samplers": [{"name": "md"}]})
    assert cfg.participation == ParticipationSection()
    assert "participation" not in config_to_dict(cfg)
    assert "[participation]" not in config_to_toml(cfg)


def test_a_participation_table_round_trips_through_toml() -> None:
    cfg = config_from_dict(
        _config(availability=0.8, dropout=0.3, over_selection=0.2, policy="inverse-probability", redraws=0)
    )
    assert cfg.participation == ParticipationSection(
        availability=0.8, dropout=0.3, over_selection=0.2, policy="inverse-probability", redraws=0
    )
    text = config_to_toml(cfg)
    assert "[participation]" in text
    assert config_from_dict(tomllib.loads(text)) == cfg
    assert config_to_toml(config_from_dict(tomllib.loads(text))) == text


def test_ints_become_floats() -> None:
    section = config_from_dict(_config(availability=1, dropout=0, over_selection=1)).participation
    assert isinstance(section.availability, float)
    assert isinstance(section.over_selection, float)


def test_set_participation_dropout_overrides() -> None:
    cfg = config_from_dict({"name": "x", "samplers": [{"name": "md"}]})
    key, value = parse_override("participation.dropout=0.3")
    new = apply_overrides(cfg, {key: value, "participation.policy": "inverse-probability"})
    assert new.participation.dropout == 0.3
    assert new.participation.policy == "inverse-probability"
    with pytest.raises(FedsampleError, match=r"The 'participation.dropout' key of config must be") as caught:
        apply_overrides(cfg, {"participation.dropout": 1.5})
    assert "\n" not in str(caught.value)


def test_a_relative_trace_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text("client,start,end\n0,0,3\n")
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\n[[samplers]]\nname = "md"\n[participation]\navailability_trace = "trace.csv"\n')
    cfg = load_config(path)
    assert cfg.participation.availability_trace == str((tmp_path / "trace.csv").resolve())


@pytest.mark.parametrize(
    ("table", "key", "shown"),
    [
        pytest.param({"availability": 0.0}, "participation.availability", "Got 0.0", id="availability-zero"),
        pytest.param({"availability": 1.5}, "participation.availability", "Got 1.5", id="availability-above-one"),
        pytest.param({"availability": "often"}, "participation.availability", "'often'", id="availability-type"),
        pytest.param({"availability_trace": ""}, "participation.availability_trace", "''", id="trace-empty"),
        pytest.param({"availability_trace": 3}, "participation.availability_trace", "Got 3", id="trace-type"),
        pytest.param(
            {"availability_trace": "t.csv", "availability": 0.5}, "participation.availability", "0.5", id="two-models"
        ),
        pytest.param({"dropout": 1.0}, "participation.dropout", "Got 1.0", id="dropout-one"),
        pytest.param({"dropout": -0.1}, "participation.dropout", "Got -0.1", id="dropout-negative"),
        pytest.param({"over_selection": -1}, "participation.over_selection", "Got -1", id="over-selection-negative"),
        pytest.param({"over_selection": 11}, "participation.over_selection", "Got 11", id="over-selection-large"),
        pytest.param({"policy": "average"}, "participation.policy", "'average'", id="policy"),
        pytest.param({"return_rates": "guessed"}, "participation.return_rates", "'guessed'", id="return-rates"),
        pytest.param({"redraws": -1}, "participation.redraws", "Got -1", id="redraws-negative"),
        pytest.param({"redraws": 2.5}, "participation.redraws", "Got 2.5", id="redraws-type"),
        pytest.param({"retries": 3}, "participation.retries", "[participation]: {'availability',", id="unknown-key"),
        pytest.param({"redraw": 3}, "participation.redraw", "Did you mean 'participation.redraws'?", id="unknown-typo"),
        pytest.param(
            {"availability_trace": "t.csv", "policy": "inverse-probability"},
            "participation.return_rates",
            "'known'",
            id="trace-needs-estimated-rates",
        ),
    ],
)
def test_each_bad_value_is_one_line_naming_key_constraint_and_value(table: Any, key: str, shown: str) -> None:
    with pytest.raises(FedsampleError) as caught:
        config_from_dict(_config(**table), source="c.toml")
    message = str(caught.value)
    assert "\n" not in message
    assert f"The {key!r} key of c.toml" in message, message
    assert shown in message, message
    assert caught.value.parameter == key


def test_a_participation_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(FedsampleError, match=r"The 'participation' key of config must be a table. Got 0.3"):
        config_from_dict({"name": "x", "samplers": [{"name": "md"}], "participation": 0.3})


def test_the_built_participation_follows_the_table(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # building experiments imports the engine
    from fedsample.experiments.build import build_participation

    assert isinstance(build_participation(ParticipationSection()).availability, AlwaysAvailable)
    assert build_participation(ParticipationSection()).is_default
    built = build_participation(
        ParticipationSection(availability=0.7, dropout=0.2, over_selection=0.5, policy="ignore", redraws=3)
    )
    assert isinstance(built.availability, BernoulliAvailability)
    assert built.availability.probability == 0.7
    assert built.dropout is not None
    assert built.dropout.probability == 0.2
    assert (built.over_selection, built.policy, built.redraws) == (0.5, "ignore", 3)
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start,end\n0,0,3\n2,1,4\n")
    from_trace = build_participation(ParticipationSection(availability_trace=str(trace), return_rates="estimated"))
    assert isinstance(from_trace.availability, TraceAvailability)
    assert from_trace.availability.available(2, np.array([0, 1, 2])).tolist() == [True, False, True]
    trace.write_text("client,begin,end\n")
    with pytest.raises(FedsampleError, match=r"The 'participation.availability_trace' key of config must name a valid"):
        build_participation(ParticipationSection(availability_trace=str(trace)))
