"""The ``fedsample`` command line: JSON output that matches the library, reproducible selections,
and one-line errors with exit status 2 for every bad input.

A few tests run the installed console script in a subprocess (about 0.5 s each); the rest call
``fedsample.cli.main`` in-process.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import run_cli, run_script
from fedsample import Federation, exact_statistics, make_sampler
from fedsample.cli import main
from fedsample.rng import Stream, stream_rng

STATS_KEYS = {"var_weights", "p_included", "sum_var", "var_sum_weights", "alpha", "expected_distinct", "biased"}
DEFAULT_SAMPLERS = ["full", "md", "uniform", "fedavg-uniform", "poisson", "binomial", "clustered-size"]


def _check_stats_json(out: dict[str, Any], sizes: list[int], m: int) -> None:
    """The schema of ``stats --json`` and its values against exact_statistics."""
    federation = Federation.from_sizes(sizes)
    assert set(out["samplers"]) == set(DEFAULT_SAMPLERS)
    for name, entry in out["samplers"].items():
        assert set(entry) >= STATS_KEYS
        assert isinstance(entry["var_weights"], list)
        assert len(entry["var_weights"]) == len(entry["p_included"]) == len(sizes)
        assert isinstance(entry["biased"], bool)
        assert entry["alpha"] is None or isinstance(entry["alpha"], float)
        sampler = make_sampler(name)
        state = sampler.init(federation, m)
        exact = exact_statistics(sampler.design(state), federation.importances)
        np.testing.assert_allclose(entry["var_weights"], exact.var_weights, rtol=1e-15, atol=0)
        np.testing.assert_allclose(entry["p_included"], exact.p_included, rtol=1e-15, atol=0)
        assert entry["sum_var"] == pytest.approx(exact.sigma, rel=1e-15)
        assert entry["var_sum_weights"] == pytest.approx(exact.var_sum_weights, rel=1e-15, abs=0)
        assert entry["expected_distinct"] == pytest.approx(exact.expected_distinct, rel=1e-15)
        assert entry["alpha"] == (None if exact.alpha is None else pytest.approx(exact.alpha, rel=1e-15))
        assert entry["biased"] is (name == "fedavg-uniform")
    assert out["samplers"]["clustered-size"]["alpha"] is None
    assert out["samplers"]["md"]["alpha"] == pytest.approx(1 / m)


# --- the real console script ---------------------------------------------------------------


def test_script_stats_json(fedsample_script: Path) -> None:
    """`fedsample stats --sizes ... -m ... --json` prints one JSON object matching exact_statistics."""
    sizes, m = [10, 20, 30, 40, 5, 15], 2
    result = run_script(fedsample_script, "stats", "--sizes", ",".join(map(str, sizes)), "-m", str(m), "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    _check_stats_json(json.loads(lines[0]), sizes, m)


def test_script_sample_is_byte_identical_for_a_seed(fedsample_script: Path) -> None:
    """`fedsample sample` with the same seed prints byte-identical output on two runs."""
    args = ("sample", "clustered-size", "--sizes", "5,1,3,8,2,6,4,1", "-m", "3", "--rounds", "20", "--seed", "42")
    first = run_script(fedsample_script, *args, "--json")
    second = run_script(fedsample_script, *args, "--json")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert len(json.loads(first.stdout)["rounds"]) == 20


def test_script_bad_input_is_one_line_without_traceback(fedsample_script: Path) -> None:
    """A bad size exits with status 2 and a single stderr line naming the parameter and value."""
    result = run_script(fedsample_script, "stats", "--sizes", "3,nan,4", "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "'--sizes'" in lines[0]
    assert "'nan'" in lines[0]
    assert "Traceback" not in result.stderr


# --- in-process ----------------------------------------------------------------------------


def test_sample_json_selections(capsys: pytest.CaptureFixture[str]) -> None:
    """`sample --json` prints {"rounds": [{"clients", "weights"}]}: distinct increasing ids, summed
    weights, the same as the library's draws from the (seed, sampling, t) streams."""
    sizes, m, rounds, seed = [1, 3], 5, 6, 9  # MD with m > n must repeat clients
    code, out, err = run_cli(
        ["sample", "md", "--sizes", "1,3", "-m", str(m), "--rounds", str(rounds), "--seed", str(seed), "--json"],
        capsys,
    )
    assert (code, err) == (0, "")
    payload = json.loads(out)
    assert len(payload["rounds"]) == rounds
    sampler = make_sampler("md")
    state = sampler.init(Federation.from_sizes(sizes), m)
    for t, entry in enumerate(payload["rounds"]):
        assert set(entry) >= {"clients", "weights"}
        clients, weights = entry["clients"], entry["weights"]
        assert clients == sorted(set(clients))
        assert len(weights) == len(clients)
        assert sum(weights) == pytest.approx(1.0)
        assert all(round(w * m) == pytest.approx(w * m) for w in weights)  # count / m
        ids, summed = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t)).distinct()
        assert clients == ids.tolist()
        assert weights == summed.tolist()


