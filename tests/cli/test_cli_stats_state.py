"""``fedsample stats --sampler-state FILE``: the statistics of the distribution a sampler learned.

A state drawn with replacement is one row ``p`` drawn ``K`` times with weights ``lambda / (K p)``:
its statistics are exact (unbiased, ``alpha = 1/K``, ``Var[w_i] = lambda_i^2 (1 - p_i) / (K p_i)``,
``P(i in S) = 1 - (1 - p_i)^K``). A state drawn without replacement (successive sampling) has no
closed form and gets Monte-Carlo estimates only. Bad files exit with status 2 and one stderr line.

Monte-Carlo comparisons use 4 standard errors (false-failure probability ~6.3e-5 each; 12 in this
file, bound 7.6e-4) and fixed seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import run_cli, run_script
from fedsample import Federation
from fedsample.samplers import OSMDSampler
from fedsample.samplers.persistence import save_sampler
from sampler_cases import warm_up

FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6])
NUM_SAMPLED = 3
Z = 4.0


def _saved(path: Path, sampler: Any, federation: Federation = FEDERATION, rounds: int = 30) -> np.ndarray:
    """Save ``sampler``'s state after ``rounds`` rounds of synthetic feedback; return its ``p``."""
    state = warm_up(sampler, sampler.init(federation, NUM_SAMPLED), rounds=rounds)
    save_sampler(path, sampler, state)
    p: np.ndarray = sampler.probabilities(state)
    return p


def test_with_replacement_state_has_exact_statistics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: one object whose entry for the file holds the exact statistics of K draws from the
    learned p: unbiased, alpha = 1/K, and the variance and inclusion formulas above."""
    path = tmp_path / "osmd.json"
    p = _saved(path, OSMDSampler(eta=0.01))
    assert np.ptp(p) > 0.01  # a learned, non-uniform distribution
    code, out, err = run_cli(["stats", "--sampler-state", str(path), "--json"], capsys)
    assert (code, err) == (0, "")
    assert len(out.strip().splitlines()) == 1
    payload = json.loads(out)
    assert payload["num_sampled"] == NUM_SAMPLED
    assert payload["num_clients"] == 6
    assert payload["importance"] == "saved"
    assert list(payload["samplers"]) == ["osmd (osmd.json)"]
    entry = payload["samplers"]["osmd (osmd.json)"]
    lam, k = FEDERATION.importances, NUM_SAMPLED
    assert entry["biased"] is False
    assert entry["max_bias"] < 1e-12
    np.testing.assert_allclose(entry["mean_weights"], lam, rtol=1e-12)
    assert entry["alpha"] == pytest.approx(1 / k, rel=1e-12)
    np.testing.assert_allclose(entry["var_weights"], lam**2 * (1 - p) / (k * p), rtol=1e-12)
    np.testing.assert_allclose(entry["p_included"], 1 - (1 - p) ** k, rtol=1e-12)
    assert "monte_carlo" not in entry


def test_without_replacement_state_has_monte_carlo_statistics_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No closed form: the entry says exact = false and carries 20000 rounds of Monte Carlo by
    default, whose mean weights are within 4 standard errors of lambda (Des Raj is unbiased) and
    whose inclusion probabilities show K distinct clients a round; --monte-carlo sets the rounds."""
    path = tmp_path / "osmd.json"
    _saved(path, OSMDSampler(eta=0.01, replace=False))
    code, out, err = run_cli(["stats", "--sampler-state", str(path), "--json"], capsys)
    assert (code, err) == (0, "")
    entry = json.loads(out)["samplers"]["osmd (osmd.json)"]
    assert entry["exact"] is False
    assert set(entry) == {"exact", "monte_carlo"}
    mc = entry["monte_carlo"]
    assert mc["num_rounds"] == 20_000
    mean, stderr = np.array(mc["mean_weights"]["value"]), np.array(mc["mean_weights"]["stderr"])
    assert np.all(np.abs(mean - FEDERATION.importances) < Z * stderr)
    assert mc["p_all_distinct"]["value"] == 1.0
    assert mc["expected_distinct"]["value"] == NUM_SAMPLED
    assert sum(mc["p_included"]["value"]) == pytest.approx(NUM_SAMPLED)
    code, out, _ = run_cli(["stats", "--sampler-state", str(path), "--monte-carlo", "500", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["samplers"]["osmd (osmd.json)"]["monte_carlo"]["num_rounds"] == 500


def test_two_states_side_by_side_in_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Repeated --sampler-state compares several states of one federation; the table says the
    importances are the saved ones and notes the state without closed form. Two files of the same
    name in different folders both get a row."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _saved(tmp_path / "a" / "state.json", OSMDSampler(eta=0.01))
    _saved(tmp_path / "b" / "state.json", OSMDSampler(eta=0.01, replace=False))
    argv = ["stats", "--sampler-state", str(tmp_path / "a" / "state.json")]
    argv += ["--sampler-state", str(tmp_path / "b" / "state.json"), "--monte-carlo", "200"]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, "")
    assert "saved states" in out
    assert "no closed-form statistics" in out
    assert str(tmp_path / "a" / "state.json") in out
    assert str(tmp_path / "b" / "state.json") in out
    code, out, _ = run_cli([*argv, "--json"], capsys)
    assert code == 0
    assert len(json.loads(out)["samplers"]) == 2


def test_states_of_different_federations_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _saved(tmp_path / "one.json", OSMDSampler())
    _saved(tmp_path / "two.json", OSMDSampler(), federation=Federation.from_sizes([1, 2, 3, 4, 5, 6]))
    argv = ["stats", "--sampler-state", str(tmp_path / "one.json"), "--sampler-state", str(tmp_path / "two.json")]
    code, out, err = run_cli(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1
    assert "'--sampler-state'" in lines[0]
    assert "two.json" in lines[0]


def _bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.json"
    if kind == "not-json":
        path.write_text("{not json")
    elif kind == "wrong-format":
        path.write_text(json.dumps({"format": "other", "sampler": "osmd", "state": {}}))
    elif kind == "foreign-state":
        sampler = OSMDSampler()
        save_sampler(path, sampler, sampler.init(FEDERATION, 2))
        data = json.loads(path.read_text())
        data["state"] = 5
        path.write_text(json.dumps(data))
    return path  # "missing": never written


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        ("missing", "readable file"),
        ("not-json", "JSON file"),
        ("wrong-format", "format 'fedsample-sampler'"),
        ("foreign-state", "cannot use"),
    ],
)
def test_bad_state_file_exits_2_with_one_line(
    kind: str, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing, non-JSON, wrongly formatted or unusable file: status 2, nothing on stdout, one
    stderr line naming the parameter and the file, no traceback."""
    path = _bad_file(tmp_path, kind)
    code, out, err = run_cli(["stats", "--sampler-state", str(path)], capsys)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fedsample stats: error:")
    assert "'sampler_state'" in lines[0]
    assert path.name in lines[0]
    assert fragment in lines[0]
    assert "Traceback" not in err


def test_script_stats_sampler_state(tmp_path: Path, fedsample_script: Path) -> None:
    """The installed console script reads a saved state and prints one JSON object."""
    path = tmp_path / "state.json"
    _saved(path, OSMDSampler(eta=0.01))
    result = run_script(fedsample_script, "stats", "--sampler-state", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    entry = json.loads(result.stdout)["samplers"]["osmd (state.json)"]
    assert entry["alpha"] == pytest.approx(1 / NUM_SAMPLED)
