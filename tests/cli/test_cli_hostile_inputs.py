"""Hostile inputs that slipped past the fuzz suite (tests/test_fuzz_inputs.py): each case here once
gave a traceback, a hang, or left files behind; now each gives exit status 2, nothing on stdout,
one stderr line naming the parameter, and leaves the working directory as it was."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import digits_config, run_cli
from fedsample import Federation
from fedsample.engine.history import History
from fedsample.experiments.config.reading import MAX_CONFIG_BYTES
from fedsample.experiments.results.metrics import metrics_table, write_metrics
from fedsample.samplers import make_sampler
from fedsample.samplers.persistence import sampler_to_dict

CONFIG = digits_config()
HUGE = "1" + "0" * 400  # beyond the largest float: float() raises OverflowError


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes, or its kind when it is not a regular file (a FIFO is not read)."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        if path.is_file()
        else ("dir" if path.is_dir() else "other")
        for path in sorted(root.rglob("*"))
    }


def _refused(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """Run ``argv`` in ``tmp_path``; assert the one-line refusal that writes nothing; return the line."""
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in err
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert _snapshot(tmp_path) == before
    return err


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("rounds = 3", f"rounds = {HUGE}", "training.rounds"),
        ("num_clients = 10", f"num_clients = {HUGE}", "federation.num_clients"),
        ("alpha = 0.5", f"alpha = {HUGE}", "federation.alpha"),
    ],
)
def test_integer_beyond_the_largest_float_in_a_config_is_refused(
    old: str, new: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An int of 401 digits once raised OverflowError (float() inside the range check)."""
    (tmp_path / "bad.toml").write_text(CONFIG.replace(old, new))
    err = _refused(["run", "bad.toml", "-q"], tmp_path, monkeypatch, capsys)
    assert f"'{key}'" in err


def test_integer_beyond_the_largest_float_in_set_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tiny.toml").write_text(CONFIG)
    err = _refused(["run", "tiny.toml", "-q", "--set", f"training.local_lr={HUGE}"], tmp_path, monkeypatch, capsys)
    assert "'training.local_lr'" in err


# Python reads no int of more than 4300 digits (a bare ValueError, not a TOMLDecodeError or
# JSONDecodeError), and its parsers recurse once per level of nesting (RecursionError).
DIGITS_5000 = "1" + "0" * 5000
UNCLOSED_LISTS = "[" * 3000
NESTED_OBJECTS = '{"a":' * 3000


@pytest.mark.parametrize(
    ("item", "key"),
    [
        (f"training.rounds={DIGITS_5000}", "'training.rounds'"),
        (f"seeds={UNCLOSED_LISTS}", "'seeds'"),
        (f"seeds={NESTED_OBJECTS}", "'seeds'"),
        (f"seeds={'[' * 3000}{']' * 3000}", "'seeds'"),
    ],
    ids=["5000 digits", "3000 unclosed lists", "3000 nested objects", "3000 nested lists"],
)
def test_set_value_beyond_the_parsers_limits_is_refused(
    item: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tiny.toml").write_text(CONFIG)
    assert key in _refused(["run", "tiny.toml", "-q", "--set", item], tmp_path, monkeypatch, capsys)


def test_param_value_nested_beyond_the_parsers_limits_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["stats", "--sizes", "5,3", "-m", "1", "--samplers", "osmd", "--param", f"osmd.eta={UNCLOSED_LISTS}"]
    assert "'eta'" in _refused(argv, tmp_path, monkeypatch, capsys)


def test_config_with_an_int_of_5000_digits_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.toml").write_text(CONFIG.replace("rounds = 3", f"rounds = {DIGITS_5000}"))
    assert "'bad.toml' is not valid TOML" in _refused(["run", "bad.toml", "-q"], tmp_path, monkeypatch, capsys)


def test_sampler_state_with_an_int_of_5000_digits_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "state.json").write_text(f'{{"sampler": "md", "version": {DIGITS_5000}}}')
    err = _refused(["stats", "--sampler-state", "state.json"], tmp_path, monkeypatch, capsys)
    assert "'sampler_state'" in err
    assert "4300 digits" in err