def test_sample_different_seeds_differ(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sample", "uniform", "--sizes", "5,1,3,8,2,6,4,1", "-m", "3", "--rounds", "10", "--json"]
    _, first, _ = run_cli([*argv, "--seed", "1"], capsys)
    _, second, _ = run_cli([*argv, "--seed", "2"], capsys)
    assert json.loads(first)["rounds"] != json.loads(second)["rounds"]


def test_stats_json_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    sizes, m = [4, 7, 1, 9, 3], 2
    code, out, err = run_cli(["stats", "--sizes", ",".join(map(str, sizes)), "-m", str(m), "--json"], capsys)
    assert (code, err) == (0, "")
    _check_stats_json(json.loads(out), sizes, m)


def test_sizes_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--sizes-file reads one integer per line ('#' comments and blank lines ignored) like --sizes."""
    path = tmp_path / "sizes.txt"
    path.write_text("# client sizes\n10\n20  # second\n\n30\n40\n")
    code, from_file, err = run_cli(["stats", "--sizes-file", str(path), "-m", "2", "--json"], capsys)
    assert (code, err) == (0, "")
    _, from_list, _ = run_cli(["stats", "--sizes", "10,20,30,40", "-m", "2", "--json"], capsys)
    a, b = json.loads(from_file), json.loads(from_list)
    assert a["samplers"] == b["samplers"]
    assert a["num_clients"] == 4


def test_stats_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json, stats prints a table with a row per sampler and a note on the biased one."""
    code, out, err = run_cli(["stats", "--sizes", "10,20,30,40", "-m", "2"], capsys)
    assert (code, err) == (0, "")
    for name in DEFAULT_SAMPLERS:
        assert name in out
    assert "fedavg-uniform is biased" in out


def test_stats_skips_infeasible_default_samplers(capsys: pytest.CaptureFixture[str]) -> None:
    """With the default sampler list, Poisson on a federation with m p_i > 1 is skipped, with the reason."""
    code, out, _ = run_cli(["stats", "--sizes", "100,1,1,1", "-m", "2", "--json"], capsys)
    assert code == 0
    payload = json.loads(out)
    assert "poisson" not in payload["samplers"]
    assert "num_sampled" in payload["skipped"]["poisson"]


def test_stats_monte_carlo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["stats", "--sizes", "3,1,2", "-m", "2", "--samplers", "md", "--monte-carlo", "500", "--json"], capsys
    )
    assert code == 0
    assert json.loads(out)["samplers"]["md"]["monte_carlo"]["num_rounds"] == 500


def test_sample_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["sample", "md", "--sizes", "1,2,3", "-m", "2", "--rounds", "3"], capsys)
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines()] == ["round 0", "round 1", "round 2"]


def test_sample_sampler_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    """--param SAMPLER.NAME=VALUE reaches the sampler: capped Poisson accepts a dominant client."""
    argv = ["sample", "poisson", "--sizes", "100,1,1,1", "-m", "2", "--json"]
    assert run_cli(argv, capsys)[0] == 2
    code, out, _ = run_cli([*argv, "--param", "poisson.capped=true"], capsys)
    assert code == 0
    assert 0 in json.loads(out)["rounds"][0]["clients"]  # the dominant client has q = 1


def _bad_line(tmp_path: Path) -> str:
    path = tmp_path / "bad.txt"
    path.write_text("10\nabc\n30\n")
    return str(path)


def _empty_file(tmp_path: Path) -> str:
    path = tmp_path / "empty.txt"
    path.write_text("# nothing\n\n")
    return str(path)


