"""The Monte-Carlo estimator streams its rounds and knows its rounding floor (issue 11 item 7).

* Memory does not grow with the number of rounds (``fedsample stats -m 10^6 --monte-carlo 100``
  once held every draw, 5.5 GB): measured with tracemalloc at two round counts.
* Streaming changes nothing: the estimates equal those computed from the whole ``rounds x n``
  matrix of the same draws (to float rounding), across many blocks.
* A variance that is exactly zero is estimated as rounding noise (``1e-33``): its standard error
  is at least the estimate's rounding floor, so it is not reported as many standard errors off.

Deterministic: fixed seeds, and the assertions compare the same draws, so no confidence level applies.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest

from fedsample import Federation, exact_statistics, make_sampler, monte_carlo_statistics
from fedsample.stats import montecarlo


def _peak_bytes(sampler: Any, state: Any, rounds: int) -> int:
    tracemalloc.start()
    try:
        monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=rounds)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_does_not_grow_with_the_number_of_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4096 entries instead of 2**22 keep the test small; ten times the rounds must not
    take more memory (holding every draw took about ten times more)."""
    monkeypatch.setattr(montecarlo, "_BLOCK_ENTRIES", 1 << 12, raising=False)
    sampler = make_sampler("md")
    state = sampler.init(Federation.from_sizes(np.arange(1, 201)), 50)
    _peak_bytes(sampler, state, 50)  # warm caches and imports
    few, many = _peak_bytes(sampler, state, 300), _peak_bytes(sampler, state, 3000)
    assert many < 1.2 * few + 64 * 1024, (few, many)


def _direct(sampler: Any, state: Any, rounds: int, seed: int) -> dict[str, Any]:
    """The statistics from the whole matrix of the same draws."""
    rng = np.random.default_rng(seed)
    n = sampler.importances(state).size
    w, c = np.zeros((rounds, n)), np.zeros((rounds, n), dtype=np.int64)
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        np.add.at(w[t], selection.clients, selection.weights)
        np.add.at(c[t], selection.clients, 1)
    d = w - w.mean(axis=0)
    distinct = (c > 0).sum(axis=1)
    return {
        "mean": w.mean(axis=0),
        "var": w.var(axis=0, ddof=1),
        "p_included": (c > 0).mean(axis=0),
        "offdiag": float(np.mean(d.sum(axis=1) ** 2 - (d * d).sum(axis=1))),
        "var_sum": float(w.sum(axis=1).var(ddof=1)),
        "distinct": float(distinct.mean()),
        "var_distinct": float(distinct.var(ddof=1)),
        "all_distinct": float(np.mean(distinct == c.sum(axis=1))),
        "rng_after": rng.random(),
    }


@pytest.mark.parametrize("name", ["md", "uniform", "poisson", "clustered-size"])
def test_streamed_estimates_equal_the_direct_ones(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(montecarlo, "_BLOCK_ENTRIES", 64, raising=False)  # many blocks of a few rounds
    sampler = make_sampler(name)
    state = sampler.init(Federation.from_sizes([5, 1, 3, 8, 2, 6, 4, 1, 7, 2]), 3)
    rng = np.random.default_rng(11)
    mc = monte_carlo_statistics(sampler, state, rng, num_rounds=500)
    direct = _direct(sampler, state, 500, 11)
    close = {"rtol": 1e-9, "atol": 1e-12}
    np.testing.assert_allclose(mc.mean_weights.value, direct["mean"], **close)
    np.testing.assert_allclose(mc.var_weights.value, direct["var"], **close)
    np.testing.assert_allclose(mc.p_included.value, direct["p_included"], **close)
    np.testing.assert_allclose(mc.offdiag_cov_sum.value, direct["offdiag"], **close)
    np.testing.assert_allclose(mc.var_sum_weights.value, direct["var_sum"], **close)
    np.testing.assert_allclose(mc.expected_distinct.value, direct["distinct"], **close)
    np.testing.assert_allclose(mc.var_distinct.value, direct["var_distinct"], **close)
    np.testing.assert_allclose(mc.p_all_distinct.value, direct["all_distinct"], **close)
    assert rng.random() == direct["rng_after"]  # the caller's generator ends where 500 draws leave it


@pytest.mark.parametrize(
    ("name", "statistic"),
    [("md", "var_sum_weights"), ("full", "var_weights"), ("full", "var_sum_weights"), ("uniform", "var_sum_weights")],
)
def test_a_zero_variance_is_within_the_rounding_floor(name: str, statistic: str) -> None:
    """Equal sizes: MD's and uniform sampling's weights always sum to exactly 1 and full
    participation's weights never vary; the estimates are rounding noise around an exact 0, and
    must be within one standard error of it with no absolute tolerance."""
    sampler = make_sampler(name)
    state = sampler.init(Federation.from_sizes([3] * 12, importance="uniform"), 10)
    exact = exact_statistics(sampler.design(state), sampler.importances(state))
    assert np.all(np.asarray(getattr(exact, statistic)) == 0.0)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=2000)
    estimate = getattr(mc, statistic)
    assert np.max(estimate.deviation(getattr(exact, statistic), atol=0.0)) <= 1.0
    # The floor is rounding-sized: far below any real variance of these weights.
    assert np.max(estimate.stderr) < 1e-20
