"""``fedsample stats --sampler-state``: tampered or corrupted files are refused by the state's invariants.

Each saved file below is a valid state edited by hand the way a careless or hostile user could;
each must give exit status 2, nothing on stdout and one stderr line naming the field at fault
(and never "unbiased yes" with a negative inclusion probability, or a traceback).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_cli
from fedsample import Federation
from fedsample.samplers import make_sampler
from fedsample.samplers.persistence import MAX_SAMPLER_FILE_BYTES, load_sampler, sampler_to_dict
from fedsample.serialization import MAX_JSON_DEPTH, json_depth

FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6])


def _saved(name: str, **params: Any) -> dict[str, Any]:
    sampler = make_sampler(name, **params)
    data: dict[str, Any] = json.loads(json.dumps(sampler_to_dict(sampler, sampler.init(FEDERATION, 3))))
    return data


def _fields(data: dict[str, Any], *path: str) -> dict[str, Any]:
    """The ``fields`` of the object at ``path`` inside the saved state."""
    node = data["state"]
    for key in path:
        node = node["fields"][key]
    fields: dict[str, Any] = node["fields"]
    return fields


def _relabel_md_as_uniform(data: dict[str, Any]) -> None:
    data["sampler"] = "uniform"


def _scale_row(factor: float) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        probabilities = _fields(data, "design")["probabilities"]["data"]
        probabilities[:] = [p * factor for p in probabilities]

    return tamper


def _set_design_entry(field: str, position: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        _fields(data, "design")[field]["data"][position] = value

    return tamper


def _set_state_field(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        _fields(data)[field] = value

    return tamper


def _osmd_probabilities(transform: Callable[[list[Any]], list[Any]]) -> Callable[[dict[str, Any]], None]:
    def tamper(data: dict[str, Any]) -> None:
        encoded = _fields(data)["probabilities"]
        encoded["data"] = transform(encoded["data"])

    return tamper


def _object_dtype(data: dict[str, Any]) -> None:
    _fields(data)["importances"]["__ndarray__"] = "object"


def _uniform_weights_doubled(data: dict[str, Any]) -> None:
    weights = _fields(data, "design")["weights"]["data"]
    weights[:] = [2 * w for w in weights]


# (sampler, tampering, words the error line must hold: the field and the reason)
TAMPERED: dict[str, tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "md relabelled as uniform": ("md", _relabel_md_as_uniform, ("RowDesign design", "FixedSizeDesign")),
    "row not summing to 1": ("md", _scale_row(0.5), ("'design.probabilities'", "summing to 1")),
    "negative probability": ("md", _set_design_entry("probabilities", 0, -0.1), ("'design.probabilities'",)),
    "NaN probability": ("osmd", _osmd_probabilities(lambda p: [{"__float__": "nan"}, *p[1:]]), ("'probabilities'",)),
    "OSMD probabilities summing to 2.5": (
        "osmd",
        _osmd_probabilities(lambda p: [2.5 * x for x in p]),
        ("'probabilities'", "summing to 2.4"),
    ),
    "num_sampled 0": ("md", _set_state_field("num_sampled", 0), ("'num_sampled'", "[1,")),
    "num_sampled negative": ("uniform", _set_state_field("num_sampled", -3), ("'num_sampled'",)),
    "num_sampled a string": ("md", _set_state_field("num_sampled", "3"), ("'num_sampled'",)),
    "row count of 10^6": ("md", _set_design_entry("row_counts", 0, 10**6), ("'design.row_counts'",)),
    "row count of 10^18": ("md", _set_design_entry("row_counts", 0, 10**18), ("'design.row_counts'",)),
    "object dtype": ("md", _object_dtype, ("'importances'", "dtype")),
    "infinite draw weight": ("md", _set_design_entry("draw_weights", 2, {"__float__": "inf"}), ("draw_weights",)),
    "design index beyond the clients": ("md", _set_design_entry("indices", 1, 99), ("'design.indices'", "99")),
    "uniform weights doubled": ("uniform", _uniform_weights_doubled, ("E[w_", "unbiased")),
    "negative inclusion": (
        "poisson",
        _set_design_entry("inclusion", 0, -0.5),
        ("'design.inclusion'", "-0.5"),
    ),
}


def _assert_refused(path: Path, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run_cli(["stats", "--sampler-state", str(path)], capsys)
    lines = err.splitlines()
    assert (code, out, len(lines)) == (2, "", 1), err
    assert lines[0].startswith("fedsample stats: error:")
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_state_is_refused_naming_the_field(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, tamper, words = TAMPERED[case]
    data = _saved(name)
    original = copy.deepcopy(data)
    tamper(data)
    assert data != original
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    _assert_refused(path, words, capsys)


@pytest.mark.parametrize("name", ["md", "uniform", "poisson", "osmd", "full"])
def test_untampered_states_are_accepted(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same files before tampering load and print their statistics."""
    path = tmp_path / "state.json"
    path.write_text(json.dumps(_saved(name)))
    code, out, err = run_cli(["stats", "--sampler-state", str(path)], capsys)
    assert (code, err) == (0, ""), err
    assert out


def test_binary_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(bytes(range(256)) * 4)
    _assert_refused(path, ("'sampler_state'", "not UTF-8"), capsys)


def test_deeply_nested_json_is_refused_before_parsing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """200000 nested lists once exhausted the parser's stack (RecursionError)."""
    path = tmp_path / "state.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    _assert_refused(path, ("'sampler_state'", "nested 200000 deep"), capsys)
    # Brackets inside strings do not count; a state file's own depth is far below the bound.
    assert json_depth(b'{"a": "[[[[", "b": [1, [2]]}') == 3
    assert json_depth(json.dumps(_saved("md")).encode()) < MAX_JSON_DEPTH


def test_file_beyond_the_size_cap_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading stops at the cap (so /dev/zero is refused at once); the cap is lowered here to keep the test small."""
    path = tmp_path / "state.json"
    path.write_text(json.dumps(_saved("md")))
    assert MAX_SAMPLER_FILE_BYTES >= 2**27
    monkeypatch.setattr("fedsample.samplers.persistence.MAX_SAMPLER_FILE_BYTES", 100)
    _assert_refused(path, ("'sampler_state'", "at most 100 bytes"), capsys)


def test_invariants_hold_on_resume_paths_too(tmp_path: Path) -> None:
    """The check sits in decoding, so the Python loader refuses the same file (one FieldError path)."""
    data = _saved("md")
    _set_design_entry("indices", 0, 1000)(data)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"'design\.indices' field of DesignState"):
        load_sampler(path)
