"""The similarity sampler's cap on the number of clients (its memory is quadratic in n)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, FedsampleError
from fedsample.samplers import SimilarityClusteredSampler
from fedsample.samplers.similarity.sampler import MAX_SIMILARITY_CLIENTS


def test_the_cap_defaults_to_max_similarity_clients() -> None:
    assert SimilarityClusteredSampler().max_clients == MAX_SIMILARITY_CLIENTS == 20_000


def test_a_federation_above_the_cap_is_refused_with_its_memory_estimate() -> None:
    federation = Federation.from_sizes(np.ones(101, dtype=np.int64))
    with pytest.raises(FedsampleError, match=r"'federation'.*at most 100 clients \(max_clients.*GiB.*Got 101") as info:
        SimilarityClusteredSampler(max_clients=100).init(federation, 5)
    assert info.value.parameter == "federation"


def test_a_federation_at_the_cap_is_accepted() -> None:
    state = SimilarityClusteredSampler(max_clients=100).init(Federation.from_sizes(np.ones(100, dtype=np.int64)), 5)
    assert state.distances.shape == (100, 100)


@pytest.mark.parametrize("value", [0, -1, 2.5, None])
def test_the_cap_must_be_a_positive_int(value: object) -> None:
    with pytest.raises(FedsampleError, match=r"'max_clients' parameter of SimilarityClusteredSampler") as info:
        SimilarityClusteredSampler(max_clients=value)  # type: ignore[arg-type]
    assert info.value.parameter == "max_clients"
