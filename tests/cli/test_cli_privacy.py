"""``fedsample privacy``: the JSON schema, the three modes (epsilon, rounds for a budget, noise for a
budget), the table, and one line on stderr with exit status 2 for every bad flag or refused sampler."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from cli_helpers import run_cli
from fedsample import Federation, make_sampler
from fedsample.privacy import exposure_of, privacy_cost

pytest.importorskip("dp_accounting")

BASE = ["privacy", "--sizes", "3,5,7,9,12", "-m", "2"]
KEYS = {"sampler", "epsilon_max", "epsilon", "delta", "rounds", "noise_multiplier"}


def json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0, err
    assert err == ""
    result: list[dict[str, Any]] = json.loads(out)
    return result


def test_json_is_one_object_per_sampler_with_each_clients_epsilon(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE, "--samplers", "poisson,md,uniform", "--noise-multiplier", "1.5", "--rounds", "20"]
    out = json_of(argv, capsys)
    assert [entry["sampler"] for entry in out] == ["poisson", "md", "uniform"]
    federation = Federation.from_sizes([3, 5, 7, 9, 12])
    for entry in out:
        assert set(entry) == KEYS
        assert entry["delta"] == 1e-5
        assert entry["rounds"] == 20
        assert entry["noise_multiplier"] == 1.5
        assert len(entry["epsilon"]) == 5
        assert all(isinstance(value, float) for value in entry["epsilon"])
        assert entry["epsilon_max"] == max(entry["epsilon"])
        sampler = make_sampler(entry["sampler"])
        exposure = exposure_of(sampler, sampler.init(federation, 2))
        expected = privacy_cost(exposure, noise_multiplier=1.5, rounds=20, delta=1e-5).epsilon
        np.testing.assert_array_equal(entry["epsilon"], expected)


def test_epsilon_with_the_noise_solves_for_the_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    common = [*BASE, "--samplers", "poisson", "--noise-multiplier", "4", "--delta", "1e-6"]
    (entry,) = json_of([*common, "--epsilon", "2"], capsys)
    assert entry["rounds"] > 0
    assert entry["epsilon_max"] <= 2.0
    assert entry["delta"] == 1e-6
    (longer,) = json_of([*common, "--rounds", str(entry["rounds"] + 1)], capsys)
    assert longer["epsilon_max"] > 2.0


def test_epsilon_with_the_rounds_solves_for_the_noise(capsys: pytest.CaptureFixture[str]) -> None:
    (entry,) = json_of([*BASE, "--samplers", "full", "--rounds", "10", "--epsilon", "3"], capsys)
    assert entry["rounds"] == 10
    assert entry["epsilon_max"] <= 3.0
    assert entry["noise_multiplier"] > 0


def test_the_table_shows_each_sampler_its_groups_and_its_worst_client(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        [*BASE, "--samplers", "poisson,clustered-size", "--noise-multiplier", "2", "--rounds", "5"], capsys
    )
    assert code == 0, err
    assert "adjacency: add/remove one client" in out
    assert "poisson: independent inclusions" in out
    assert "clustered-size: draws with replacement" in out
    assert "worst client 4: epsilon" in out  # poisson: the largest client
    assert "worst client 3: epsilon" in out  # clustered-size: client 3 sits in two rows, so can be drawn twice


def test_default_samplers_skip_one_that_does_not_fit_the_federation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["privacy", "--sizes", "1,1,40", "-m", "2", "--noise-multiplier", "3", "--rounds", "2"], capsys
    )
    assert code == 0, err
    assert "skipped poisson: The 'num_sampled' parameter of PoissonSampler.init" in out
    assert "md: draws with replacement" in out


BAD = {
    "z zero": (
        ["--noise-multiplier", "0", "--rounds", "3"],
        "'--noise-multiplier' parameter must be a float in the range (0, 10000]",
    ),
    "z nan": (["--noise-multiplier", "nan", "--rounds", "3"], "'--noise-multiplier' parameter must be a float"),
    "z inf": (["--noise-multiplier", "inf", "--rounds", "3"], "'--noise-multiplier' parameter must be a float"),
    "z word": (["--noise-multiplier", "loud", "--rounds", "3"], "argument --noise-multiplier: invalid float value"),
    "rounds negative": (
        ["--noise-multiplier", "1", "--rounds", "-1"],
        "'--rounds' parameter must be an int in the range",
    ),
    "rounds fraction": (["--noise-multiplier", "1", "--rounds", "1.5"], "argument --rounds: invalid int value"),
    "delta one": (
        ["--noise-multiplier", "1", "--rounds", "3", "--delta", "1"],
        "'--delta' parameter must be a float in the range (0, 1)",
    ),
    "delta zero": (["--noise-multiplier", "1", "--rounds", "3", "--delta", "0"], "'--delta' parameter must be"),
    "epsilon zero": (
        ["--noise-multiplier", "1", "--epsilon", "0"],
        "'--epsilon' parameter must be a float in the range (0,",
    ),
    "all three": (
        ["--noise-multiplier", "1", "--rounds", "3", "--epsilon", "1"],
        "'--epsilon' parameter must be left out",
    ),
    "none": ([], "'--noise-multiplier' parameter must be given"),
    "rounds only": (["--rounds", "3"], "'--noise-multiplier' parameter must be given"),
    "epsilon alone": (["--epsilon", "1"], "'--epsilon' parameter must come with --noise-multiplier"),
    "accountant": (
        ["--noise-multiplier", "1", "--rounds", "3", "--accountant", "prv"],
        "'--accountant' parameter must be one of",
    ),
    "max groups": (
        ["--noise-multiplier", "1", "--rounds", "3", "--max-groups", "0"],
        "'--max-groups' parameter must be an int",
    ),
    "seed": (
        ["--noise-multiplier", "1", "--rounds", "3", "--seed", "-2"],
        "'--seed' parameter must be a non-negative int",
    ),
    "refused": (
        ["--samplers", "osmd", "--noise-multiplier", "1", "--rounds", "3"],
        "Got 'osmd' instead: it learns its sampling distribution from the clients' update norms",
    ),
    "unreachable": (
        ["--samplers", "full", "--rounds", "3", "--epsilon", "1e-6"],
        "'--epsilon' parameter must be a budget that a noise multiplier of at most 10000 meets after 3 rounds",
    ),
}


@pytest.mark.parametrize("flags", list(BAD.values()), ids=list(BAD))
def test_a_bad_flag_is_one_line_and_exit_status_2(
    flags: tuple[list[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    extra, message = flags
    code, out, err = run_cli([*BASE, *extra], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


@pytest.mark.usefixtures("without_dp_accounting")
def test_without_the_extra_the_command_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli([*BASE, "--noise-multiplier", "1", "--rounds", "3"], capsys)
    assert code == 2
    assert out == ""
    assert err.strip().endswith("pip install 'fedsample[privacy]'")
    assert err.count("\n") == 1