def _run_dir(tmp_path: Path) -> Path:
    """A run directory of one sampler and one seed, as far as plot and report read it (metrics and config)."""
    history = History(
        label="md",
        sampler="md",
        seed=0,
        eval_rounds=np.array([0, 2]),
        train_loss=np.array([1.0, 0.5]),
        test_loss=np.array([1.1, 0.6]),
        test_accuracy=np.full(2, np.nan),
        distinct_clients=np.array([3, 4]),
        distinct_labels=np.full(2, -1),
        weight_sum=np.ones(2),
        round_seconds=np.full(2, 0.01),
        local_lr=np.full(2, 0.05),
    )
    directory = tmp_path / "run"
    write_metrics(metrics_table([history]), directory)
    (directory / "config.toml").write_text('name = "tiny"\n')
    return directory


RUN_DIR_FILES = {
    "config nested": ("config.toml", f"x = {'[' * 3000}{']' * 3000}\n"),
    "config 5000 digits": ("config.toml", f"x = {DIGITS_5000}\n"),
    "runs nested": ("runs.json", f"{'[' * 3000}{']' * 3000}"),
    "runs 5000 digits": ("runs.json", f'{{"runs": [{{"seed": {DIGITS_5000}}}]}}'),
    "bias nested": ("bias.json", f"{'[' * 3000}{']' * 3000}"),
}
# plot reads the metrics and config.toml only; report reads every file above.
RUN_DIR_CASES = [("report", case) for case in RUN_DIR_FILES] + [
    ("plot", "config nested"),
    ("plot", "config 5000 digits"),
]


