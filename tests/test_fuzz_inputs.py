"""A table-driven fuzz suite over every command and input channel (issue 11 item 8).

Every command-line case runs ``fedsample.cli.main`` in-process, with the test's tmp dir as the
working directory (so defaults such as ``runs/NAME`` would land there), and must give exit
status 2, nothing on stdout, exactly one line on stderr, no "Traceback", and leave every path
and byte under the tmp dir as it was. ``fedsample run`` cases are refused before training: the
run validates everything before its first byte, so no case trains a model. Every Python-API
case must raise a FedsampleError (a ValueError) whose message is one line.

Cases are generated where that is natural (each integer flag of each command times a list of bad
integers); each case's id says what it feeds to which channel.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import digits_config, run_cli, snapshot
from fedsample import Federation, FedsampleError
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.data.loaders import load_cifar10, load_idx_dataset, load_leaf, load_table, read_idx
from fedsample.participation.availability import load_availability_trace
from fedsample.samplers import make_sampler
from fedsample.samplers.persistence import load_sampler, sampler_to_dict
from fedsample.serialization import read_json_file

# --- files the cases start from -------------------------------------------------------------------

CONFIG = digits_config()


def _saved_state(name: str = "md") -> dict[str, Any]:
    sampler = make_sampler(name)
    state = sampler.init(Federation.from_sizes([5, 1, 3, 8, 2, 6]), 3)
    data: dict[str, Any] = json.loads(json.dumps(sampler_to_dict(sampler, state)))
    return data


def _state_bytes(tamper: Callable[[dict[str, Any]], None]) -> bytes:
    data = _saved_state()
    tamper(data)
    return json.dumps(data).encode()


def _design(data: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = data["state"]["fields"]["design"]["fields"]
    return fields


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return tamper


def _scale_probabilities(factor: float) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        values = _design(data)["probabilities"]["data"]
        values[:] = [v * factor for v in values]

    return tamper


def _probability(position: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        _design(data)["probabilities"]["data"][position] = value

    return tamper


def _metrics_csv() -> bytes:
    return b"sampler,seed,round,train_loss\nmd,0,0,1.0\n"


def _npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


# --- command-line cases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CliCase:
    """A command line, and the files (relative to the tmp dir) that exist before it runs."""

    argv: tuple[str, ...]
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()


CLI_CASES: dict[str, CliCase] = {}


def _add(case_id: str, argv: list[str], files: dict[str, bytes] | None = None, dirs: tuple[str, ...] = ()) -> None:
    assert case_id not in CLI_CASES, case_id
    CLI_CASES[case_id] = CliCase(tuple(argv), dict(files or {}), dirs)


# Integer flags: text that is not an ASCII integer, then values out of each flag's range.
NOT_INTEGERS = {
    "empty": "",
    "word": "ten",
    "decimal": "1.5",
    "exponent": "1e3",
    "hex": "0x10",
    "underscore": "1_000",
    "arabic-indic digits": "\u0661\u0662",
    "fullwidth digits": "\uff11\uff12",
    "blank": " ",
    "nan": "nan",
}
HUGE_INT = "1" + "0" * 40  # beyond int64
RUN_BASE = ["run", "tiny.toml", "-q"]
RUN_FILES = {"tiny.toml": CONFIG.encode()}
STATS_BASE = ["stats", "--sizes", "5,1,3,8,2,6", "-m", "2"]
SAMPLE_BASE = ["sample", "md", "--sizes", "5,1,3,8,2,6", "-m", "2"]

# (command base, files, flag, values out of range)
INT_FLAGS: list[tuple[str, list[str], dict[str, bytes], str, list[str]]] = [
    ("run", RUN_BASE, RUN_FILES, "--seed", ["-1"]),
    ("run", RUN_BASE, RUN_FILES, "--seeds", ["0", "-3", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--num-clients", ["0", "-1", "100000", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--hidden", ["0", "-4", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--rounds", ["0", "-1", "1000000000", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "-m", ["0", "-1", "11", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--local-steps", ["0", "-2", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--batch-size", ["0", "-5", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--eval-every", ["0", "-1", HUGE_INT]),
    ("run", RUN_BASE, RUN_FILES, "--checkpoint-every", ["-1", HUGE_INT]),
    ("stats", STATS_BASE, {}, "-m", ["0", "-1", HUGE_INT]),
    ("stats", STATS_BASE, {}, "--monte-carlo", ["-1", HUGE_INT]),
    ("stats", STATS_BASE, {}, "--seed", ["-1"]),
    ("stats", STATS_BASE, {}, "--redraws", ["-1", HUGE_INT]),
    ("sample", SAMPLE_BASE, {}, "-m", ["0", "-2", HUGE_INT]),
    ("sample", SAMPLE_BASE, {}, "--rounds", ["0", "-1", HUGE_INT]),
    ("sample", SAMPLE_BASE, {}, "--seed", ["-1"]),
]
for command, base, files, flag, out_of_range in INT_FLAGS:
    for label, text in NOT_INTEGERS.items():
        _add(f"{command} {flag} {label}", [*base, f"{flag}={text}"], files)
    for text in out_of_range:
        label = "10^40" if text == HUGE_INT else text
        _add(f"{command} {flag} {label}", [*base, f"{flag}={text}"], files)

# Float flags: not numbers, non-finite, and out of range.
NOT_FLOATS = {"empty": "", "word": "fast", "nan": "nan", "inf": "inf", "-inf": "-inf", "1e400": "1e400"}
FLOAT_FLAGS: list[tuple[str, list[str], dict[str, bytes], str, list[str]]] = [
    ("run", RUN_BASE, RUN_FILES, "--alpha", ["0", "-1"]),
    ("run", RUN_BASE, RUN_FILES, "--lr", ["0", "-0.1"]),
    ("run", RUN_BASE, RUN_FILES, "--lr-decay", ["0", "-1"]),
    ("run", RUN_BASE, RUN_FILES, "--server-lr", ["0", "-1"]),
    ("run", RUN_BASE, RUN_FILES, "--mu", ["-1"]),
    ("stats", STATS_BASE, {}, "--availability", ["0", "-0.5", "1.5"]),
    ("stats", STATS_BASE, {}, "--dropout", ["1", "-0.1", "2"]),
    ("stats", STATS_BASE, {}, "--over-selection", ["-1"]),
]
for command, base, files, flag, out_of_range in FLOAT_FLAGS:
    for label, text in NOT_FLOATS.items():
        _add(f"{command} {flag} {label}", [*base, f"{flag}={text}"], files)
    for text in out_of_range:
        _add(f"{command} {flag} {text}", [*base, f"{flag}={text}"], files)

# Size lists, on both commands that take them.
BAD_SIZES = {
    "empty": "",
    "zero": "0,3",
    "negative": "-5,3",
    "double comma": "1,,2",
    "decimal": "1.5,2",
    "words": "a,b",
    "arabic-indic": "\u0661,\u0662",
    "exponent": "1e3,2",
    "beyond int64": f"{HUGE_INT},2",
    "trailing comma": "4,5,",
    "spaces only": " , ",
}
for label, text in BAD_SIZES.items():
    _add(f"stats --sizes {label}", ["stats", f"--sizes={text}", "-m", "1"])
    _add(f"sample --sizes {label}", ["sample", "md", f"--sizes={text}", "-m", "1"])

# Sizes files.
BAD_SIZES_FILES = {
    "empty": b"",
    "comments only": b"# nothing\n# here\n",
    "binary": b"\x00\xff\xfe\x81\n",
    "non-UTF-8": b"3\n\xe9\n",
    "negative": b"3\n-2\n",
    "zero": b"0\n4\n",
    "decimal": b"3\n2.5\n",
    "beyond int64": HUGE_INT.encode() + b"\n",
    "a word": b"3\nfour\n",
    "arabic-indic": "\u0663\n".encode(),
}
for label, content in BAD_SIZES_FILES.items():
    _add(f"stats --sizes-file {label}", ["stats", "--sizes-file", "sizes.txt", "-m", "1"], {"sizes.txt": content})
    _add(
        f"sample --sizes-file {label}",
        ["sample", "md", "--sizes-file", "sizes.txt", "-m", "1"],
        {"sizes.txt": content},
    )
_add("stats --sizes-file missing", ["stats", "--sizes-file", "nowhere.txt", "-m", "1"])
_add("stats --sizes-file a directory", ["stats", "--sizes-file", "folder", "-m", "1"], dirs=("folder",))
_add("stats --sizes and --sizes-file", ["stats", "--sizes", "1,2", "--sizes-file", "s.txt"], {"s.txt": b"1\n"})
for name in ("nosuch", "UNBALANCED", "unbalanced,"):
    _add(f"stats --federation {name!r}", ["stats", f"--federation={name}", "-m", "1"])
    _add(f"sample --federation {name!r}", ["sample", "md", f"--federation={name}", "-m", "1"])

# Sampler names and --param, on stats, sample and run.
BAD_SAMPLERS = {"unknown": "nosuch", "empty": "", "comma only": ",", "unknown among known": "md,nosuch"}
for label, text in BAD_SAMPLERS.items():
    _add(f"stats --samplers {label}", [*STATS_BASE, f"--samplers={text}"])
for name in ("nosuch", "", "MD"):
    _add(f"sample sampler {name!r}", ["sample", name, "--sizes", "5,1,3", "-m", "1"])
    _add(f"run --sampler {name!r}", [*RUN_BASE, f"--sampler={name}"], RUN_FILES)
BAD_PARAMS = {
    "no equals": "md",
    "no sampler": "=3",
    "no name": "md.=3",
    "unknown sampler": "nosuch.k=1",
    "unknown parameter": "md.nosuch=1",
    "bad value": "clustered-size.num_clusters=abc",
    "nan value": "osmd.learning_rate=nan",
    "unsampled sampler": "poisson.x=1",
}
for label, text in BAD_PARAMS.items():
    _add(f"stats --param {label}", [*STATS_BASE, "--samplers", "md,osmd,clustered-size", f"--param={text}"])
    _add(f"sample --param {label}", [*SAMPLE_BASE, f"--param={text}"])
    _add(f"run --param {label}", [*RUN_BASE, f"--param={text}"], RUN_FILES)

# --set KEY=VALUE on run.
BAD_SETS = {
    "no equals": "training.rounds",
    "no key": "=5",
    "unknown section": "nosuch.key=1",
    "unknown key": "training.nosuch=1",
    "word for int": "training.rounds=abc",
    "negative rounds": "training.rounds=-5",
    "rounds 1e400": "training.rounds=1e400",
    "rounds beyond int64": f"training.rounds={HUGE_INT}",
    "local_lr nan": "training.local_lr=nan",
    "local_lr inf": "training.local_lr=inf",
    "section as value": "federation=3",
    "list for int": "training.rounds=[1,2]",
    "bad dataset": "federation.dataset=nosuch",
    "bad partition": "federation.partition=nosuch",
    "alpha zero": "federation.alpha=0",
    "bad device": "training.device=quantum",
    "bad backend": "training.backend=gpu",
    "bad importance": "training.importance=heavy",
    "seeds zero": "seeds=0",
    "checkpoint_every negative": "run.checkpoint_every=-1",
}
for label, text in BAD_SETS.items():
    _add(f"run --set {label}", [*RUN_BASE, f"--set={text}"], RUN_FILES)
for flag, value in (("--algorithm-param", "nosuch=1"), ("--algorithm-param", "mu"), ("--server-param", "lr=nan")):
    _add(f"run {flag} {value}", [*RUN_BASE, f"{flag}={value}"], RUN_FILES)
for flag, value in (("--partition", "nosuch"), ("--model", "nosuch"), ("--algorithm", "nosuch"), ("--server", "x")):
    _add(f"run {flag} {value}", [*RUN_BASE, f"{flag}={value}"], RUN_FILES)
_add("run --device quantum", [*RUN_BASE, "--device", "quantum"], RUN_FILES)
_add("run --server adam lr inf", [*RUN_BASE, "--server", "adam", "--server-param", "lr=inf"], RUN_FILES)
_add("run --data-dir missing", ["run", "clustered-mnist-shards", "--full", "--data-dir", "nowhere", "-q"])
_add("run --full without --data-dir", ["run", "clustered-mnist-shards", "--full", "-q"])
_add("run unknown preset", ["run", "no-such-preset", "-q"])
_add("run --resume of nothing", ["run", "--resume", "nowhere", "-q"])
_add("run --resume and --overwrite", [*RUN_BASE, "--resume", "--overwrite"], RUN_FILES)
_add("run -o an existing file", [*RUN_BASE, "-o", "taken"], {**RUN_FILES, "taken": b"mine"})
_add("run -o a user's folder", [*RUN_BASE, "-o", "mine"], {**RUN_FILES, "mine/notes.txt": b"notes"})
_add("run --resume a user's folder", ["run", "--resume", "mine", "-q"], {"mine/notes.txt": b"notes"})

# TOML config files: whole files, then CONFIG with one line changed (label -> the line, what it becomes).
TOML_CASES: dict[str, bytes] = {
    "empty": b"",
    "syntax error": b"name = \n",
    "non-UTF-8": b'name = "t\xe9\xff"\n',
    "binary": bytes(range(256)),
    "unknown top-level key": (CONFIG + "\ncolour = 3\n").encode(),
    "unknown section": (CONFIG + "\n[nosuch]\nx = 1\n").encode(),
    "no samplers": CONFIG.split("[[samplers]]")[0].encode(),
    "samplers as a table": CONFIG.split("[[samplers]]")[0].encode() + b"[samplers]\nname = 'md'\n",
    "deeply nested array": b"name = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deeply nested table": b"x = " + b"{a = " * 2000 + b"1" + b"}" * 2000 + b"\n",
    "availability two": (CONFIG + "\n[participation]\navailability = 2.0\n").encode(),
    "availability trace missing": (CONFIG + '\n[participation]\navailability_trace = "none.csv"\n').encode(),
    "algorithm unknown": (CONFIG + '\n[algorithm]\nname = "nosuch"\n').encode(),
    "server lr negative": (CONFIG + '\n[server]\nname = "sgd"\nparams = { lr = -1.0 }\n').encode(),
    "rolling window zero": (CONFIG + "\n[report]\nrolling_window = 0\n").encode(),
    "checkpoint_every negative": (CONFIG + "\n[run]\ncheckpoint_every = -1\n").encode(),
}
CONFIG_EDITS: dict[str, tuple[str, str]] = {
    "unknown training key": ("rounds = 3", "rounds = 3\nspeed = 2"),
    "rounds as text": ("rounds = 3", 'rounds = "3"'),
    "rounds as float": ("rounds = 3", "rounds = 3.0"),
    "rounds as bool": ("rounds = 3", "rounds = true"),
    "rounds zero": ("rounds = 3", "rounds = 0"),
    "rounds int64 max": ("rounds = 3", "rounds = 9223372036854775807"),
    "rounds beyond int64": ("rounds = 3", f"rounds = {HUGE_INT}"),
    "num_sampled negative": ("num_sampled = 3", "num_sampled = -3"),
    "num_sampled beyond clients": ("num_sampled = 3", "num_sampled = 11"),
    "local_lr inf": ("local_lr = 0.1", "local_lr = inf"),
    "local_lr nan": ("local_lr = 0.1", "local_lr = nan"),
    "alpha nan": ("alpha = 0.5", "alpha = nan"),
    "alpha negative": ("alpha = 0.5", "alpha = -0.5"),
    "dataset unknown": ('"digits"', '"nosuch"'),
    "num_clients huge": ("num_clients = 10", f"num_clients = {HUGE_INT}"),
    "hidden zero": ("hidden = 16", "hidden = 0"),
    "model kind unknown": ('kind = "mlp"', 'kind = "transformer"'),
    "seeds zero": ("seeds = 2", "seeds = 0"),
    "seeds negative list": ("seeds = 2", "seeds = [-1]"),
    "name with a slash": ('name = "tiny"', 'name = "../escape"'),
    "name empty": ('name = "tiny"', 'name = ""'),
    "sampler unknown": ('name = "md"', 'name = "nosuch"'),
    "sampler param unknown": ('name = "md"', 'name = "md"\nparams = { nosuch = 1 }'),
    "section as a value": ("[model]", "model = 3\n[model_]"),
}
TOML_CASES.update({label: CONFIG.replace(line, changed).encode() for label, (line, changed) in CONFIG_EDITS.items()})
for label, content in TOML_CASES.items():
    _add(f"run config {label}", ["run", "bad.toml", "-q"], {"bad.toml": content})
_add("run config missing", ["run", "nowhere.toml", "-q"])
_add("run config a directory", ["run", "folder.toml", "-q"], dirs=("folder.toml",))

# Data files as the federation (run --dataset FILE), and the keys that describe them.
DATA_X = np.arange(24.0).reshape(8, 3)
DATA_Y = np.array([0, 1, 2, 0, 1, 2, 0, 1])
DATA_FILE_CASES: dict[str, tuple[str, bytes, list[str]]] = {
    "npz empty": ("d.npz", b"", []),
    "npz not a zip": ("d.npz", b"PK not really", []),
    "npz a .npy": ("d.npz", b"\x93NUMPY\x01\x00" + b"\x00" * 20, []),
    "npz truncated": ("d.npz", b"", []),
    "npz no target": ("d.npz", b"", ["--set", "federation.target_column=label"]),
    "npz ragged": ("d.npz", b"", []),
    "npz scalar member": ("d.npz", b"", []),
    "npz object member": ("d.npz", b"", []),
    "npz infinite feature": ("d.npz", b"", []),
    "npz test members of another shape": ("d.npz", b"", []),
    "npz test members and test_path": ("d.npz", b"", ["--set", "federation.test_path=other.npz"]),
    "npz natural without client column": ("d.npz", b"", ["--partition", "natural"]),
    "npz client column with dirichlet": ("d.npz", b"", ["--partition", "dirichlet"]),
    "npz too small": ("d.npz", b"", ["--num-clients", "9"]),
    "npz classification of reals": ("d.npz", b"", ["--set", "federation.task=classification"]),
    "csv empty": ("d.csv", b"", []),
    "csv header only": ("d.csv", b"x,y\n", []),
    "csv binary": ("d.csv", b"\xff\xfe\x00\x81\n", []),
    "csv text feature": ("d.csv", b"x,y\nabc,1\n", ["--set", 'federation.feature_columns=["x"]']),
    "csv unknown feature column": ("d.csv", b"x,y\n1,1\n", ["--set", 'federation.feature_columns=["z"]']),
    "csv test_path missing": ("d.csv", b"x,y\n1,1\n2,0\n", ["--set", "federation.test_path=none.csv"]),
    "csv test_path of another format": ("d.csv", b"x,y\n1,1\n", ["--set", "federation.test_path=t.npz"]),
    "parquet garbage": ("d.parquet", b"PAR1 garbage PAR1", []),
    "missing file": ("none.npz", b"", []),
    "a directory": ("folder.npz", b"", []),
}
_DATA_NPZ = {
    "npz truncated": _npz(x=DATA_X, y=DATA_Y)[:60],
    "npz no target": _npz(x=DATA_X, y=DATA_Y),
    "npz ragged": _npz(x=DATA_X, y=DATA_Y[:3]),
    "npz scalar member": _npz(x=DATA_X, y=DATA_Y, z=np.float64(1.0)),
    "npz object member": _npz(x=np.array([[None]] * 8, dtype=object), y=DATA_Y),
    "npz infinite feature": _npz(x=np.where(DATA_X == 7, np.inf, DATA_X), y=DATA_Y),
    "npz test members of another shape": _npz(x_train=DATA_X, y_train=DATA_Y, x_test=DATA_X[:, :1], y_test=DATA_Y),
    "npz test members and test_path": _npz(x_train=DATA_X, y_train=DATA_Y, x_test=DATA_X, y_test=DATA_Y),
    "npz natural without client column": _npz(x=DATA_X, y=DATA_Y),
    "npz client column with dirichlet": _npz(client=DATA_Y, x=DATA_X, y=DATA_Y),
    "npz too small": _npz(x=DATA_X, y=DATA_Y),
    "npz classification of reals": _npz(x=DATA_X, y=DATA_Y + 0.5),
}
for label, (name, content, flags) in DATA_FILE_CASES.items():
    content = _DATA_NPZ.get(label, content)
    files = {} if label in ("missing file", "a directory") else {name: content}
    files |= {"other.npz": _npz(x=DATA_X, y=DATA_Y)} if "test_path" in label else {}
    _add(
        f"run --dataset {label}",
        ["run", "--dataset", name, "--sampler", "md", "-q", *flags],
        files,
        dirs=(name,) if label == "a directory" else (),
    )
for text in ("mine.npy", "mine", ".npz", "digits.txt", "DIGITS"):
    _add(f"run --dataset {text!r}", ["run", "--dataset", text, "-q"])
for key, value in (
    ("target_column", '""'),
    ("client_column", "3"),
    ("feature_columns", "[]"),
    ("feature_columns", '["a", "a"]'),
    ("task", "ranking"),
    ("test_path", "t.txt"),
):
    _add(f"run --set federation.{key}={value}", [*RUN_BASE, f"--set=federation.{key}={value}"], RUN_FILES)
_add("run --set federation.task with digits", [*RUN_BASE, "--set=federation.task=regression"], RUN_FILES)

# Sampler-state files for stats --sampler-state.
DEEP = b"[" * 200_000 + b"]" * 200_000
STATE_CASES: dict[str, bytes] = {
    "empty": b"",
    "binary": b"\x00\xff\xfe\x81" * 64,
    "non-UTF-8": b'{"sampler": "md\xe9"}',
    "not JSON": b"sampler = md\n",
    "a list": b"[1, 2, 3]",
    "a number": b"42",
    "nested 200000 deep": DEEP,
    "nested object": b'{"a":' * 5000 + b"1" + b"}" * 5000,
    "md relabelled uniform": _state_bytes(_set(("sampler",), "uniform")),
    "unknown sampler": _state_bytes(_set(("sampler",), "nosuch")),
    "no state": _state_bytes(lambda data: data.pop("state")),
    "probabilities sum 2.5": _state_bytes(_scale_probabilities(2.5)),
    "probabilities sum 0.5": _state_bytes(_scale_probabilities(0.5)),
    "a NaN probability": _state_bytes(_probability(0, float("nan"))),
    "a negative probability": _state_bytes(_probability(1, -0.2)),
    "a string probability": _state_bytes(_probability(0, "x")),
    "a nested probability": _state_bytes(_probability(0, [[0.1]])),
}
for label, content in STATE_CASES.items():
    _add(f"stats --sampler-state {label}", [*STATS_BASE, "--sampler-state", "state.json"], {"state.json": content})
_add("stats --sampler-state missing", [*STATS_BASE, "--sampler-state", "none.json"])
_add("stats --sampler-state a directory", [*STATS_BASE, "--sampler-state", "folder"], dirs=("folder",))

# Availability traces.
TRACE_CASES: dict[str, bytes] = {
    "empty": b"",
    "binary": b"client,start,end\n\xff\xfe\x00\x81\n",
    "client id 10^20": b"client,start,end\n100000000000000000000,0,3\n",
    "field over csv's limit": b"client,start,end\n" + b"1" * 140_000 + b",0,3\n",
    "wrong header": b"who,from,to\n0,0,3\n",
    "negative client": b"client,start,end\n-1,0,3\n",
    "negative start": b"client,start,end\n0,-4,3\n",
    "end before start": b"client,start,end\n0,5,3\n",
    "decimal round": b"client,start,end\n0,0.5,3\n",
    "two fields": b"client,start,end\n0,0\n",
    "client beyond federation": b"client,start,end\n99,0,3\n",
}
for label, content in TRACE_CASES.items():
    _add(
        f"stats --availability-trace {label}",
        [*STATS_BASE, "--availability-trace", "trace.csv"],
        {"trace.csv": content},
    )
_add("stats --availability-trace missing", [*STATS_BASE, "--availability-trace", "none.csv"])
_add("stats --policy unknown", [*STATS_BASE, "--dropout", "0.1", "--policy", "nosuch"])
_add("stats --return-rates unknown", [*STATS_BASE, "--dropout", "0.1", "--return-rates", "guessed"])

# report and plot directories.
RUN_DIR_CASES: dict[str, tuple[dict[str, bytes], tuple[str, ...]]] = {
    "missing": ({}, ()),
    "a file": ({"rd": b"not a directory"}, ()),
    "empty": ({}, ("rd",)),
    "metrics.csv empty": ({"rd/metrics.csv": b""}, ()),
    "metrics.csv binary": ({"rd/metrics.csv": b"\x00\xff\xfe\x81"}, ()),
    "metrics.csv wrong columns": ({"rd/metrics.csv": b"a,b\n1,2\n"}, ()),
    "metrics.csv bad number": ({"rd/metrics.csv": b"sampler,seed,round,train_loss\nmd,0,zero,1\n"}, ()),
    "metrics.parquet garbage": ({"rd/metrics.parquet": b"PAR1 not really"}, ()),
    "runs.json only": ({"rd/runs.json": b"{}"}, ()),
    "runs.json binary": ({"rd/runs.json": b"\xff\xfe", "rd/metrics.csv": _metrics_csv()}, ()),
}
for command in ("report", "plot"):
    for label, (files, dirs) in RUN_DIR_CASES.items():
        _add(f"{command} run dir {label}", [command, "rd"], files, dirs)
    _add(f"{command} without a directory", [command])
    _add(f"{command} two directories", [command, "a", "b"], dirs=("a", "b"))

# Anything else the parser refuses.
_add("presets with an argument", ["presets", "extra"])
_add("presets unknown flag", ["presets", "--bogus"])
_add("unknown command", ["nosuch"])
_add("unknown top-level flag", ["--bogus"])
_add("stats unknown flag", [*STATS_BASE, "--bogus"])
_add("sample without a sampler", ["sample"])
_add("stats --importance heavy", [*STATS_BASE, "--importance", "heavy"])


@pytest.mark.parametrize("case_id", list(CLI_CASES))
def test_bad_command_line_is_one_line_and_writes_nothing(
    case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CLI_CASES[case_id]
    for name in case.dirs:
        (tmp_path / name).mkdir(parents=True)
    for name, content in case.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run_cli(case.argv, capsys)
    assert "Traceback" not in err
    assert code == 2, err
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.endswith("\n")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case_id", [case for case in CLI_CASES if case.startswith("run --dataset")])
def test_a_data_file_on_the_command_line_is_refused_by_its_key(
    case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data file is a federation: its faults name a federation key, and a name that is neither a built-in
    data set nor a data file is refused with both choices (argparse's "invalid choice" before)."""
    case = CLI_CASES[case_id]
    for name in case.dirs:
        (tmp_path / name).mkdir(parents=True)
    for name, content in case.files.items():
        (tmp_path / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(case.argv, capsys)
    assert code == 2, err
    assert "'federation." in err or "or a path to a .npz, .csv, .parquet or .pq file" in err, err


# --- Python API: each loader's file format --------------------------------------------------------


def _idx(magic: bytes, dims: list[int], payload: bytes) -> bytes:
    return magic + b"".join(struct.pack(">I", d) for d in dims) + payload


def _zip(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(name, content)
    return buffer.getvalue()


def _npz_with_object_array() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, client=np.array([0, 1]), y=np.array([{"a": 1}, None], dtype=object))
    return buffer.getvalue()


def _leaf(users: dict[str, tuple[Any, Any]], num_samples: list[int] | None = None) -> bytes:
    return json.dumps(
        {
            "users": list(users),
            "num_samples": num_samples if num_samples is not None else [len(y) for _, y in users.values()],
            "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
        }
    ).encode()


IMAGES = _idx(b"\x00\x00\x08\x03", [2, 28, 28], bytes(2 * 784))
LABELS = _idx(b"\x00\x00\x08\x01", [2], bytes([1, 2]))
MNIST = {
    "train-images-idx3-ubyte": IMAGES,
    "train-labels-idx1-ubyte": LABELS,
    "t10k-images-idx3-ubyte": IMAGES,
    "t10k-labels-idx1-ubyte": LABELS,
}
CIFAR_RECORD = bytes([3]) + bytes(3072)
CIFAR = {f"data_batch_{k}.bin": CIFAR_RECORD for k in range(1, 6)} | {"test_batch.bin": CIFAR_RECORD}
SEQ = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suf"[:80]


@dataclass(frozen=True)
class ApiCase:
    """Files written under ``tmp_path/d``, then a call given that folder."""

    files: dict[str, bytes]
    call: Callable[[Path], object]


def _read_idx(name: str = "f") -> Callable[[Path], object]:
    return lambda d: read_idx(d / name)


def _table(name: str, **kwargs: Any) -> Callable[[Path], object]:
    return lambda d: load_table(d / name, client_column="client", target_column="y", **kwargs)


def _data_file(name: str, **kwargs: Any) -> Callable[[Path], object]:
    return lambda d: build_federation(FederationSpec(dataset=str(d / name), **kwargs))


def _json(name: str) -> Callable[[Path], object]:
    return lambda d: read_json_file(d / name, parameter="file", max_bytes=2**20)


def _state(name: str) -> Callable[[Path], object]:
    return lambda d: load_sampler(d / name)


def _femnist(d: Path) -> object:
    return load_leaf(d, kind="femnist")


def _shakespeare(d: Path) -> object:
    return load_leaf(d, kind="shakespeare")


API_CASES: dict[str, ApiCase] = {
    # IDX (read_idx and load_idx_dataset)
    "idx empty": ApiCase({"f": b""}, _read_idx()),
    "idx short header": ApiCase({"f": b"\x00\x00\x08"}, _read_idx()),
    "idx bad magic": ApiCase({"f": _idx(b"\x01\x02\x08\x01", [2], b"\x00\x00")}, _read_idx()),
    "idx unknown dtype code": ApiCase({"f": _idx(b"\x00\x00\x07\x01", [2], b"\x00\x00")}, _read_idx()),
    "idx truncated data": ApiCase({"f": _idx(b"\x00\x00\x08\x02", [4, 4], b"\x00" * 5)}, _read_idx()),
    "idx trailing bytes": ApiCase({"f": _idx(b"\x00\x00\x08\x01", [2], b"\x00" * 9)}, _read_idx()),
    "idx dimensions overflow int64": ApiCase({"f": _idx(b"\x00\x00\x08\x04", [2**32 - 1] * 4, b"")}, _read_idx()),
    "idx zero dimensions": ApiCase({"f": b"\x00\x00\x08\x00"}, _read_idx()),
    "idx missing dims": ApiCase({"f": b"\x00\x00\x08\x03\x00\x00\x00\x02"}, _read_idx()),
    "idx bad gzip": ApiCase({"f.gz": b"\x1f\x8bnot gzip"}, _read_idx("f.gz")),
    "idx gzip of garbage": ApiCase({"f.gz": gzip.compress(b"garbage")}, _read_idx("f.gz")),
    "idx missing file": ApiCase({}, _read_idx("nowhere")),
    "idx dataset missing directory": ApiCase({}, lambda d: load_idx_dataset(d / "nowhere")),
    "idx dataset a file": ApiCase({"x": b"1"}, lambda d: load_idx_dataset(d / "x")),
    "idx dataset empty folder": ApiCase({}, lambda d: load_idx_dataset(d)),
    "idx dataset unknown kind": ApiCase(MNIST, lambda d: load_idx_dataset(d, kind="nosuch")),
    "idx dataset label count mismatch": ApiCase(
        MNIST | {"train-labels-idx1-ubyte": _idx(b"\x00\x00\x08\x01", [3], bytes(3))}, load_idx_dataset
    ),
    "idx dataset labels as images": ApiCase(MNIST | {"train-labels-idx1-ubyte": IMAGES}, load_idx_dataset),
    "idx dataset images 1-D": ApiCase(MNIST | {"train-images-idx3-ubyte": LABELS}, load_idx_dataset),
    "idx dataset flatten not bool": ApiCase(MNIST, lambda d: load_idx_dataset(d, flatten="yes")),  # type: ignore[arg-type]
    # CIFAR-10 binaries
    "cifar missing directory": ApiCase({}, lambda d: load_cifar10(d / "nowhere")),
    "cifar empty folder": ApiCase({}, load_cifar10),
    "cifar empty batch": ApiCase(CIFAR | {"data_batch_3.bin": b""}, load_cifar10),
    "cifar truncated batch": ApiCase(CIFAR | {"data_batch_2.bin": CIFAR_RECORD[:-1]}, load_cifar10),
    "cifar label byte 10": ApiCase(CIFAR | {"test_batch.bin": bytes([10]) + bytes(3072)}, load_cifar10),
    "cifar label byte 255": ApiCase(CIFAR | {"data_batch_1.bin": bytes([255]) + bytes(3072)}, load_cifar10),
    "cifar missing test batch": ApiCase({k: v for k, v in CIFAR.items() if k != "test_batch.bin"}, load_cifar10),
    # LEAF JSON
    "leaf empty folder": ApiCase({}, _femnist),
    "leaf missing folder": ApiCase({}, lambda d: load_leaf(d / "nowhere", kind="femnist")),
    "leaf unknown kind": ApiCase({"a.json": _leaf({"u": ([[0.0] * 784], [1])})}, lambda d: load_leaf(d, kind="x")),
    "leaf not JSON": ApiCase({"a.json": b"users: [u]"}, _femnist),
    "leaf binary": ApiCase({"a.json": b"\xff\xfe\x00\x81"}, _femnist),
    "leaf a list": ApiCase({"a.json": b"[1, 2]"}, _femnist),
    "leaf nested 200000 deep": ApiCase({"a.json": DEEP}, _femnist),
    "leaf missing user_data": ApiCase({"a.json": b'{"users": ["u"], "num_samples": [1]}'}, _femnist),
    "leaf user without data": ApiCase(
        {"a.json": json.dumps({"users": ["u"], "num_samples": [1], "user_data": {}}).encode()}, _femnist
    ),
    "leaf x and y lengths differ": ApiCase({"a.json": _leaf({"u": ([[0.0] * 784], [1, 2])})}, _femnist),
    "leaf femnist short image": ApiCase({"a.json": _leaf({"u": ([[0.0] * 783], [1])})}, _femnist),
    "leaf femnist label 62": ApiCase({"a.json": _leaf({"u": ([[0.0] * 784], [62])})}, _femnist),
    "leaf femnist label negative": ApiCase({"a.json": _leaf({"u": ([[0.0] * 784], [-1])})}, _femnist),
    "leaf femnist pixel text": ApiCase({"a.json": _leaf({"u": ([["x"] * 784], [1])})}, _femnist),
    "leaf femnist pixel nan": ApiCase(
        {
            "a.json": b'{"users":["u"],"num_samples":[1],"user_data":{"u":'
            b'{"x":[[' + b",".join([b"NaN"] * 784) + b']],"y":[1]}}}'
        },
        _femnist,
    ),
    "leaf shakespeare short sequence": ApiCase({"a.json": _leaf({"u": ([SEQ[:10]], ["a"])})}, _shakespeare),
    "leaf shakespeare label two characters": ApiCase({"a.json": _leaf({"u": ([SEQ], ["ab"])})}, _shakespeare),
    "leaf shakespeare label a number": ApiCase({"a.json": _leaf({"u": ([SEQ], [3])})}, _shakespeare),
    "leaf test user not in train": ApiCase(
        {"train/a.json": _leaf({"u": ([SEQ], ["a"])}), "test/a.json": _leaf({"v": ([SEQ], ["a"])})},
        lambda d: load_leaf(d / "train", kind="shakespeare", test_directory=d / "test"),
    ),
    "leaf sequence_length zero": ApiCase(
        {"a.json": _leaf({"u": ([SEQ], ["a"])})}, lambda d: load_leaf(d, kind="shakespeare", sequence_length=0)
    ),
    # tables (.csv, .npz, .parquet)
    "table unknown extension": ApiCase({"t.xlsx": b"client,y\n0,1\n"}, _table("t.xlsx")),
    "table missing file": ApiCase({}, _table("none.csv")),
    "csv empty": ApiCase({"t.csv": b""}, _table("t.csv")),
    "csv header only": ApiCase({"t.csv": b"client,y\n"}, _table("t.csv")),
    "csv binary": ApiCase({"t.csv": b"\xff\xfe\x00\x81\n"}, _table("t.csv")),
    "csv missing target column": ApiCase({"t.csv": b"client,x\n0,1\n"}, _table("t.csv")),
    "csv ragged row": ApiCase({"t.csv": b"client,y,x\n0,1\n"}, _table("t.csv")),
    "csv class id 10^18": ApiCase({"t.csv": b"client,y,x\n0,1000000000000000000,1\n"}, _table("t.csv")),
    "csv negative class": ApiCase({"t.csv": b"client,y,x\n0,-1,1\n"}, _table("t.csv")),
    "csv decimal class": ApiCase({"t.csv": b"client,y,x\n0,1.5,1\n"}, _table("t.csv")),
    "csv nan feature": ApiCase({"t.csv": b"client,y,x\n0,1,nan\n"}, _table("t.csv")),
    "csv text feature": ApiCase({"t.csv": b"client,y,x\n0,1,abc\n"}, _table("t.csv")),
    "csv unknown feature column": ApiCase(
        {"t.csv": b"client,y,x\n0,1,2\n"}, _table("t.csv", feature_columns=["nosuch"])
    ),
    "csv field over csv's limit": ApiCase({"t.csv": b"client,y,x\n0,1," + b"1" * 140_000 + b"\n"}, _table("t.csv")),
    "csv unknown task": ApiCase({"t.csv": b"client,y,x\n0,1,2\n"}, _table("t.csv", task="ranking")),
    "csv num_classes zero": ApiCase({"t.csv": b"client,y,x\n0,1,2\n"}, _table("t.csv", num_classes=0)),
    "npz truncated": ApiCase({"t.npz": _npz(client=np.arange(3), y=np.arange(3))[:40]}, _table("t.npz")),
    "npz member not npy": ApiCase({"t.npz": _zip("client.txt", b"0,1,2")}, _table("t.npz")),
    "npz object array": ApiCase({"t.npz": _npz_with_object_array()}, _table("t.npz")),
    "npz 2-D column": ApiCase({"t.npz": _npz(client=np.zeros((2, 2)), y=np.zeros(2))}, _table("t.npz")),
    "npz columns of different lengths": ApiCase(
        {"t.npz": _npz(client=np.arange(3), y=np.arange(2), x=np.arange(3))}, _table("t.npz")
    ),
    "npz not a zip": ApiCase({"t.npz": b"not a zip at all"}, _table("t.npz")),
    "parquet garbage": ApiCase({"t.parquet": b"PAR1 garbage PAR1"}, _table("t.parquet")),
    "parquet empty": ApiCase({"t.parquet": b""}, _table("t.parquet")),
    # a data file as a federation (FederationSpec + build_federation)
    "data file missing": ApiCase({}, _data_file("none.npz")),
    "data file npz not a zip": ApiCase({"t.npz": b"not a zip"}, _data_file("t.npz")),
    "data file npz object member": ApiCase({"t.npz": _npz_with_object_array()}, _data_file("t.npz")),
    "data file npz 2-D target": ApiCase({"t.npz": _npz(x=np.zeros((2, 2)), y=np.zeros((2, 2)))}, _data_file("t.npz")),
    "data file npz 2-D client": ApiCase(
        {"t.npz": _npz(client=np.zeros((2, 2)), x=np.zeros(2), y=np.zeros(2))}, _data_file("t.npz")
    ),
    "data file npz nan client": ApiCase(
        {"t.npz": _npz(client=np.array([0.0, np.nan]), x=np.zeros(2), y=np.zeros(2))}, _data_file("t.npz")
    ),
    "data file npz test shape": ApiCase(
        {"t.npz": _npz(x_train=np.zeros((4, 2)), y_train=np.zeros(4), x_test=np.zeros((1, 3)), y_test=np.zeros(1))},
        _data_file("t.npz", partition="iid", num_clients=2),
    ),
    "data file npz empty column name": ApiCase(
        {"t.npz": _npz(_train=np.zeros(2), x=np.zeros(2), y=np.zeros(2))}, _data_file("t.npz")
    ),
    "data file csv nan target": ApiCase({"t.csv": b"x,y\n1,0\n2,\n"}, _data_file("t.csv")),
    "data file csv unknown target": ApiCase({"t.csv": b"x,y\n1,0\n"}, _data_file("t.csv", target_column="z")),
    "data file csv natural without clients": ApiCase(
        {"t.csv": b"x,y\n1,0\n2,1\n"}, _data_file("t.csv", partition="natural")
    ),
    "data file csv test client unknown": ApiCase(
        {"t.csv": b"client,x,y\n1,1,0\n2,2,1\n", "u.csv": b"client,x,y\n3,1,0\n"},
        lambda d: build_federation(
            FederationSpec(dataset=str(d / "t.csv"), partition="natural", test_path=str(d / "u.csv"))
        ),
    ),
    "data file parquet garbage": ApiCase({"t.parquet": b"PAR1 garbage PAR1"}, _data_file("t.parquet")),
    "data file task with digits": ApiCase({}, lambda d: FederationSpec(task="regression")),
    "data file unknown suffix": ApiCase({"t.npy": b""}, lambda d: FederationSpec(dataset=str(d / "t.npy"))),
    # sampler states, traces and JSON through the API
    "load_sampler binary": ApiCase({"s.json": b"\x00\xff\xfe"}, _state("s.json")),
    "load_sampler nested": ApiCase({"s.json": DEEP}, _state("s.json")),
    "load_sampler relabelled": ApiCase({"s.json": STATE_CASES["md relabelled uniform"]}, _state("s.json")),
    "load_sampler missing": ApiCase({}, lambda d: load_sampler(d / "none.json")),
    "read_json_file nested": ApiCase({"j.json": DEEP}, _json("j.json")),
    "read_json_file binary": ApiCase({"j.json": b"\xff\xfe\x00"}, _json("j.json")),
    "read_json_file not JSON": ApiCase({"j.json": b"{'a': 1}"}, _json("j.json")),
    "trace binary": ApiCase({"t.csv": TRACE_CASES["binary"]}, lambda d: load_availability_trace(d / "t.csv")),
    "trace huge id": ApiCase({"t.csv": TRACE_CASES["client id 10^20"]}, lambda d: load_availability_trace(d / "t.csv")),
    "trace end before start": ApiCase(
        {"t.csv": TRACE_CASES["end before start"]}, lambda d: load_availability_trace(d / "t.csv")
    ),
}


@pytest.mark.parametrize("case_id", list(API_CASES))
def test_bad_file_through_the_python_api_is_one_fedsample_error(case_id: str, tmp_path: Path) -> None:
    case = API_CASES[case_id]
    folder = tmp_path / "d"
    folder.mkdir()
    for name, content in case.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    before = snapshot(tmp_path)
    with pytest.raises(FedsampleError) as caught:
        case.call(folder)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message, case_id
    assert "\n" not in message, message
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case_id", [case for case in API_CASES if case.startswith("data file")])
def test_a_data_file_is_read_not_refused_as_an_unknown_name(case_id: str, tmp_path: Path) -> None:
    """Before data files were federations, each of these was refused as not one of the built-in names."""
    case = API_CASES[case_id]
    folder = tmp_path / "d"
    folder.mkdir()
    for name, content in case.files.items():
        (folder / name).write_bytes(content)
    with pytest.raises(FedsampleError) as caught:
        case.call(folder)
    error = caught.value
    assert error.parameter != "dataset" or error.constraint is None or "a path to a" in str(error.constraint)


def test_the_suite_has_at_least_250_cases() -> None:
    assert len(CLI_CASES) + len(API_CASES) >= 250
