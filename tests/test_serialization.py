"""JSON round-trip of plain data: arrays keep dtype, shape and exact values; only registered
dataclasses decode; bad input raises."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from fedsample import FedsampleError, Feedback, Selection, dumps, loads
from fedsample.serialization import decode_floats, dump_json, encode_float, from_jsonable, load_json, plain_data


def _strict_json(text: str) -> Any:
    """Parse JSON refusing the non-standard NaN / Infinity tokens."""

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.int64).reshape(2, 3),
        np.array([1, -2, 3], dtype=np.int32),
        np.array([0, 255], dtype=np.uint8),
        np.array([True, False]),
        np.array([0.1, 1 / 3, 1e-300, -2.5e300, 5e-324]),
        np.array([np.nan, np.inf, -np.inf, 0.5]),
        np.zeros((0, 4)),
        np.float32([0.1, 0.2]),
    ],
    ids=["int64-2d", "int32", "uint8", "bool", "float-extremes", "non-finite", "empty-2d", "float32"],
)
def test_arrays_round_trip_exactly(array: np.ndarray) -> None:
    """dtype, shape and every bit of every value survive; decoded arrays are read-only; JSON is strict."""
    text = dumps(array)
    _strict_json(text)
    restored = loads(text)
    assert restored.dtype == array.dtype
    assert restored.shape == array.shape
    np.testing.assert_array_equal(restored, array)
    assert restored.tobytes() == array.tobytes()
    assert not restored.flags.writeable


def test_random_floats_round_trip_bit_exactly() -> None:
    values = np.random.default_rng(0).standard_normal(1000) * 10.0 ** np.random.default_rng(1).integers(-300, 300, 1000)
    assert loads(dumps(values)).tobytes() == values.tobytes()


def test_containers_and_scalars_round_trip() -> None:
    """Tuples stay tuples, lists lists, dicts dicts; numpy scalars become Python numbers."""
    obj = {
        "none": None,
        "flag": True,
        "text": "héllo",
        "int": 3,
        "float": 0.1,
        "nan": float("nan"),
        "inf": float("-inf"),
        "np_int": np.int64(7),
        "np_float": np.float64(2.5),
        "np_bool": np.bool_(False),
        "tuple": (1, (2.0, "x")),
        "list": [1, [2, 3]],
        "nested": {"a": np.arange(2)},
    }
    restored = loads(dumps(obj))
    assert restored["none"] is None
    assert restored["flag"] is True
    assert restored["text"] == "héllo"
    assert restored["tuple"] == (1, (2.0, "x"))
    assert restored["list"] == [1, [2, 3]]
    assert np.isnan(restored["nan"])
    assert restored["inf"] == float("-inf")
    assert restored["np_int"] == 7
    assert type(restored["np_int"]) is int
    assert restored["np_float"] == 2.5
    assert restored["np_bool"] is False
    assert restored["nested"]["a"].tolist() == [0, 1]


def test_registered_dataclasses_round_trip() -> None:
    """Selections and feedback decode to the same class with equal arrays."""
    selection = Selection(clients=[3, 1, 3], weights=[0.25, 0.5, 0.25], instructions={"data_rate": [1.0, 0.5, 1.0]})
    feedback = Feedback(round=4, selection=selection, clients=[1, 3], losses=[0.1, 0.2])
    restored = loads(dumps(feedback))
    assert type(restored) is Feedback
    assert restored.round == 4
    assert restored.update_norms is None
    np.testing.assert_array_equal(restored.selection.clients, [3, 1, 3])
    np.testing.assert_array_equal(restored.selection.instructions["data_rate"], [1.0, 0.5, 1.0])
    np.testing.assert_array_equal(restored.losses, [0.1, 0.2])
    assert dumps(restored) == dumps(feedback)


@dataclasses.dataclass(frozen=True)
class _Unregistered:
    x: int


@pytest.mark.parametrize(
    "obj",
    [
        _Unregistered(1),
        np.array(["a", "b"]),
        np.array([object()], dtype=object),
        {1: "int key"},
        {1, 2},
        object(),
    ],
    ids=["unregistered-dataclass", "string-array", "object-array", "int-key", "set", "object"],
)
def test_dumps_refuses_what_it_cannot_invert(obj: Any) -> None:
    with pytest.raises(FedsampleError, match="'obj' parameter of dumps"):
        dumps(obj)


@pytest.mark.parametrize(
    "text",
    [
        '{"__type__": "os.system", "fields": {}}',
        '{"__type__": "Popen", "fields": {"args": "rm"}}',
        '{"something": 1}',
    ],
    ids=["dotted-name", "unknown-class", "untagged-dict"],
)
def test_loads_never_builds_unknown_types(text: str) -> None:
    """Decoding only instantiates registered plain-data classes; anything else raises FedsampleError."""
    with pytest.raises(FedsampleError, match="'state'") as info:
        loads(text)
    assert info.value.parameter == "state"


def test_from_jsonable_rejects_other_objects() -> None:
    with pytest.raises(FedsampleError):
        from_jsonable(object())


def test_plain_data_requires_a_dataclass() -> None:
    with pytest.raises(TypeError, match="dataclass"):
        plain_data(type("NotADataclass", (), {}))


# --- the one encoding of non-finite floats in untyped JSON (runs.json, quadratic.json, stats --json) ---


def test_report_json_encodes_non_finite_floats_as_the_typed_encoding_does() -> None:
    """dump_json writes strict JSON whose non-finite floats read exactly as dumps writes them."""
    value = {"eta": np.float64("inf"), "values": np.array([np.nan, -np.inf, 0.5]), 3: (1, np.int64(2)), "x": None}
    text = dump_json(value)
    parsed = _strict_json(text)
    assert parsed["eta"] == _strict_json(dumps(float("inf")))
    assert parsed["values"][:2] == [{"__float__": "nan"}, {"__float__": "-inf"}]
    assert parsed["3"] == [1, 2]
    assert parsed["x"] is None
    back = load_json(text)
    assert back["eta"] == float("inf")
    assert back["values"][1] == float("-inf")
    assert back["values"][2] == 0.5
    assert back["values"][0] != back["values"][0]  # NaN


def test_load_json_reads_the_bare_tokens_of_earlier_files() -> None:
    """quadratic.json and stats --json of earlier versions held NaN/Infinity tokens: still read."""
    back = load_json('{"max_abs_z": Infinity, "z": [NaN, -Infinity, 1.5]}')
    assert back["max_abs_z"] == float("inf")
    assert back["z"][1:] == [float("-inf"), 1.5]
    assert back["z"][0] != back["z"][0]


@pytest.mark.parametrize(
    "value",
    [{"__float__": "1.5"}, {"__float__": "inf", "other": 1}, {"__float__": 3}, {"label": "inf"}, "nan"],
    ids=["finite-tag", "extra-key", "non-string-tag", "string-value", "bare-string"],
)
def test_decode_floats_decodes_only_the_encoding(value: Any) -> None:
    """Only a one-key ``{"__float__": "nan" | "inf" | "-inf"}`` is a float; everything else is data."""
    assert decode_floats(value) == value


def test_finite_values_are_written_as_json_dumps_writes_them() -> None:
    """Finite data (a sampler state's dictionary, a run's payload) keeps its bytes: golden digests hold."""
    state = {"format": "x", "params": {"eta": 0.1, "rows": [1, 2]}, "state": {"__dict__": {"t": 3, "p": 1 / 3}}}
    assert dump_json(state) == json.dumps(state, allow_nan=False)
    assert dump_json(state, indent=1) == json.dumps(state, indent=1, allow_nan=False)
    assert encode_float(0.25) == 0.25
