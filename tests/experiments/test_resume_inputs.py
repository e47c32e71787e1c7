"""A run records the content of its inputs, and ``--resume`` refuses other ones (issue 32 items 3 and 11).

``inputs.json`` holds the SHA-256 of a data file's bytes, of arrays given from Python, of a model
factory's module file or of a function's source. A run interrupted after round 2 (its ``on_round``
raises; the checkpoint of round 1 is saved) and resumed on changed data or code is refused in one line
naming what changed, and its directory is left byte for byte as it was; resumed on the same inputs it
finishes. A run directory without ``inputs.json`` (an older fedsample's) resumes as before.
Deterministic, no statistics; every run is a few rounds on a few dozen rows.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from cli_helpers import run_cli, snapshot
from fedsample.data import FederatedDataset
from fedsample.engine.specs import RoundReport
from fedsample.errors import FedsampleError
from fedsample.experiments import load_config, run_comparison, run_experiment
from fedsample.experiments.rundir.manifest import MANIFEST_FILE
from fedsample.experiments.suite import run_suite

INPUTS_FILE = "inputs.json"  # fedsample.experiments.rundir.inputs.INPUTS_FILE, named so the base tree runs these
TRAINING = {"rounds": 3, "num_sampled": 2, "local_steps": 1, "batch_size": 4}


class Stop(Exception):
    """Ends a run after its second round, as a kill would (the checkpoint of round 1 is saved)."""


def _stop_after_round_2(report: RoundReport) -> None:
    if report.round == 2:
        raise Stop


def _toy(changed: float = 0.0) -> FederatedDataset:
    features = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    features[7, 2] += changed
    return FederatedDataset(
        train_features=features,
        train_targets=np.arange(40) % 2,
        train_indptr=np.array([0, 10, 20, 30, 40]),
        test_features=np.zeros((0, 4), np.float32),
        test_targets=np.zeros(0, int),
        test_indptr=np.zeros(5, np.int64),
        name="toy",
    )


def _module(path: Path, text: str) -> ModuleType:
    """A module loaded from ``path`` (so that inspect reads its functions' source)."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LINEAR = "from torch import nn\n\n\ndef make():\n    return nn.Linear(4, 2)\n"


def _interrupted_comparison(out: Path, data: FederatedDataset, make: Any) -> None:
    with pytest.raises(Stop):
        run_comparison(data, make, ["md"], out, training=TRAINING, checkpoint_every=1, on_round=_stop_after_round_2)
    assert (out / "checkpoint.npz").is_file()


def _refused(error: FedsampleError, kind: str, key: str) -> None:
    message = str(error)
    assert error.parameter == "--resume"
    assert "\n" not in message
    assert f"whose {kind} changed since it started" in message
    assert f"named by {key}, had sha256 " in message
    assert "rerun without --resume, or with --overwrite" in message


def test_resuming_on_other_arrays_of_the_same_name_is_refused_before_writing(tmp_path: Path) -> None:
    """Issue 32 item 3: one value of the arrays changed, same name ``toy``: refused; the same arrays finish."""
    make = _module(tmp_path / "linear_a.py", LINEAR).make
    out = tmp_path / "run"
    _interrupted_comparison(out, _toy(), make)
    before = snapshot(out)
    with pytest.raises(FedsampleError) as caught:
        run_comparison(_toy(changed=1.0), make, ["md"], out, training=TRAINING, checkpoint_every=1, resume=True)
    _refused(caught.value, "data", "federation.dataset")
    assert "the arrays given from Python as python:toy" in str(caught.value)
    assert snapshot(out) == before
    outcome = run_comparison(_toy(), make, ["md"], out, training=TRAINING, checkpoint_every=1, resume=True)
    assert outcome.resumed_from == 1


def test_resuming_with_a_changed_factory_source_is_refused_before_writing(tmp_path: Path) -> None:
    """The same architecture, one comment added to the factory: its source changed, so the run refuses."""
    out = tmp_path / "run"
    _interrupted_comparison(out, _toy(), _module(tmp_path / "linear_b.py", LINEAR).make)
    before = snapshot(out)
    edited = _module(tmp_path / "linear_c.py", LINEAR.replace("(4, 2)", "(4, 2)  # edited")).make
    with pytest.raises(FedsampleError) as caught:
        run_comparison(_toy(), edited, ["md"], out, training=TRAINING, checkpoint_every=1, resume=True)
    _refused(caught.value, "model", "model.factory")
    assert "the source of make" in str(caught.value)
    assert snapshot(out) == before


CONFIG = """
name = "files"
seeds = 1

[federation]
dataset = "data.npz"
partition = "iid"
num_clients = 4

[model]
factory = "{module}:make"

[training]
rounds = 3
num_sampled = 2
local_steps = 1
batch_size = 4

[[samplers]]
name = "md"

[run]
checkpoint_every = 1
"""


def _data_file(path: Path, changed: float = 0.0) -> None:
    rng = np.random.default_rng(1)
    features = rng.normal(size=(48, 4))
    features[5, 1] += changed
    np.savez(path, x=features, y=rng.integers(0, 2, 48))


def _interrupted_config_run(tmp_path: Path, module: str) -> Path:
    (tmp_path / f"{module}.py").write_text(LINEAR)
    _data_file(tmp_path / "data.npz")
    (tmp_path / "config.toml").write_text(CONFIG.format(module=module))
    out = tmp_path / "run"
    with pytest.raises(Stop):
        run_experiment(load_config(tmp_path / "config.toml"), out, on_round=_stop_after_round_2)
    return out


@pytest.mark.parametrize("changed", ["data file", "factory module"])
def test_fedsample_run_resume_refuses_a_changed_file_in_one_line(
    changed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = "fedsample_inputs_" + changed.split()[0]
    out = _interrupted_config_run(tmp_path, module)
    recorded = json.loads((out / INPUTS_FILE).read_text())["inputs"]
    data_digest = hashlib.sha256((tmp_path / "data.npz").read_bytes()).hexdigest()
    assert recorded["federation.dataset"]["sha256"] == data_digest
    assert recorded["model.factory"]["what"] == f"file {str(tmp_path / f'{module}.py')!r}"
    before = snapshot(out)
    if changed == "data file":
        _data_file(tmp_path / "data.npz", changed=1.0)
        key, file = "federation.dataset", tmp_path / "data.npz"
    else:
        (tmp_path / f"{module}.py").write_text(LINEAR.replace("(4, 2)", "(4, 2)  # edited"))
        key, file = "model.factory", tmp_path / f"{module}.py"
    capsys.readouterr()
    code, stdout, err = run_cli(["run", "--resume", str(out), "-q"], capsys)
    assert (code, stdout, len(err.splitlines())) == (2, "", 1), err
    assert f"file {str(file)!r}, named by {key}, had sha256 " in err
    assert f"now {hashlib.sha256(file.read_bytes()).hexdigest()[:16]}..." in err
    assert snapshot(out) == before


def test_a_run_directory_without_inputs_resumes_as_before_and_records_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As an older fedsample left it: no inputs.json, and its manifest does not list one."""
    out = _interrupted_config_run(tmp_path, "fedsample_inputs_older")
    (out / INPUTS_FILE).unlink()
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    manifest["files"].remove(INPUTS_FILE)
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))
    _data_file(tmp_path / "data.npz", changed=1.0)  # not recorded: not checked
    code, _, err = run_cli(["run", "--resume", str(out), "-q"], capsys)
    assert code == 0, err
    recorded = json.loads((out / INPUTS_FILE).read_text())["inputs"]
    assert recorded["federation.dataset"]["sha256"] == hashlib.sha256((tmp_path / "data.npz").read_bytes()).hexdigest()
    assert INPUTS_FILE in json.loads((out / MANIFEST_FILE).read_text())["files"]


def test_a_suite_refuses_a_part_begun_on_other_data_before_writing(tmp_path: Path) -> None:
    """Two parts; the first is interrupted, its data file then changes: resuming the suite writes nothing."""
    (tmp_path / "fedsample_inputs_suite.py").write_text(LINEAR)
    _data_file(tmp_path / "data.npz")
    (tmp_path / "config.toml").write_text(CONFIG.format(module="fedsample_inputs_suite"))
    config = load_config(tmp_path / "config.toml")
    out = tmp_path / "suite"
    with pytest.raises(Stop):
        run_suite([("a", config), ("b", config)], out, on_round=_stop_after_round_2)
    before = snapshot(out)
    _data_file(tmp_path / "data.npz", changed=1.0)
    with pytest.raises(FedsampleError) as caught:
        run_suite(None, out, resume=True)
    _refused(caught.value, "data", "federation.dataset")
    assert str(out / "a") in str(caught.value)
    assert snapshot(out) == before


def test_arrays_hash_by_content_whatever_their_memory_layout() -> None:
    """C order, Fortran order and a strided view of the same values: one digest; another value: another."""
    from fedsample.experiments.rundir.inputs import run_inputs

    data = _toy()
    config = load_config_for_python_data()
    reference = run_inputs(config, data, None)["federation.dataset"].sha256
    fortran = _replace(data, train_features=np.asfortranarray(data.train_features))
    wide = np.zeros((40, 8), np.float32)
    wide[:, ::2] = data.train_features
    strided = _replace(data, train_features=wide[:, ::2])
    assert not strided.train_features.flags.c_contiguous
    for same in (fortran, strided):
        assert run_inputs(config, same, None)["federation.dataset"].sha256 == reference
    assert run_inputs(config, _toy(changed=1e-6), None)["federation.dataset"].sha256 != reference


def load_config_for_python_data() -> Any:
    from fedsample.experiments.comparison import ComparisonSpec

    return ComparisonSpec(data=_toy(), model=lambda: None, samplers=["md"]).config()


def _replace(data: FederatedDataset, **arrays: np.ndarray) -> FederatedDataset:
    fields = {
        name: getattr(data, name)
        for name in ("train_features", "train_targets", "train_indptr", "test_features", "test_targets", "test_indptr")
    }
    return FederatedDataset(**{**fields, **arrays}, name=data.name)  # type: ignore[arg-type]


def test_the_embedded_data_and_the_papers_models_record_nothing(tmp_path: Path) -> None:
    """digits and an MLP are named by config.toml's settings, which --resume compares already."""
    from cli_helpers import digits_config
    from fedsample.experiments.rundir.inputs import run_inputs

    (tmp_path / "config.toml").write_text(digits_config(seeds=1, rounds=1))
    assert run_inputs(load_config(tmp_path / "config.toml"), None, None) == {}


@pytest.mark.parametrize(
    "content",
    ["[", '{"format": "another", "inputs": {}}', '{"format": "fedsample-inputs", "inputs": {"x": 1}}', "[" * 5000],
    ids=["not JSON", "another format", "an entry without a digest", "nested 5000 deep"],
)
def test_a_damaged_inputs_file_is_refused_in_one_line(content: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    make = _module(tmp_path / f"linear_{len(content)}_{content[:1] == '['}.py", LINEAR).make
    _interrupted_comparison(out, _toy(), make)
    (out / INPUTS_FILE).write_text(content)
    before = snapshot(out)
    with pytest.raises(FedsampleError) as caught:
        run_comparison(_toy(), make, ["md"], out, training=TRAINING, checkpoint_every=1, resume=True)
    assert caught.value.parameter == "--resume"
    assert "\n" not in str(caught.value)
    assert INPUTS_FILE in str(caught.value)
    assert snapshot(out) == before


def test_a_lambda_is_known_by_its_code_not_by_the_line_around_it(tmp_path: Path) -> None:
    """A lambda's source is its whole line, the call around it included: its compiled code is recorded, so
    the same lambda in another call resumes, and another one is refused."""
    from torch import nn

    out = tmp_path / "run"
    _interrupted_comparison(out, _toy(), lambda: nn.Linear(4, 2))
    resume: dict[str, Any] = {"training": TRAINING, "checkpoint_every": 1, "resume": True}
    with pytest.raises(FedsampleError) as caught:
        run_comparison(_toy(), lambda: nn.Linear(4, 2, bias=False), ["md"], out, **resume)
    _refused(caught.value, "model", "model.factory")
    assert run_comparison(_toy(), lambda: nn.Linear(4, 2), ["md"], out, **resume).resumed_from == 1
