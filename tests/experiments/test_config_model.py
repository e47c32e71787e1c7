"""A user's model from a config (model.factory, args, loss, path) and from Python (run_comparison).

Factories are modules the tests write beside their configs, each under its own name (Python caches
imported modules by name).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_cli, run_script
from fedsample.data import FederatedDataset
from fedsample.errors import FedsampleError
from fedsample.experiments import run_comparison
from fedsample.experiments.config.reading import config_to_dict, load_config
from fedsample.experiments.config.toml_writer import config_to_toml
from fedsample.experiments.runner import run_experiment

FACTORY = """
import torch
from torch import nn

IMPORTED = []


def make(width=8, dropout=0.0):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.BatchNorm1d(width), nn.ReLU(),
                         nn.Dropout(dropout), nn.Linear(width, 10))


def smooth(output, target):
    return nn.functional.cross_entropy(output, target, reduction="none", label_smoothing=0.1)


def top2(output, target):
    return (output.topk(2, dim=-1).indices == target.unsqueeze(-1)).any(-1).to(output.dtype)
"""


def _config(tmp_path: Path, module: str, model: str, *, rounds: int = 2) -> Path:
    (tmp_path / f"{module}.py").write_text(FACTORY)
    text = f"""
name = "mine"
seeds = 2

[federation]
dataset = "digits"
partition = "iid"
num_clients = 8

[model]
{model}

[training]
rounds = {rounds}
num_sampled = 3
local_steps = 2
batch_size = 8

[[samplers]]
name = "md"

