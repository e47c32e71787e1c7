"""Saving a sampler with its state to one JSON file and loading it back
(:mod:`fedsample.samplers.persistence`, the input of ``fedsample stats --sampler-state``).

A loaded sampler has the same hyperparameters, its state draws the same selections from the same
seed and keeps learning exactly like the original. Files that are missing, not JSON, not in the
format, or hold something the sampler cannot use raise FedsampleError naming 'sampler_state'
(or the bad sampler name or hyperparameter they contain).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample import FedsampleError, dumps
from fedsample.samplers import MABSSampler, OSMDSampler
from fedsample.samplers.persistence import load_sampler, sampler_from_dict, sampler_to_dict, save_sampler
from sampler_cases import (
    CASES,
    LEARNING_CASES,
    WARM_UP_ROUNDS,
    client_norms,
    contract_federation,
    make_case,
    next_feedback,
)


def _draws(sampler: Any, state: Any, seed: int) -> list[tuple[list[int], list[float]]]:
    rng = np.random.default_rng(seed)
    return [(s.clients.tolist(), s.weights.tolist()) for s in (sampler.sample(state, rng) for _ in range(10))]


@pytest.mark.parametrize("case", CASES)
def test_save_and_load_round_trip(case: str, tmp_path: Path) -> None:
    """Every sampler (learned states included) comes back with equal hyperparameters and an equal
    read-only state that draws the same selections; a learning one then learns identically."""
    federation = contract_federation()
    sampler, state = make_case(case, federation, 3)
    path = tmp_path / "sampler.json"
    save_sampler(path, sampler, state)
    assert [p.name for p in tmp_path.iterdir()] == ["sampler.json"]  # the temporary file was renamed
    loaded, loaded_state = load_sampler(path)
    assert type(loaded) is type(sampler)
    assert dumps(loaded.get_params()) == dumps(sampler.get_params())
    assert type(loaded_state) is type(state)
    assert dumps(loaded_state) == dumps(state)
    assert _draws(loaded, loaded_state, 21) == _draws(sampler, state, 21)
    if case in LEARNING_CASES:
        norms = client_norms(federation.num_clients)
        feedback = next_feedback(sampler, state, WARM_UP_ROUNDS, np.random.default_rng(0), norms)
        assert dumps(loaded.update(loaded_state, feedback)) == dumps(sampler.update(state, feedback))


def test_file_format() -> None:
    """One JSON object: format, version, sampler name, params and the state's encoding."""
    sampler = OSMDSampler(eta=0.5, replace=False)
    state = sampler.init(contract_federation(), 2)
    data = json.loads(json.dumps(sampler_to_dict(sampler, state)))
    assert data["format"] == "fedsample-sampler"
    assert data["version"] == 1
    assert data["sampler"] == "osmd"
    rebuilt, rebuilt_state = sampler_from_dict(data)
    assert rebuilt == sampler
    assert dumps(rebuilt_state) == dumps(state)


def test_saving_over_an_existing_file_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    sampler = OSMDSampler()
    save_sampler(path, sampler, sampler.init(contract_federation(), 2))
    assert load_sampler(path)[0] == sampler


def _good() -> dict[str, Any]:
    sampler = OSMDSampler()
    return sampler_to_dict(sampler, sampler.init(contract_federation(), 2))


def _with(**changes: Any) -> dict[str, Any]:
    return {**_good(), **changes}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in _good().items() if k != key}


def _other_state() -> Any:
    return sampler_to_dict(MABSSampler(), MABSSampler().init(contract_federation(), 2))["state"]


def _short_probabilities() -> Any:
    state = _good()["state"]
    fields = {**state["fields"], "probabilities": {"__ndarray__": "<f8", "shape": [2], "data": [0.5, 0.5]}}
    return {**state, "fields": fields}


BAD_CONTENTS = [
    pytest.param([1, 2], "sampler_state", id="not-an-object"),
    pytest.param(_without("format"), "sampler_state", id="no-format"),
    pytest.param(_with(format="something-else"), "sampler_state", id="wrong-format"),
    pytest.param(_without("state"), "sampler_state", id="no-state"),
    pytest.param(_without("sampler"), "sampler_state", id="no-sampler"),
    pytest.param(_with(sampler="nope"), "sampler", id="unknown-sampler"),
    pytest.param(_with(params={"__dict__": {"alpha": 5.0}}), "alpha", id="bad-hyperparameter"),
    pytest.param(_with(params=[1]), "sampler_state", id="params-not-a-mapping"),
    pytest.param(_with(state=5), "sampler_state", id="state-not-a-state"),
    pytest.param(_with(state={"__type__": "Nope", "fields": {}}), "sampler_state", id="unknown-state-type"),
    pytest.param(_with(state={"__type__": "DistributionState"}), "sampler_state", id="state-without-fields"),
    pytest.param(
        _with(state={"__type__": "DistributionState", "fields": {"bogus": 1}}), "sampler_state", id="state-bad-fields"
    ),
    pytest.param(_with(state=_other_state()), "sampler_state", id="another-samplers-state"),
    pytest.param(_with(state=_short_probabilities()), "sampler_state", id="mismatched-sizes"),
]


@pytest.mark.parametrize(("content", "parameter"), BAD_CONTENTS)
def test_bad_file_contents_raise(content: Any, parameter: str, tmp_path: Path) -> None:
    """A JSON file that is not a usable sampler file raises FedsampleError (never another error)."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        load_sampler(path)
    assert info.value.parameter == parameter


def test_missing_and_non_json_files_raise(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError, match=r"'sampler_state'.*readable file.*missing\.json") as info:
        load_sampler(tmp_path / "missing.json")
    assert info.value.parameter == "sampler_state"
    with pytest.raises(FedsampleError, match=r"'sampler_state'.*readable file"):
        load_sampler(tmp_path)  # a directory
    path = tmp_path / "text.json"
    path.write_text("{not json")
    with pytest.raises(FedsampleError, match=r"'sampler_state'.*JSON file.*line 1") as info:
        load_sampler(path)
    assert info.value.parameter == "sampler_state"