@pytest.mark.parametrize(("command", "case"), RUN_DIR_CASES)
def test_run_directory_file_beyond_the_parsers_limits_is_refused(
    command: str, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name, content = RUN_DIR_FILES[case]
    (_run_dir(tmp_path) / name).write_text(content)
    assert f"'run/{name}'" in _refused([command, "run"], tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("content", ['{"samplers": [1]}', '{"samplers": [{"label": "md", "max_z": "x"}]}'])
def test_report_with_a_bias_file_of_junk_rows_says_so(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row that is not an object (AttributeError) or a max_z that is not a number (TypeError) once crashed report."""
    directory = _run_dir(tmp_path)
    (directory / "bias.json").write_text(content)
    code, out, err = run_cli(["report", str(directory)], capsys)
    assert (code, err, out.strip()) == (0, "", str(directory / "report.md")), err
    bias = (directory / "report.md").read_text().split("## Bias", 1)[1].split("## Reproduce")[0]
    assert "does not hold a measured bias" in bias or "| md |  | no |  |  |  |  | no |" in bias


class _FifoUnblocker:
    """Opens ``fifo`` for writing once, ``delay`` seconds from now, and closes it: a reader that
    waits in ``open`` for a writer (the old behaviour) is released then instead of hanging the suite."""

    def __init__(self, fifo: Path, delay: float) -> None:
        self._timer = threading.Timer(delay, self._release, args=(fifo,))
        self._timer.start()

    @staticmethod
    def _release(fifo: Path) -> None:
        with contextlib.suppress(OSError):  # ENXIO: no reader waits (the command is long done)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    def cancel(self) -> None:
        self._timer.cancel()


FIFO_CASES = {
    "stats --sizes-file": (["stats", "--sizes-file", "pipe", "-m", "1"], "'--sizes-file'"),
    "sample --sizes-file": (["sample", "md", "--sizes-file", "pipe", "-m", "1"], "'--sizes-file'"),
    "stats --sampler-state": (["stats", "--sampler-state", "pipe"], "'sampler_state'"),
    "stats --availability-trace": (
        ["stats", "--sizes", "5,3", "-m", "1", "--availability-trace", "pipe"],
        "'--availability-trace'",
    ),
    "run config": (["run", "pipe.toml", "-q"], "pipe.toml"),
    "run [system] trace": (["run", "tiny.toml", "-q", "--set", "system.trace=pipe"], "'system.trace'"),
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX feature")
@pytest.mark.parametrize("case", list(FIFO_CASES))
def test_named_pipe_without_a_writer_is_refused_at_once(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """open() on a FIFO waits for a writer: each of these commands once hung for ever."""
    argv, parameter = FIFO_CASES[case]
    fifo = tmp_path / ("pipe.toml" if case == "run config" else "pipe")
    os.mkfifo(fifo)
    (tmp_path / "tiny.toml").write_text(CONFIG)
    unblocker = _FifoUnblocker(fifo, delay=5.0)
    try:
        start = time.perf_counter()
        err = _refused(argv, tmp_path, monkeypatch, capsys)
        assert time.perf_counter() - start < 4.0, "the command waited for a writer"
    finally:
        unblocker.cancel()
    assert parameter in err


def test_config_beyond_the_size_bound_is_refused_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading stops at the bound, so a link to /dev/zero is refused at once (the bound is lowered here)."""
    assert MAX_CONFIG_BYTES >= 2**20
    monkeypatch.setattr("fedsample.experiments.config.reading.MAX_CONFIG_BYTES", 100)
    (tmp_path / "big.toml").write_text(CONFIG)
    assert "at most 100 bytes" in _refused(["run", "big.toml", "-q"], tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize("column", ["round", "seed", "distinct_clients"])
@pytest.mark.parametrize("value", ["9223372036854775808", DIGITS_5000])
def test_metrics_csv_integer_beyond_int64_is_refused(
    command: str,
    column: str,
    value: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """np.array(..., dtype=int64) of 2**63 raised OverflowError; int() of 5000 digits, ValueError."""
    directory = _run_dir(tmp_path)
    (directory / "metrics.parquet").unlink(missing_ok=True)
    header, first, *rest = (directory / "metrics.csv").read_text().splitlines()
    cells = first.split(",")
    cells[header.split(",").index(column)] = value
    (directory / "metrics.csv").write_text("\n".join([header, ",".join(cells), *rest]) + "\n")
    err = _refused([command, "run"], tmp_path, monkeypatch, capsys)
    assert f"in the column {column!r}" in err


@pytest.mark.parametrize("command", [["stats"], ["sample", "md"]])
def test_size_of_5000_digits_is_refused(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """int() refuses 4300 digits or more: --sizes and a --sizes-file's error path once gave a ValueError traceback."""
    err = _refused([*command, "--sizes", f"{DIGITS_5000},2", "-m", "1"], tmp_path, monkeypatch, capsys)
    assert "'--sizes'" in err
    # A valid line with 6000 leading zeros before a bad line: the error names the bad line.
    (tmp_path / "sizes.txt").write_text("0" * 6000 + "1\n-3\n")
    err = _refused([*command, "--sizes-file", "sizes.txt", "-m", "1"], tmp_path, monkeypatch, capsys)
    assert "'-3' on line 2" in err
    (tmp_path / "sizes.txt").write_text("1" * 6000 + "\n")
    err = _refused([*command, "--sizes-file", "sizes.txt", "-m", "1"], tmp_path, monkeypatch, capsys)
    assert "on line 1" in err


def test_sampler_label_beyond_100_characters_is_refused_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 300-character label trained, then failed writing states/LABEL-seed0.json (name too long), leaving runs/."""
    (tmp_path / "bad.toml").write_text(CONFIG.replace('name = "md"', f'name = "md"\nlabel = "{"a" * 300}"'))
    err = _refused(["run", "bad.toml", "-q"], tmp_path, monkeypatch, capsys)
    assert "'samplers[0].label'" in err
    assert "at most 100 characters" in err


def test_availability_trace_line_is_read_up_to_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file without line breaks (/dev/zero) was read whole into one line; reading now stops at the bound."""
    (tmp_path / "trace.csv").write_text("client,start,end\n" + "1" * 600_000 + "\n")
    argv = ["stats", "--sizes", "5,3", "-m", "1", "--availability-trace", "trace.csv"]
    assert "a line longer than 524288 characters" in _refused(argv, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize(
    ("flags", "key"),
    [
        (["--lr", "1e39"], "'training.local_lr'"),
        (["--set", "server.lr=1e300"], "'server.lr'"),
        (["--algorithm", "fedprox", "--mu", "1e300"], "'algorithm.mu'"),
        (["--server", "fedadam", "--server-param", "tau=1e39"], "'server.tau'"),
    ],
)
def test_step_size_beyond_float32_is_refused_before_training(
    flags: list[str],
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """PyTorch refused these scalars mid-training (RuntimeError: value cannot be converted to type float without
    overflow), after the run directory was made."""
    (tmp_path / "tiny.toml").write_text(CONFIG)
    err = _refused(["run", "tiny.toml", "-q", *flags], tmp_path, monkeypatch, capsys)
    assert key in err
    assert "3.4028234663852886e+38]" in err


@pytest.mark.parametrize("version", [2, "1", True, 10**30])
def test_sampler_state_of_another_version_is_refused(
    version: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The version field was never read: a file claiming version 2 was decoded as version 1."""
    sampler = make_sampler("md")
    data = sampler_to_dict(sampler, sampler.init(Federation.from_sizes([5, 1, 3]), 2))
    data["version"] = version
    (tmp_path / "state.json").write_text(json.dumps(data))
    err = _refused(["stats", "--sampler-state", "state.json"], tmp_path, monkeypatch, capsys)
    assert "'sampler_state'" in err
    assert "of version 1" in err


def test_labels_with_the_same_file_name_keep_their_own_state_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Labels "a b" and "a_b" both made states/a_b-seed0.json: the second run's state overwrote the first's."""
    tables = '[[samplers]]\nname = "md"\nlabel = "a b"\n\n[[samplers]]\nname = "uniform"\nlabel = "a_b"\n'
    (tmp_path / "two.toml").write_text(digits_config(seeds=1, rounds=1, tables=tables))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["run", "two.toml", "-q", "--out", "out"], capsys)
    assert code == 0, err
    runs = json.loads((tmp_path / "out" / "runs.json").read_text())["runs"]
    files = {run["label"]: run["state"] for run in runs}
    assert files == {"a b": "states/a_b-seed0.json", "a_b": "states/a_b-2-seed0.json"}
    for run in runs:
        saved = json.loads((tmp_path / "out" / run["state"]).read_text())
        assert saved["sampler"] == run["sampler"]


def test_a_file_in_place_of_the_plots_folder_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run directory whose plots/ is a file: report raised FileExistsError from the folder's mkdir."""
    (tmp_path / "c.toml").write_text(digits_config(seeds=1, rounds=1))
    monkeypatch.chdir(tmp_path)
    assert run_cli(["run", "c.toml", "-q", "--out", "out"], capsys)[0] == 0
    for entry in (tmp_path / "out" / "plots").iterdir():
        entry.unlink()
    (tmp_path / "out" / "plots").rmdir()
    (tmp_path / "out" / "plots").write_text("not a folder\n")
    code, out, err = run_cli(["report", "out"], capsys)
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "where fedsample can write 'plots' as a folder" in err, err
    assert "is not a folder" in err, err


def test_an_out_directory_that_cannot_be_created_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out in /proc (where no folder can be made) raised FileNotFoundError from the mkdir."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc")
    (tmp_path / "c.toml").write_text(digits_config(seeds=1, rounds=1))
    err = _refused(["run", "c.toml", "-q", "--out", "/proc/fedsample-test/out"], tmp_path, monkeypatch, capsys)
    assert "The '--out' parameter must be a directory that can be created. Got '/proc/fedsample-test/out'" in err


def test_resume_over_a_damaged_runs_file_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runs.json nested thousands deep made --resume fail with a RecursionError traceback."""
    (tmp_path / "c.toml").write_text(digits_config(seeds=1, rounds=1))
    monkeypatch.chdir(tmp_path)
    assert run_cli(["run", "c.toml", "-q", "--out", "out"], capsys)[0] == 0
    metrics = (tmp_path / "out" / "metrics.csv").read_text()
    (tmp_path / "out" / "runs.json").write_text("[" * 3000 + "]" * 3000)
    code, _, err = run_cli(["run", "c.toml", "-q", "--out", "out", "--resume"], capsys)
    assert (code, err) == (0, "")
    assert json.loads((tmp_path / "out" / "runs.json").read_text())["complete"] is True
    assert (tmp_path / "out" / "metrics.csv").read_text().count("\n") == metrics.count("\n")


def test_a_cuda_device_this_machine_lacks_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """training.device = "cuda" without a GPU: the engine refused it after runs/NAME held config.toml."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (tmp_path / "c.toml").write_text(digits_config(seeds=1, rounds=1))
    err = _refused(["run", "c.toml", "-q", "--set", "training.device=cuda"], tmp_path, monkeypatch, capsys)
    assert "The 'training.device' parameter must name a device this machine has. Got 'cuda'" in err


def test_a_dangling_link_as_out_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link to nothing as --out was refused as "an existing file"."""
    (tmp_path / "c.toml").write_text(digits_config(seeds=1, rounds=1))
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    err = _refused(["run", "c.toml", "-q", "--out", "out"], tmp_path, monkeypatch, capsys)
    assert "Got 'out', which is a link to nothing, instead." in err


def _npz_bytes(**arrays: object) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


_X = np.arange(24.0).reshape(8, 3)
_Y = np.array([0, 1, 2, 0, 1, 2, 0, 1])
_NAN = _X.copy()
_NAN[5, 2] = np.nan
# (the data file's name and bytes, extra flags, the key the error names, a fragment of it)
BAD_DATA_FILES = {
    "missing": (("none.npz", None), [], "'federation.dataset'", "file not found"),
    "not a zip": (("bad.npz", b"garbage"), [], "'federation.dataset'", "not a readable NPZ archive"),
    "different lengths": (("len.npz", _npz_bytes(x=_X, y=_Y[:5])), [], "'federation.dataset'", "different lengths"),
    "2-D target": (("y2.npz", _npz_bytes(x=_X, y=_X)), [], "'federation.dataset'", "target column 'y' is not 1-D"),
    "NaN feature": (("nan.npz", _npz_bytes(x=_NAN, y=_Y)), [], "'federation.dataset'", "non-finite value at row 5"),
    "object member": (
        ("obj.npz", _npz_bytes(x=np.array([{"a": 1}] * 8, dtype=object), y=_Y)),
        [],
        "'federation.dataset'",
        "member 'x' holds Python objects, never unpickled",
    ),
    "test rows of another shape": (
        ("shape.npz", _npz_bytes(x_train=_X, y_train=_Y, x_test=_X[:, :2], y_test=_Y)),
        [],
        "'federation.dataset'",
        "the test rows have features of shape (2,)",
    ),
    "string feature": (
        ("text.npz", _npz_bytes(x=np.array(["a"] * 8), f=_Y * 1.0, y=_Y)),
        ["--set", 'federation.feature_columns=["x"]'],
        "'federation.dataset'",
        "feature column 'x' is not numeric",
    ),
    "unknown target column": (
        ("ok.npz", _npz_bytes(x=_X, y=_Y)),
        ["--set", "federation.target_column=label"],
        "'federation.target_column'",
        "no target column 'label' (columns: x, y)",
    ),
    "natural without a client column": (
        ("ok.npz", _npz_bytes(x=_X, y=_Y)),
        ["--partition", "natural"],
        "'federation.partition'",
        "no client column 'client'",
    ),
    "too small for the clients": (
        ("ok.npz", _npz_bytes(x=_X, y=_Y)),
        ["--num-clients", "30"],
        "'federation.num_clients'",
        "at most",
    ),
    "regression on text targets": (
        ("words.csv", b"f,y\n1,cat\n2,dog\n"),
        ["--set", "federation.task=regression"],
        "'federation.dataset'",
        "target column 'y' is not numeric",
    ),
}


@pytest.mark.parametrize("case", list(BAD_DATA_FILES))
def test_a_bad_data_file_is_refused_in_one_line_before_anything_is_written(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data file as the federation (--dataset FILE) was refused as "one of 9 names"; now each fault of the
    file is one line naming the key, and nothing is written under runs/."""
    (name, content), flags, key, fragment = BAD_DATA_FILES[case]
    if content is not None:
        (tmp_path / name).write_bytes(content)
    err = _refused(["run", "--dataset", name, "--sampler", "md", "-q", *flags], tmp_path, monkeypatch, capsys)
    assert key in err
    assert fragment in err