[[samplers]]
name = "uniform"
"""
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_a_factory_beside_the_config_trains_and_the_run_directory_names_it(tmp_path: Path) -> None:
    module = "fedsample_test_models_a"
    config = load_config(_config(tmp_path, module, f'factory = "{module}:make"\nargs = {{width = 6, dropout = 0.2}}'))
    assert config.model.path == str(tmp_path.resolve())
    assert config.model.args == {"width": 6, "dropout": 0.2}
    # The resolved config writes the arguments as an inline table and reads back the same.
    assert tomllib.loads(config_to_toml(config))["model"]["args"] == {"width": 6, "dropout": 0.2}
    out = tmp_path / "run"
    outcome = run_experiment(config, out)
    runs = json.loads((out / "runs.json").read_text())
    assert runs["info"]["model"] == f"{module}:make"
    assert len(outcome.results) == 4
    assert outcome.results[0].params["2.weight"].shape == (6,)  # BatchNorm1d(6): the args reached the factory
    assert "2.running_mean" in outcome.results[0].buffers
    assert (out / "report.md").is_file()


def test_a_loss_by_reference_and_the_papers_model(tmp_path: Path) -> None:
    module = "fedsample_test_models_b"
    config = load_config(_config(tmp_path, module, f'kind = "mlp"\nloss = "{module}:smooth"'))
    outcome = run_experiment(config, tmp_path / "run")
    plain = load_config(_config(tmp_path, module, 'kind = "mlp"'))
    reference = run_experiment(plain, tmp_path / "plain")
    # Same model and data, another loss: the objective differs (label smoothing raises it).
    assert outcome.results[0].history.train_loss[-1] > reference.results[0].history.train_loss[-1]


@pytest.mark.parametrize(
    ("model", "match"),
    [
        ('factory = "fedsample_test_models_absent:make"', r"'model.factory' .* not in .* or on the Python path"),
        ('factory = "MODULE:nothing"', r"'model.factory' .* has no 'nothing'"),
        ('factory = "MODULE:make"\nargs = {colour = 3}', r"'model.factory' .*TypeError.*colour"),
        ('factory = "MODULE:IMPORTED"', r"'model.factory' .*which is a list, not a callable"),
        ('factory = "MODULE:make"\nkind = "mlp"', r"'model.kind' .*'auto' when model.factory"),
        ("args = {width = 3}", r"'model.args' .*absent unless model.factory"),
        ('factory = "MODULE:make"\nargs = {width = -1}', r"'model.factory' .*MODULE:make raising RuntimeError"),
        ('factory = "not a reference"', r"'model.factory' key .* must be None or a 'package.module:function'"),
    ],
    ids=[
        "absent-module",
        "absent-name",
        "bad-args",
        "not-callable",
        "kind-too",
        "args-alone",
        "factory-raises",
        "bad-reference",
    ],
)
def test_a_bad_model_table_is_one_line_and_nothing_is_written(tmp_path: Path, model: str, match: str) -> None:
    module = f"fedsample_test_models_bad_{abs(hash(model)) % 10**8}"
    path = _config(tmp_path, module, model.replace("MODULE", module))
    out = tmp_path / "run"
    with pytest.raises(FedsampleError, match=match.replace("MODULE", module)) as caught:
        run_experiment(load_config(path), out)
    assert len(str(caught.value).splitlines()) == 1
    assert not out.exists()


def test_the_cli_refuses_a_bad_factory_in_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = "fedsample_test_models_cli"
    path = _config(tmp_path, module, f'factory = "{module}:wrong"')
    (tmp_path / f"{module}.py").write_text(FACTORY + "\n\ndef wrong():\n    return torch.nn.Linear(64, 3)\n")
    code, _, err = run_cli(["run", str(path), "-q", "--out", str(tmp_path / "run")], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "one logit per class" in err
    assert not (tmp_path / "run").exists()


def test_report_and_plot_never_import_a_run_directorys_factory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module that leaves a mark when imported: ``run`` imports it (it asked to), ``report`` and ``plot`` on
    the finished directory do not, and ``--resume`` of a complete run imports it and says so first, with
    ``-q`` too."""
    module = "fedsample_test_models_marked"
    mark = tmp_path / "imported.txt"
    marking = (
        f"\nimport pathlib\np = pathlib.Path({str(mark)!r})\np.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
    )
    path = _config(tmp_path, module, f'factory = "{module}:make"')
    (tmp_path / f"{module}.py").write_text(FACTORY + marking)
    out = tmp_path / "run"
    code, _, err = run_cli(["run", str(path), "-q", "--out", str(out)], capsys)
    assert code == 0, err
    assert mark.read_text() == "x"
    import sys

    del sys.modules[module]  # a later import would run the module's code again
    for command in (["report", str(out)], ["plot", str(out)]):
        code, _, err = run_cli(command, capsys)
        assert code == 0, err
    assert mark.read_text() == "x"
    notice = f"fedsample run: warning: importing {module}:make, named by {out / 'config.toml'}\n"
    for quiet in ([], ["-q"]):  # -q silences the progress and the summary, never this
        code, _, err = run_cli(["run", "--resume", str(out), *quiet], capsys)
        assert code == 0, err
        assert err.startswith(notice), err
        if quiet:
            assert err == notice


def _arrays(seed: int = 0) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    sizes = [12, 9, 15, 10, 8, 11]
    total = sum(sizes)
    x = rng.normal(size=(total, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, total)
    test = rng.normal(size=(30, 3, 8, 8)).astype(np.float32)
    return FederatedDataset(
        train_features=x,
        train_targets=y,
        train_indptr=np.concatenate([[0], np.cumsum(sizes)]),
        test_features=test,
        test_targets=rng.integers(0, 3, 30),
        test_indptr=[0, 5, 10, 15, 20, 25, 30],
        name="my arrays",
    )


def _cnn():  # type: ignore[no-untyped-def]
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.2), nn.Flatten(), nn.Linear(256, 3)
    )


