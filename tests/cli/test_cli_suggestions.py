"""Names a user can guess (issue 26 item 4): every unknown name gets the closest known ones, says where it came
from (the flag, ``--set``, or the config file) and lists the choices sorted, in one line.

Each case is a command line, the start of what the line must say (the name, where it came from) and its
``Did you mean ...?``; the Python API cases check the error's fields.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config, run_cli
from fedsample.data.builders import FederationSpec
from fedsample.engine.registry import component
from fedsample.errors import FedsampleError
from fedsample.experiments.config import config_from_dict
from fedsample.experiments.config.experiment import closest_keys
from fedsample.experiments.presets.catalogue import preset_configs
from fedsample.samplers import make_sampler

# Three lines a case: its id and command line (split at blanks; {tmp} is the test's folder, holding
# tiny.toml and typo.toml), the start of what the error line says, and the suggestion it ends with
# (the closest name first).
TABLE = """
sampler-flag | run --sampler clusterd-size
    The 'samplers[0].name' key of --sampler must be one of {'adaptive-osmd', 'afl', 'avare', 'bernoulli',
    Did you mean 'clustered-size' or 'clustered'?
stats-samplers | stats --sizes 3,4 --samplers md,clusterd-size
    The '--samplers' parameter must be one of {'adaptive-osmd', 'afl', 'avare',
    Did you mean 'clustered-size' or 'clustered'?
sample | sample unifrom --sizes 3,4
    The 'NAME' parameter must be one of {
    Did you mean 'uniform' or 'uniform-is'?
preset | run defualt
    The 'PRESET|CONFIG' parameter must be one of {'active-and-balanced', 'clustered-dirichlet',
    Did you mean 'default'?
set-synonym | run {tmp}/tiny.toml --set training.lr=0.1
    The 'training.lr' key of --set is not one of the keys of [training]: {'backend', 'batch_size', 'device',
    Did you mean 'training.local_lr', 'server.lr' or 'training.lr_decay'?
set-other-table | run {tmp}/tiny.toml --set rounds=10
    The 'rounds' key of --set is not one of the top-level keys: {'algorithm', 'baselines', 'description',
    Did you mean 'training.rounds'?
set-typo | run {tmp}/tiny.toml --set federation.num_client=5
    The 'federation.num_client' key of --set is not one of the keys of [federation]: {'alpha',
    Did you mean 'federation.num_clients'?
set-table-typo | run {tmp}/tiny.toml --set trainig.rounds=5
    The 'trainig' key of --set is not one of the top-level keys: {
    Did you mean 'training' or 'tracking'?
file | run {tmp}/typo.toml
    The 'training.round' key of {tmp}/typo.toml is not one of the keys of [training]: {
    Did you mean 'training.rounds'?
set-server | run {tmp}/tiny.toml --set server.name=fedadm
    The 'server.name' key of --set must be one of {'fedadagrad', 'fedadam', 'fedavgm', 'fedyogi', 'sgd'}.
    Did you mean 'fedadam' or 'fedavgm'?
set-loss | run {tmp}/tiny.toml --set model.loss=cros-entropy
    The 'model.loss' key of --set must be 'auto', 'cross-entropy', 'mse' or a 'package.module:function'
    Did you mean 'cross-entropy'?
dataset-flag | run {tmp}/tiny.toml --dataset digit
    The 'federation.dataset' key of --dataset must be one of {'cifar10', 'digits', 'fashion-mnist',
    Did you mean 'digits'?
partition-choices | run {tmp}/tiny.toml --partition dirichle
    The '--partition' parameter must be one of {'dirichlet', 'iid', 'lognormal', 'natural', 'one-label',
    Did you mean 'dirichlet'?
algorithm-choices | run {tmp}/tiny.toml --algorithm fedprx
    The '--algorithm' parameter must be one of {'fedavg', 'fedprox', 'minibatch-sgd', 'scaffold'}.
    Did you mean 'fedprox'?
server-choices | run {tmp}/tiny.toml --server sdg
    The '--server' parameter must be one of {
    Did you mean 'sgd'?
importance-choices | stats --sizes 3,4 --importance sise
    The '--importance' parameter must be one of {'size', 'uniform'}.
    Did you mean 'size'?
federation | stats --federation unbalance
    The '--federation' parameter must be one of {'balanced', 'osmd-skewed', 'unbalanced'}.
    Did you mean 'unbalanced' or 'balanced'?
param-sampler | run {tmp}/tiny.toml --param mdd.eta=1
    The '--param' parameter must be SAMPLER.NAME naming a sampler being used, one of {'md', 'uniform'}.
    Did you mean 'md'?
param-key | run {tmp}/tiny.toml --sampler osmd --param osmd.etta=0.1
    The 'samplers[0].etta' key of --param is not one of the keys of samplers[0]: {'alpha', 'eta',
    Did you mean 'samplers[0].eta'?
command | rnu
    The 'COMMAND' parameter must be one of {'plot', 'presets', 'privacy', 'report', 'run', 'sample', 'stats'}.
    Did you mean 'run'?
option | run --rouds 3
    unrecognized arguments: --rouds
    Did you mean '--rounds'?
"""


def _cases(table: str) -> list[Any]:
    lines = table.strip("\n").splitlines()
    assert len(lines) % 3 == 0, "each case is three lines"
    cases = []
    for head, says, suggestion in zip(lines[::3], lines[1::3], lines[2::3], strict=True):
        name, _, argv = head.partition(" | ")
        cases.append(pytest.param(argv.split(), says.removeprefix("    "), suggestion.removeprefix("    "), id=name))
    return cases


CASES = _cases(TABLE)


@pytest.mark.parametrize(("argv", "says", "suggestion"), CASES)
def test_an_unknown_name_gets_the_closest_names_and_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str, suggestion: str
) -> None:
    (tmp_path / "tiny.toml").write_text(digits_config(tables=MD_AND_UNIFORM))
    (tmp_path / "typo.toml").write_text(digits_config(tables=MD_AND_UNIFORM).replace("rounds = ", "round = "))
    code, out, err = run_cli([arg.replace("{tmp}", str(tmp_path)) for arg in argv], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1, err
    line = err.rstrip("\n").split(": error: ", 1)[1]
    assert line.startswith(says.replace("{tmp}", str(tmp_path))), line
    assert line.endswith(suggestion), line
    listed = re.search(r"\{('[^}]*)\}", line)  # the choices, sorted
    if listed is not None:
        names = re.findall(r"'([^']*)'", listed.group(1))
        assert names == sorted(names), line
    assert not (tmp_path / "runs").exists()


def test_the_python_api_carries_the_suggestions_as_a_field() -> None:
    cases = [
        (lambda: make_sampler("clusterd-size"), "sampler", ("clustered-size", "clustered")),
        (lambda: make_sampler("osmd", etta=0.1), "etta", ("eta",)),
        (lambda: component("server", "fedadm"), "server", ("fedadam", "fedavgm")),
        (lambda: FederationSpec(dataset="digit"), "dataset", ("digits",)),
        (lambda: FederationSpec(partition="one_label"), "partition", ("one-label",)),
        (lambda: preset_configs("defualt"), "preset", ("default",)),
        (
            lambda: config_from_dict({"name": "x", "samplers": [{"name": "md"}], "training": {"epochs": 2}}),
            "training.epochs",
            ("training.local_steps", "training.rounds"),
        ),
    ]
    for call, parameter, suggestions in cases:
        with pytest.raises(FedsampleError) as caught:
            call()
        assert (caught.value.parameter, caught.value.suggestions) == (parameter, suggestions)
        assert str(caught.value).endswith(f"Did you mean {' or '.join(map(repr, suggestions))}?")


@pytest.mark.parametrize(
    ("key", "closest"),
    [
        ("rounds", ("training.rounds",)),
        ("lr", ("training.local_lr", "server.lr")),
        ("seed", ("federation.seed",)),
        ("run.checkpoint", ()),  # its table's keys are given by the caller; none elsewhere is close
        ("samplers[0].rounds", ("training.rounds",)),
        ("model.hiden", ()),
    ],
)
def test_closest_keys_look_in_the_other_tables(key: str, closest: tuple[str, ...]) -> None:
    assert closest_keys(key) == closest


def test_a_misspelled_column_gets_the_files_columns_and_a_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: a column name that the file lacks was called "malformed", was said of "experiment 'default'"
    (a name the user never gave) and got no suggestion, unlike every other name."""
    monkeypatch.chdir(tmp_path)
    rows = ["client,label,age"] + [f"{i % 4},{i % 2},{i}" for i in range(40)]
    (tmp_path / "c.csv").write_text("\n".join(rows) + "\n")
    for key, value, meant in [("target_column", "lable", "label"), ("feature_columns", '["agee"]', "age")]:
        target = [] if key == "target_column" else ["--set", "federation.target_column=label"]
        argv = ["run", "--dataset", "c.csv", *target, "--set", f"federation.{key}={value}", "-o", "out"]
        code, _, err = run_cli(argv, capsys)
        assert code == 2, err
        assert err.startswith(f"fedsample run: error: The 'federation.{key}' key of --set must be a column of 'c.csv'")
        assert err.rstrip().endswith(f"Did you mean '{meant}'?"), err
        assert "malformed" not in err
        assert "experiment 'default'" not in err
        assert not (tmp_path / "out").exists()


def test_a_samplers_unknown_parameter_is_told_only_its_own_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: `--param md.eta=0.1` suggested 'server.beta', from a table --param cannot reach."""
    code, _, err = run_cli(["run", "--param", "md.eta=0.1", "-o", str(tmp_path / "out")], capsys)
    assert code == 2, err
    assert "The 'samplers[0].eta' key of --param is not one of the keys of samplers[0]" in err
    assert "server." not in err
    assert "Did you mean" not in err  # md has no hyperparameter
    code, _, err = run_cli(["run", "--sampler", "osmd", "--param", "osmd.etta=0.1", "-o", str(tmp_path / "o")], capsys)
    assert err.rstrip().endswith("Did you mean 'samplers[0].eta'?"), err
    assert "key of --param" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["stats", "--sampler", "md", "--sampler", "uniform"],
        ["stats", "--samplers", "md,uniform"],  # the older spelling, kept as a hidden alias
        pytest.param(
            ["privacy", "--sampler", "md", "--sampler", "uniform", "--rounds", "10", "--noise-multiplier", "1"],
            marks=pytest.mark.slow,  # the accountant
        ),
        ["sample", "--sampler", "md"],
    ],
)
def test_every_command_takes_sampler(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35: `run` took --sampler and `stats` --samplers (`stats --sampler` was "ambiguous")."""
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "md" in out or "17:0.1" in out


def test_sampler_is_what_stats_help_shows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["stats", "--help"], capsys)
    assert code == 0
    assert "--sampler NAME" in out
    assert "--samplers" not in out  # hidden
    code, _, err = run_cli(["stats", "--sampler", "mdd"], capsys)
    assert code == 2
    assert err.rstrip().endswith("Did you mean 'md'?")
    assert "The '--sampler' parameter" in err
