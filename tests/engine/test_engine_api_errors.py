"""simulate speaks the library's error: every argument checked before anything trains, one FedsampleError
line naming it (a ValueError subclass), never a torch or numpy traceback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, spec_for

from fedsample.engine import RunSpec, TrainingConfig, simulate
from fedsample.errors import FedsampleError
from fedsample.samplers import MDSampler

DATA = classification_data(0)
SPEC = spec_for("mlp", DATA, hidden=4)
RUNS = [RunSpec(MDSampler(), seed=0)]
CONFIG = TrainingConfig(rounds=1, num_sampled=2)
GOOD = {n: v for n, v in SPEC.init_params(torch.Generator().manual_seed(0)).items()}


def _nan_params() -> dict[str, torch.Tensor]:
    bad = {n: v.clone() for n, v in GOOD.items()}
    bad["layers.0.weight"][0, 0] = float("nan")
    return bad


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("data", {"data": np.zeros((3, 2))}, "'data' parameter of simulate must be a FederatedDataset"),
    ("runs-empty", {"runs": []}, "'runs' parameter"),
    ("runs-text", {"runs": "md"}, "'runs' parameter"),
    ("run-type", {"runs": [MDSampler()]}, r"'runs\[0\]' parameter of simulate must be a RunSpec"),
    ("config", {"config": {"rounds": 1}}, "'config' parameter of simulate must be a TrainingConfig"),
    ("init-seed", {"init_seed": -3}, "'init_seed' parameter"),
    ("params-nan", {"params": _nan_params()}, "'params' parameter of simulate must be finite initial parameters"),
    ("params-missing", {"params": {"layers.0.weight": GOOD["layers.0.weight"]}}, "'params' parameter"),
    ("params-shape", {"params": {**GOOD, "layers.0.bias": torch.zeros(7)}}, "'params' parameter"),
    ("params-type", {"params": [1, 2]}, "'params' parameter"),
    ("classes", {"model": spec_for("mlp", DATA, hidden=4).__class__("mlp", (6,), 2)}, "'model' .*one logit per class"),
    ("inputs", {"model": spec_for("mlp", DATA).__class__("mlp", (5,), 4)}, "'model' .*samples of shape"),
]


@pytest.mark.parametrize(("name", "change", "match"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_argument_is_one_line_naming_it(name: str, change: dict[str, Any], match: str) -> None:
    arguments: dict[str, Any] = {"data": DATA, "model": SPEC, "runs": RUNS, "config": CONFIG, **change}
    options = {key: arguments.pop(key) for key in ("params", "init_seed") if key in arguments}
    with pytest.raises(FedsampleError, match=match) as caught:
        simulate(arguments["data"], arguments["model"], arguments["runs"], arguments["config"], **options)
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"sampler": "md"}, "'sampler' parameter of RunSpec must be a Sampler"),
        ({"sampler": float("nan")}, "'sampler' parameter of RunSpec must be a Sampler"),
        ({"seed": -1}, "'seed' parameter of RunSpec"),
        ({"seed": float("nan")}, "'seed' parameter of RunSpec"),
        ({"seed": 2**63}, "'seed' parameter of RunSpec"),
        ({"label": float("nan")}, "'label' parameter of RunSpec must be a str or None"),
    ],
)
def test_a_run_spec_checks_its_fields_where_they_enter(change: dict[str, Any], match: str) -> None:
    """Issue 32: RunSpec kept a sampler, a seed or a label of any kind (NaN included) until simulate."""
    with pytest.raises(FedsampleError, match=match) as refused:
        RunSpec(**{"sampler": MDSampler(), **change})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("field", ["algorithm", "server"])
@pytest.mark.parametrize("value", [float("nan"), "fedprox", object()])
def test_a_training_config_refuses_an_algorithm_or_server_of_the_wrong_kind(field: str, value: object) -> None:
    with pytest.raises(FedsampleError, match=f"'{field}' parameter of TrainingConfig must be a "):
        TrainingConfig(**{field: value})