def test_run_comparison_writes_the_cli_run_directory_and_resumes(tmp_path: Path) -> None:
    data = _arrays()
    out = tmp_path / "run"
    settings = {"training": {"rounds": 3, "num_sampled": 2, "local_steps": 2, "batch_size": 4}, "seeds": 2}
    outcome = run_comparison(data, _cnn, ["md", {"name": "uniform", "label": "u"}], out, name="arrays", **settings)
    names = {p.name for p in out.iterdir()}
    assert {"config.toml", "metrics.csv", "summary.csv", "report.md", "runs.json", "states", "plots"} <= names
    saved = tomllib.loads((out / "config.toml").read_text())
    assert saved["federation"]["dataset"] == "python:my_arrays"
    assert saved["model"]["factory"] == "python:_cnn"
    assert [row.label for row in outcome.summary] == ["md", "u"]
    # Resuming a complete run with the same objects: nothing to do; the config must match.
    again = run_comparison(
        data, _cnn, ["md", {"name": "uniform", "label": "u"}], out, name="arrays", resume=True, **settings
    )
    assert again.resumed_from == 3
    with pytest.raises(FedsampleError, match="--resume"):
        run_comparison(data, _cnn, ["md"], out, name="arrays", resume=True, **settings)
    # The CLI cannot rebuild Python objects: one line, naming the key.
    with pytest.raises(FedsampleError, match=r"'federation.dataset' .*given from Python"):
        run_experiment(load_config(out / "config.toml"), tmp_path / "again")


def test_run_comparison_checks_its_arguments_by_config_key(tmp_path: Path) -> None:
    data = _arrays()
    with pytest.raises(FedsampleError, match=r"'training.rounds' key of run_comparison"):
        run_comparison(data, _cnn, ["md"], tmp_path / "a", training={"rounds": 0})
    with pytest.raises(FedsampleError, match=r"'data' parameter of run_comparison must be a FederatedDataset"):
        run_comparison(np.zeros(3), _cnn, ["md"], tmp_path / "b")  # type: ignore[arg-type]
    with pytest.raises(FedsampleError, match=r"'samplers' parameter"):
        run_comparison(data, _cnn, "md", tmp_path / "c")  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())


def test_the_resolved_config_of_a_factory_round_trips(tmp_path: Path) -> None:
    module = "fedsample_test_models_c"
    config = load_config(_config(tmp_path, module, f'factory = "{module}:make"\nloss = "{module}:smooth"'))
    resolved = config_to_dict(config)["model"]
    assert resolved["factory"] == f"{module}:make"
    assert resolved["loss"] == f"{module}:smooth"
    written = tmp_path / "resolved.toml"
    written.write_text(config_to_toml(config))
    assert load_config(written) == config


def test_extra_metrics_from_the_config_reach_the_metrics_file(tmp_path: Path) -> None:
    module = "fedsample_test_models_metrics"
    config = load_config(_config(tmp_path, module, f'kind = "mlp"\nmetrics = {{top2 = "{module}:top2"}}'))
    out = tmp_path / "run"
    run_experiment(config, out)
    lines = (out / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[-1] == "test_top2"
    values = [float(line.split(",")[-1]) for line in lines[1:] if line.split(",")[-1] != "nan"]
    accuracy = [float(line.split(",")[header.index("test_accuracy")]) for line in lines[1:]]
    assert values
    assert min(values) >= 0.0
    assert max(values) <= 1.0
    assert max(values) >= max(a for a in accuracy if a == a)  # top-2 accuracy is at least the top-1 one


def test_the_cli_says_a_fallback_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = "fedsample_test_models_noisy"
    path = _config(tmp_path, module, f'factory = "{module}:noisy"', rounds=1)
    (tmp_path / f"{module}.py").write_text(
        FACTORY
        + "\n\ndef noisy():\n    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.Dropout(0.1), nn.RReLU())\n"
    )
    code, _, err = run_cli(["run", str(path), "-q", "--out", str(tmp_path / "run")], capsys)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1
    assert lines[0].startswith("fedsample run: warning: the batched backend does not serve the model")


@pytest.mark.parametrize("module", ["pyarrow", "matplotlib"])
def test_a_factory_module_named_like_a_package_fedsample_imports_later_is_refused_up_front(
    tmp_path: Path, fedsample_script: Path, module: str
) -> None:
    """A fresh process, where neither package is imported yet: the file beside the config would be imported
    in its place, and the run would break after its training, writing the metrics or the plots."""
    path = _config(tmp_path, module, f'factory = "{module}:make"')
    out = tmp_path / "run"
    done = run_script(fedsample_script, "run", str(path), "-q", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert f"whose module {module!r} in {tmp_path.resolve()} has the name of the installed " in done.stderr
    assert not out.exists()
