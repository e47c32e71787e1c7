"""Packed arrays (a plain-data class's ``_packed_arrays``: raw bytes in base64) round-trip bit for bit and
are refused when malformed; fields an earlier version saved (``_formerly_saved``) are read past."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

import numpy as np
import pytest

from fedsample import FedsampleError, dumps, loads
from fedsample._arrays import ArrayFields
from fedsample.serialization import plain_data, to_jsonable


@plain_data
@dataclasses.dataclass(frozen=True, eq=False)
class _Packed(ArrayFields):
    vectors: Any
    counts: Any
    note: str = ""

    _packed_arrays: ClassVar[tuple[str, ...]] = ("vectors", "note")
    _formerly_saved: ClassVar[tuple[str, ...]] = ("cache",)


@pytest.mark.parametrize(
    "vectors",
    [
        np.random.default_rng(0).normal(size=(7, 33)).astype(np.float32),
        np.array([[0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4e38]], dtype=np.float32),
        np.arange(12, dtype=np.int64).reshape(3, 4) - 6,
        np.array([1.0, 1 / 3, 5e-324]),
        np.zeros((4, 0), dtype=np.float32),
        np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    ],
    ids=["float32", "float32-special", "int64", "float64", "empty", "fortran-order"],
)
def test_packed_arrays_round_trip_bit_for_bit(vectors: np.ndarray) -> None:
    obj = _Packed(vectors=vectors, counts=np.array([1, 2]), note="n")
    encoded = json.loads(dumps(obj))["fields"]
    assert set(encoded["vectors"]) == {"__ndarray__", "shape", "base64"}
    assert encoded["counts"]["data"] == [1, 2]  # fields not listed keep their decimals
    assert encoded["note"] == "n"  # a listed field that is not an array is written as usual
    restored = loads(dumps(obj))
    assert restored.vectors.dtype == vectors.dtype
    assert restored.vectors.shape == vectors.shape
    assert restored.vectors.tobytes() == np.ascontiguousarray(vectors).tobytes()
    assert not restored.vectors.flags.writeable


def test_packed_float32_takes_about_a_quarter_of_its_decimals() -> None:
    vectors = np.random.default_rng(1).normal(size=(60, 1000)).astype(np.float32) * 1e-3
    packed = len(dumps(_Packed(vectors=vectors, counts=np.zeros(1, dtype=np.int64))))
    decimals = len(json.dumps(vectors.ravel().tolist()))
    assert packed < 0.3 * decimals


def test_a_checkpoint_keeps_packed_fields_in_binary() -> None:
    arrays: list[np.ndarray] = []
    encoded = to_jsonable(_Packed(vectors=np.ones((2, 2), dtype=np.float32), counts=np.zeros(1)), arrays=arrays)
    assert encoded["fields"]["vectors"] == {"__array__": 0}


def _encoded() -> dict[str, Any]:
    obj = _Packed(vectors=np.ones((2, 3), dtype=np.float32), counts=np.zeros(1, dtype=np.int64))
    encoded: dict[str, Any] = json.loads(dumps(obj))
    return encoded


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"base64": "AAAA"}, "4 bytes per value of its shape"),  # 3 bytes for 6 values
        ({"base64": "not base64!"}, "bytes in base64"),
        ({"base64": 12}, "packed numbers"),
        ({"shape": [2, -3]}, "packed numbers"),
        ({"shape": "2x3"}, "packed numbers"),
        ({"__ndarray__": "|b1", "shape": [3], "base64": "AAEC"}, "packed numbers"),  # booleans are true/false
        ({"__ndarray__": "object"}, "numeric dtype"),
    ],
)
def test_a_malformed_packed_array_is_refused_in_one_line(change: dict[str, Any], match: str) -> None:
    encoded = _encoded()
    encoded["fields"]["vectors"].update(change)
    with pytest.raises(FedsampleError, match=match) as info:
        loads(json.dumps(encoded))
    assert "\n" not in str(info.value)
    assert "'vectors' field of _Packed" in str(info.value)


def test_a_field_an_earlier_version_saved_is_read_past() -> None:
    encoded = _encoded()
    encoded["fields"]["cache"] = {"__ndarray__": "<f8", "shape": [1], "data": [1.0]}
    assert loads(json.dumps(encoded)).vectors.shape == (2, 3)
    encoded["fields"]["unknown"] = 1
    with pytest.raises(FedsampleError, match="unexpected keyword argument 'unknown'"):
        loads(json.dumps(encoded))
