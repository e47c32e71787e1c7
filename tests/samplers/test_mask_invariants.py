"""A saved state whose client mask does not cover every client is refused, naming the mask (one check_mask)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsample import Federation
from fedsample._invariants import FieldError, check_mask
from fedsample.errors import FedsampleError
from fedsample.samplers import make_sampler
from fedsample.samplers.persistence import load_sampler, sampler_to_dict

FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6])


@pytest.mark.parametrize(
    ("name", "mask"),
    [
        ("oort", "explored"),
        ("oort", "available"),
        ("oort", "timed_out"),
        ("divfl", "available"),
        ("high-loss", "available"),
        ("round-robin", "visited"),
    ],
)
def test_a_short_mask_is_refused(tmp_path: Path, name: str, mask: str) -> None:
    sampler = make_sampler(name)
    data = json.loads(json.dumps(sampler_to_dict(sampler, sampler.init(FEDERATION, 3))))
    encoded = data["state"]["fields"][mask]
    encoded["shape"], encoded["data"] = [5], encoded["data"][:5]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    rule = rf"'{mask}' field of \w+State must be a boolean mask of shape \(6,\)\. Got an array of shape \(5,\)"
    with pytest.raises(FedsampleError, match=rule):
        load_sampler(path)


def test_check_mask_names_dtype_and_shape() -> None:
    assert check_mask("S", "m", [True, False], 2).tolist() == [True, False]
    with pytest.raises(FieldError, match="an array of dtype int64"):
        check_mask("S", "m", [1, 0], 2)
    with pytest.raises(FieldError, match=r"an array of shape \(2, 1\)"):
        check_mask("S", "m", [[True], [False]], 2)
