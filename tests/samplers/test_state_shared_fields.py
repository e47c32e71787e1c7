"""Every learning sampler's saved state is refused when its importances or num_sampled are wrong (one shared check)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fedsample import Federation
from fedsample.errors import FedsampleError
from fedsample.samplers import make_sampler
from fedsample.samplers.persistence import load_sampler, sampler_to_dict

FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6])
# (sampler, whether it draws distinct clients, so that num_sampled is at most the number of clients)
LEARNING = [
    ("oort", True),
    ("divfl", True),
    ("clustered-similarity", True),
    ("high-loss", False),
    ("osmd", False),
    ("adaptive-osmd", False),
    ("mabs", False),
    ("optimal", False),
]


def _load_tampered(tmp_path: Path, name: str, field: str, value: Any) -> None:
    sampler = make_sampler(name)
    data = json.loads(json.dumps(sampler_to_dict(sampler, sampler.init(FEDERATION, 3))))
    data["state"]["fields"][field] = value
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    load_sampler(path)


@pytest.mark.parametrize(("name", "distinct"), LEARNING)
def test_num_sampled_is_checked(tmp_path: Path, name: str, distinct: bool) -> None:
    with pytest.raises(FedsampleError, match=r"'num_sampled' field of \w+ must be an int in \[1, "):
        _load_tampered(tmp_path, name, "num_sampled", 0)
    if distinct:  # more distinct clients than there are
        with pytest.raises(FedsampleError, match=r"'num_sampled' field of \w+ must be an int in \[1, 6\]"):
            _load_tampered(tmp_path, name, "num_sampled", 7)


@pytest.mark.parametrize(("name", "distinct"), LEARNING)
def test_importances_are_checked(tmp_path: Path, name: str, distinct: bool) -> None:
    bad = {"__ndarray__": "<f8", "shape": [6], "data": [0.5, 0.5, 0.5, 0.0, 0.0, 0.0]}
    with pytest.raises(FedsampleError, match=r"'importances' field of \w+"):
        _load_tampered(tmp_path, name, "importances", bad)
