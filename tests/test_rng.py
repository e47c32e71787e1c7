"""Keyed random streams: reproducible from (seed, stream, keys), independent across keys."""

from __future__ import annotations

from typing import Any

import pytest

from fedsample import FedsampleError
from fedsample.rng import Stream, stream_rng


def test_same_key_same_numbers() -> None:
    a = stream_rng(3, Stream.SAMPLING, 7).random(5)
    b = stream_rng(3, Stream.SAMPLING, 7).random(5)
    assert a.tolist() == b.tolist()


@pytest.mark.parametrize(
    "other",
    [(4, Stream.SAMPLING, 7), (3, Stream.MONTE_CARLO, 7), (3, Stream.SAMPLING, 8), (3, Stream.SAMPLING)],
    ids=["seed", "stream", "round", "no-round"],
)
def test_different_keys_different_numbers(other: tuple[Any, ...]) -> None:
    """Changing the seed, the stream or a key changes the stream (no collision between purposes)."""
    reference = stream_rng(3, Stream.SAMPLING, 7).random(5)
    assert stream_rng(*other).random(5).tolist() != reference.tolist()


@pytest.mark.parametrize("seed", [-1, 1.5, True, None, "0"])
def test_bad_seed_raises(seed: Any) -> None:
    with pytest.raises(FedsampleError, match="'seed'") as info:
        stream_rng(seed, Stream.SAMPLING)
    assert info.value.parameter == "seed"
