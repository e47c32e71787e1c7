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
    ("run-seed", {"runs": [RunSpec(MDSampler(), seed=-1)]}, r"'runs\[0\].seed' parameter"),
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