BAD_INPUTS = [
    pytest.param(["stats", "--sizes", "3,0,4"], ["'--sizes'", "'0'"], id="zero-size"),
    pytest.param(["stats", "--sizes", "-5,3"], ["'--sizes'", "'-5'"], id="negative-size"),
    pytest.param(["stats", "--sizes=-5,3"], ["'--sizes'", "'-5'"], id="negative-size-equals"),
    pytest.param(["stats", "--sizes", "3,2.5"], ["'--sizes'", "'2.5'"], id="non-integer-size"),
    pytest.param(["stats", "--sizes", "nan,3"], ["'--sizes'", "'nan'"], id="nan-size"),
    pytest.param(["stats", "--sizes", ""], ["'--sizes'", "''"], id="empty-list"),
    pytest.param(["stats", "--sizes", "3,,4"], ["'--sizes'", "''"], id="empty-item"),
    pytest.param(["stats", "--sizes", "3,4", "-m", "0"], ["num-sampled", "Got 0"], id="m-zero"),
    pytest.param(["stats", "--sizes", "3,4", "-m", "-2"], ["num-sampled", "Got -2"], id="m-negative"),
    pytest.param(["stats", "--sizes", "3,4", "-m", "x"], ["num-sampled", "'x'"], id="m-not-int"),
    pytest.param(
        ["stats", "--sizes", "3,4,5", "-m", "5", "--samplers", "uniform"],
        ["'num_sampled'", "Got 5"],
        id="m-above-n-uniform",
    ),
    pytest.param(
        ["stats", "--sizes", "3,4", "--samplers", "bogus"], ["'--samplers'", "'bogus'"], id="unknown-in-stats"
    ),
    pytest.param(["sample", "bogus", "--sizes", "3,4"], ["'NAME'", "'bogus'"], id="unknown-in-sample"),
    pytest.param(["stats", "--sizes", "3,4", "--samplers", "md,,uniform"], ["'--samplers'"], id="empty-sampler-name"),
    pytest.param(["stats", "--sizes-file", "{tmp}/missing.txt"], ["'--sizes-file'", "missing.txt"], id="missing-file"),
    pytest.param(["stats", "--sizes-file", "{bad_line}"], ["'--sizes-file'", "'abc'", "line 2"], id="bad-line"),
    pytest.param(["stats", "--sizes-file", "{empty}"], ["'--sizes-file'", "no sizes"], id="empty-file"),
    pytest.param(["stats", "--federation", "mnist"], ["'--federation'", "'mnist'"], id="unknown-federation"),
    pytest.param(["sample", "md", "--sizes", "3,4", "--rounds", "0"], ["'--rounds'", "Got 0"], id="rounds-zero"),
    pytest.param(["sample", "md", "--sizes", "3,4", "--seed", "-1"], ["'--seed'", "Got -1"], id="negative-seed"),
    pytest.param(["stats", "--sizes", "3,4", "--monte-carlo", "1"], ["'--monte-carlo'", "Got 1"], id="monte-carlo-1"),
    pytest.param(
        ["sample", "poisson", "--sizes", "100,1,1", "-m", "2"], ["'num_sampled'", "Got 2"], id="poisson-infeasible"
    ),
    pytest.param(["sample", "clustered", "--sizes", "3,4", "-m", "1"], ["'rows'", "None"], id="clustered-no-rows"),
    pytest.param(
        ["stats", "--sizes", "3,4", "--samplers", "md", "--param", "poisson.capped=true"],
        ["'--param'", "'poisson'"],
        id="param-for-unused-sampler",
    ),
    pytest.param(
        ["stats", "--sizes", "3,4", "--samplers", "poisson", "--param", "poisson.capped=1"],
        ["'capped'", "Got 1"],
        id="bad-param-value",
    ),
    pytest.param(["stats", "--sizes", "3,4", "--param", "capped"], ["'--param'", "'capped'"], id="malformed-param"),
    pytest.param(["stats", "--bogus"], ["--bogus"], id="unknown-option"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_INPUTS)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], expected: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every bad input: exit status 2, nothing on stdout, exactly one stderr line naming the
    parameter and the value received, no traceback."""
    values = {"tmp": str(tmp_path), "bad_line": _bad_line(tmp_path), "empty": _empty_file(tmp_path)}
    argv = [arg.format(**values) for arg in argv]
    code, out, err = run_cli(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n")
    assert lines[0].startswith("fedsample")
    for fragment in expected:
        assert fragment in lines[0]
    assert "Traceback" not in err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli([], capsys)
    assert code == 2
    assert "stats" in out
    assert "sample" in out


def test_a_command_imports_only_its_own_module() -> None:
    import sys

    code = (
        "import sys; from fedsample.cli import main; "
        "main(['stats', '--sizes', '5,3,2', '-m', '2']); "
        "print(sorted(m for m in sys.modules if m.startswith('fedsample.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = out.strip().splitlines()[-1]
    assert "fedsample.cli.stats" in loaded
    for other in ("fedsample.cli.run", "fedsample.cli.report", "fedsample.cli.plot", "fedsample.cli.sample"):
        assert f"'{other}'" not in loaded


def test_top_level_help_lists_every_command_with_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    from fedsample.cli._app import COMMANDS

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name, command in COMMANDS.items():
        help_text = command.help
        assert name in text
        assert help_text.split()[0] in text
