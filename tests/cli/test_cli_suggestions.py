"""Names a user can guess (issue 26 item 4): every unknown name gets the closest known ones, says where it came
from (the flag, ``--set``, or the config file) and lists the choices sorted, in one line.

Each case is a command line, the start of what the line must say (the name, where it came from) and its
``Did you mean ...?``; the Python API cases check the error's fields.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_helpers import MD_AND_UNIFORM, digits_config, run_cli
from fedsample.data.builders import FederationSpec
from fedsample.engine.registry import component
from fedsample.errors import FedsampleError
from fedsample.experiments.config.reading import closest_keys, config_from_dict
from fedsample.experiments.presets.catalogue import preset_configs
from fedsample.samplers import make_sampler

CONFIG = "{tmp}/tiny.toml"

# (argv, what the line says first, its suggestion); {tmp} is the test's folder, holding tiny.toml.
CASES = [
    pytest.param(
        ["run", "--sampler", "clusterd-size"],
        "The 'samplers[0].name' key of --sampler must be one of {'adaptive-osmd', 'afl', 'avare', 'bernoulli',",
        "Did you mean 'clustered-size' or 'clustered'?",
        id="sampler-flag",
    ),
    pytest.param(
        ["stats", "--sizes", "3,4", "--samplers", "md,clusterd-size"],
        "The '--samplers' parameter must be one of {'adaptive-osmd', 'afl', 'avare',",
        "Did you mean 'clustered-size' or 'clustered'?",
        id="stats-samplers",
    ),
    pytest.param(
        ["sample", "unifrom", "--sizes", "3,4"],
        "The 'NAME' parameter must be one of {",
        "Did you mean 'uniform' or 'uniform-is'?",
        id="sample",
    ),
    pytest.param(
        ["run", "defualt"],
        "The 'PRESET|CONFIG' parameter must be one of {'active-and-balanced', 'clustered-dirichlet',",
        "Did you mean 'default'?",
        id="preset",
    ),
    pytest.param(
        ["run", CONFIG, "--set", "training.lr=0.1"],
        "The 'training.lr' key of --set is not one of the keys of [training]: {'backend', 'batch_size', 'device',",
        "Did you mean 'training.local_lr', 'server.lr' or 'training.lr_decay'?",
        id="set-synonym",
    ),
    pytest.param(
        ["run", CONFIG, "--set", "rounds=10"],
        "The 'rounds' key of --set is not one of the top-level keys: {'algorithm', 'baselines', 'description',",
        "Did you mean 'training.rounds'?",
        id="set-other-table",
    ),
    pytest.param(
        ["run", CONFIG, "--set", "federation.num_client=5"],
        "The 'federation.num_client' key of --set is not one of the keys of [federation]: {'alpha',",
        "Did you mean 'federation.num_clients'?",
        id="set-typo",
    ),
    pytest.param(
        ["run", CONFIG, "--set", "trainig.rounds=5"],
        "The 'trainig' key of --set is not one of the top-level keys: {",
        "Did you mean 'training' or 'tracking'?",  # the closest first
        id="set-table-typo",
    ),
    pytest.param(
        ["run", "{tmp}/typo.toml"],
        "The 'training.round' key of {tmp}/typo.toml is not one of the keys of [training]: {",
        "Did you mean 'training.rounds'?",
        id="file",
    ),
    pytest.param(
        ["run", CONFIG, "--set", "server.name=fedadm"],
        "The 'server.name' key of --set must be one of {'fedadagrad', 'fedadam', 'fedavgm', 'fedyogi', 'sgd'}.",
        "Did you mean 'fedadam' or 'fedavgm'?",
        id="set-server",
    ),
    pytest.param(
        ["run", CONFIG, "--set", "model.loss=cros-entropy"],
        "The 'model.loss' key of --set must be 'auto', 'cross-entropy', 'mse' or a 'package.module:function'",
        "Did you mean 'cross-entropy'?",
        id="set-loss",
    ),
    pytest.param(
        ["run", CONFIG, "--dataset", "digit"],
        "The 'federation.dataset' key of --dataset must be one of {'cifar10', 'digits', 'fashion-mnist',",
        "Did you mean 'digits'?",
        id="dataset-flag",
    ),
    pytest.param(
        ["run", CONFIG, "--partition", "dirichle"],
        "The '--partition' parameter must be one of {'dirichlet', 'iid', 'lognormal', 'natural', 'one-label',",
        "Did you mean 'dirichlet'?",
        id="partition-choices",
    ),
    pytest.param(
        ["run", CONFIG, "--algorithm", "fedprx"],
        "The '--algorithm' parameter must be one of {'fedavg', 'fedprox', 'minibatch-sgd', 'scaffold'}.",
        "Did you mean 'fedprox'?",
        id="algorithm-choices",
    ),
    pytest.param(
        ["run", CONFIG, "--server", "sdg"],
        "The '--server' parameter must be one of {",
        "Did you mean 'sgd'?",
        id="server-choices",
    ),
    pytest.param(
        ["stats", "--sizes", "3,4", "--importance", "sise"],
        "The '--importance' parameter must be one of {'size', 'uniform'}.",
        "Did you mean 'size'?",
        id="importance-choices",
    ),
    pytest.param(
        ["stats", "--federation", "unbalance"],
        "The '--federation' parameter must be one of {'balanced', 'osmd-skewed', 'unbalanced'}.",
        "Did you mean 'unbalanced' or 'balanced'?",
        id="federation",
    ),
    pytest.param(
        ["run", CONFIG, "--param", "mdd.eta=1"],
        "The '--param' parameter must be SAMPLER.NAME naming a sampler being used, one of {'md', 'uniform'}.",
        "Did you mean 'md'?",
        id="param-sampler",
    ),
    pytest.param(
        ["run", CONFIG, "--sampler", "osmd", "--param", "osmd.etta=0.1"],
        "The 'samplers[0].etta' key of --param is not one of the keys of samplers[0]: {'alpha', 'eta',",
        "Did you mean 'samplers[0].eta'?",
        id="param-key",
    ),
    pytest.param(
        ["rnu"],
        "The 'COMMAND' parameter must be one of {'plot', 'presets', 'privacy', 'report', 'run', 'sample', 'stats'}.",
        "Did you mean 'run'?",
        id="command",
    ),
    pytest.param(["run", "--rouds", "3"], "unrecognized arguments: --rouds", "Did you mean '--rounds'?", id="option"),
]


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
