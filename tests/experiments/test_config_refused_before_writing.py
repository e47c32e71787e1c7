"""Every setting that once failed mid-run is refused before anything is written (issue 24 item 5).

Each config below was accepted and then failed while the run was built or trained (a memory
traceback, an error naming an internal parameter or the wrong key, infinite round times), or ran on
silently (a trace naming a client the federation does not have). Now ``fedsample run CONFIG --out
DIR`` exits 2 with one stderr line naming the key, and ``DIR`` is never created. A trace or config
starting with a UTF-8 byte-order mark reads as the same file without it. Monte Carlo rounds and
``sample --rounds`` have an up-front bound, and ``sample`` prints each round as it is drawn.

Deterministic, no statistics. The memory bounds compare with this machine's memory: these settings
need 3.9e3 GiB (``hidden``) to 1.1e5 GiB (``projection_dim``), so the cases assume a machine with
less than about 4 TiB. The commands that once drew 10^9 or 10^12 rounds fail the test at their first
draw instead of running for days, should the bound ever be checked too late; only the streaming
check waits (20 s at most, for a first line that comes in well under a second).
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config, run_cli, snapshot
from fedsample import Federation, FedsampleError, MDSampler
from fedsample.experiments.config import load_config
from fedsample.participation.availability import load_availability_trace
from fedsample.participation.system import load_system_trace
from fedsample.stats import monte_carlo_statistics

BOM = b"\xef\xbb\xbf"
TRACE_OF_CLIENT_57 = "client,start,end\n0,0,5\n57,0,5\n"


def _sampler(name: str, key: str, value: str) -> str:
    return f'\n[[samplers]]\nname = "{name}"\n{key} = {value}\n'


def _md_with(table: str) -> str:
    return digits_config(seeds=1, rounds=2, tables=MD_AND_UNIFORM + table)


# (config text, the key its one line names); the trace file sits beside the config.
CONFIGS: dict[str, tuple[str, str]] = {
    "divfl projection_dim 1e12": (
        digits_config(seeds=1, rounds=2, tables=_sampler("divfl", "projection_dim", "1000000000000")),
        "samplers[0].projection_dim",
    ),
    "adaptive-osmd horizon 1e23": (
        digits_config(seeds=1, rounds=2, tables=_sampler("adaptive-osmd", "horizon", str(10**23))),
        "samplers[0].horizon",
    ),
    "osmd eta 1e308": (digits_config(seeds=1, rounds=2, tables=_sampler("osmd", "eta", "1e308")), "samplers[0].eta"),
    "adaptive-osmd a_max 1e-320": (
        digits_config(seeds=1, rounds=2, tables=_sampler("adaptive-osmd", "a_max", "1e-320")),
        "samplers[0].a_max",
    ),
    "mabs delta 1e308": (
        digits_config(seeds=1, rounds=2, tables=_sampler("mabs", "delta", "1e308")),
        "samplers[0].delta",
    ),
    "system upload 1e-320": (_md_with("\n[system]\nupload = 1e-320\n"), "system.upload"),
    "system latency 1e308": (_md_with("\n[system]\nlatency = 1e308\n"), "system.latency"),
    "availability trace naming client 57 of 10": (
        _md_with('\n[participation]\navailability_trace = "clients.csv"\n'),
        "participation.availability_trace",
    ),
    "model hidden 1e9": (digits_config(seeds=1, rounds=2, hidden=10**9), "model.hidden"),
    "training batch_size 1e12": (
        digits_config(seeds=1, rounds=2).replace("batch_size = 5", "batch_size = 1000000000000"),
        "training.batch_size",
    ),
}


def _one_line(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err
    assert (code, out, len(err.splitlines())) == (2, "", 1), err


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_config_that_failed_mid_run_is_refused_before_the_run_directory_is_made(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, key = CONFIGS[case]
    (tmp_path / "config.toml").write_text(text)
    (tmp_path / "clients.csv").write_text(TRACE_OF_CLIENT_57)
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run_cli(["run", str(tmp_path / "config.toml"), "--out", str(out), "-q"], capsys)
    _one_line(code, stdout, err)
    assert f"'{key}'" in err
    assert not os.path.lexists(out)
    assert snapshot(tmp_path) == before


def _with_and_without_bom(tmp_path: Path, name: str, text: str) -> tuple[Path, Path]:
    plain, marked = tmp_path / "plain" / name, tmp_path / "marked" / name
    for path, head in ((plain, b""), (marked, BOM)):
        path.parent.mkdir()
        path.write_bytes(head + text.encode("utf-8"))
    return plain, marked


def test_an_availability_trace_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    plain, marked = _with_and_without_bom(tmp_path, "trace.csv", "client,start,end\n2,0,3\n0,1,4\n2,5,9\n")
    expected, got = load_availability_trace(plain), load_availability_trace(marked)
    for field in ("clients", "starts", "ends"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field), err_msg=field)


SYSTEM_TRACES = {
    "trace.csv": "client,compute,upload,download\n0,0.01,10,20\n1,0.02,5,40\n",
    "trace.json": '[{"client": 0, "compute": 0.01, "upload": 10, "download": 20},'
    ' {"client": 1, "compute": 0.02, "upload": 5, "download": 40}]',
}


@pytest.mark.parametrize("name", list(SYSTEM_TRACES))
def test_a_system_trace_with_a_byte_order_mark_reads_as_without(name: str, tmp_path: Path) -> None:
    plain, marked = _with_and_without_bom(tmp_path, name, SYSTEM_TRACES[name])
    for got, expected in zip(load_system_trace(marked, 2), load_system_trace(plain, 2), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_config_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    plain, marked = _with_and_without_bom(tmp_path, "config.toml", digits_config())
    assert load_config(marked) == load_config(plain)


def _no_draws(self: Any, state: Any, rng: Any) -> Any:
    raise AssertionError("a round was drawn before the number of rounds was checked")


def test_monte_carlo_rounds_have_an_up_front_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MDSampler, "sample", _no_draws)
    sampler = MDSampler()
    state = sampler.init(Federation.from_sizes([1, 2, 3]), 2)
    with pytest.raises(FedsampleError) as info:
        monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=10**12)
    assert info.value.parameter == "num_rounds"
    assert "'num_rounds'" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["stats", "--sizes", "1,2,3", "-m", "2", "--samplers", "md", "--monte-carlo", str(10**9)], "--monte-carlo"),
        (["sample", "md", "--sizes", "1,2,3", "-m", "2", "--rounds", str(10**12)], "--rounds"),
    ],
    ids=["stats --monte-carlo 1e9", "sample --rounds 1e12"],
)
def test_rounds_drawn_by_the_cli_have_an_up_front_bound(
    argv: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(MDSampler, "sample", _no_draws)
    code, out, err = run_cli(argv, capsys)
    _one_line(code, out, err)
    assert f"'{flag}'" in err


def test_sample_prints_its_first_round_before_drawing_the_others(fedsample_script: Path) -> None:
    """10^7 rounds take minutes to draw; the first line must come at once (here: within 20 s)."""
    argv = [str(fedsample_script), "sample", "md", "--sizes", "1,2,3", "-m", "2", "--rounds", str(10**7)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the pipe's own buffer aside: fedsample's is under test
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    stdout = process.stdout
    assert stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    try:
        reader.start()
        reader.join(timeout=20)
    finally:
        process.kill()
        process.wait()
        reader.join(timeout=5)
    assert lines, "no line within 20 s"
    assert lines[0].startswith("round 0: "), lines


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        ("comparison-out-none", "out"),
        ("comparison-out-nul", "out"),
        ("experiment-config-text", "config"),
        ("experiment-run-dir-int", "run_dir"),
        ("experiment-tracking-text", "tracking"),
        ("experiment-tracking-int-keys", "tracking"),
    ],
)
def test_an_entry_point_argument_of_the_wrong_kind_is_refused_naming_it(
    call: str, parameter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: run_comparison(out=None) and run_experiment(config="x", run_dir=3, tracking="x") raised
    TypeError, AttributeError or ValueError (a NUL byte); now the library's one line, nothing written."""
    from fedsample.data import FederatedDataset
    from fedsample.experiments import config_from_dict, run_comparison, run_experiment

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.integers(0, 2, 8)
    data = FederatedDataset(x, y, np.array([0, 4, 8]), x[:2], y[:2], np.array([0, 1, 2]))
    config = config_from_dict(
        {"name": "tiny", "training": {"rounds": 1, "num_sampled": 1}, "samplers": [{"name": "md"}]}
    )
    calls: dict[str, Any] = {
        "comparison-out-none": lambda: run_comparison(data, "mlp", ["md"], out=None),
        "comparison-out-nul": lambda: run_comparison(data, "mlp", ["md"], out="a\x00b"),
        "experiment-config-text": lambda: run_experiment("x", "run"),
        "experiment-run-dir-int": lambda: run_experiment(config, 3),
        "experiment-tracking-text": lambda: run_experiment(config, "run", tracking="mlflow"),
        "experiment-tracking-int-keys": lambda: run_experiment(config, "run", tracking={1: 2}),
    }
    with pytest.raises(FedsampleError, match=f"The '{parameter}' parameter of run_") as refused:
        calls[call]()
    assert "\n" not in str(refused.value)
    assert not any(tmp_path.iterdir())
