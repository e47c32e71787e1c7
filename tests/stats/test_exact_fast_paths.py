"""The fast paths of the exact statistics agree with the plain recurrences they shortcut."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample.designs import row_moments
from fedsample.samplers.schemes.clustered import _descending_order


def _recurrence(r: np.ndarray, draws: int) -> float:
    """``c! e_c(r)`` by the cumulative-sum recurrence (the reference)."""
    f = np.ones(r.size + 1)
    for k in range(1, draws + 1):
        g = np.zeros(r.size + 1)
        g[1:] = k * np.cumsum(r * f[:-1])
        f = g
    return float(f[-1])


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 300),
    draws=st.integers(1, 64),
    concentration=st.sampled_from([0.05, 0.5, 1.0, 10.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_power_sum_all_distinct_matches_the_recurrence_or_declines(
    n: int, draws: int, concentration: float, seed: int
) -> None:
    r = np.random.default_rng(seed).dirichlet(np.full(n, concentration))
    r = r[r > 0]
    if draws > r.size:
        return
    reference = _recurrence(r, draws)
    newton = row_moments._all_distinct_from_power_sums(r, draws)
    if newton is not None:  # accepted only when cancellation costs at most about 3 digits
        assert newton == pytest.approx(reference, rel=1e-10, abs=1e-300)
    # The public entry point answers either way.
    assert row_moments._single_row_all_distinct(r, draws) == pytest.approx(reference, rel=1e-10, abs=1e-300)


def test_power_sums_decline_when_the_alternating_sum_cancels() -> None:
    # 10 draws from 10 equiprobable clients: 10!/10^10 = 3.6e-4, far below the terms that cancel.
    r = np.full(10, 0.1)
    assert row_moments._all_distinct_from_power_sums(r, 10) is None
    assert row_moments._single_row_all_distinct(r, 10) == pytest.approx(3628800 / 1e10, rel=1e-12)


def test_power_sums_are_used_for_many_small_probabilities() -> None:
    r = np.random.default_rng(0).dirichlet(np.ones(100_000))
    value = row_moments._all_distinct_from_power_sums(r, 10)
    assert value is not None
    assert value == pytest.approx(_recurrence(r, 10), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.one_of(st.integers(1, 5), st.integers(1, 2**17), st.integers(1, 2**40)), min_size=1, max_size=60)
)
def test_descending_order_is_the_stable_descending_argsort(sizes: list[int]) -> None:
    q = np.asarray(sizes, dtype=np.int64)
    np.testing.assert_array_equal(_descending_order(q), np.argsort(-q, kind="stable"))


@pytest.mark.parametrize("spread", [3, 2**16 - 1, 2**16, 2**16 + 7, 2**32 - 1, 2**32, 2**45])
def test_descending_order_at_the_radix_boundaries(spread: int) -> None:
    rng = np.random.default_rng(spread % 1000)
    q = 1 + rng.integers(0, spread + 1, size=5000, dtype=np.int64)
    q[0], q[1] = 1, 1 + spread  # the spread is reached exactly
    q[2:50] = q[3]  # ties keep client order
    np.testing.assert_array_equal(_descending_order(q), np.argsort(-q, kind="stable"))
