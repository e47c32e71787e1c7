"""Exact statistics of row designs with many draws per row (``m`` in the tens of thousands and more).

The number of distinct clients' variance once summed ``binom(c, k) x^k`` with ``binom(c, k)`` as a
float, which overflows for ``c`` of a few hundred and more: ``fedsample stats -m 1000000`` stopped
with an OverflowError traceback. Checked here against the closed form of one balanced row.
"""

from __future__ import annotations

import math

import numpy as np

from fedsample import Federation, exact_statistics, make_sampler


def _balanced_row_var_distinct(n: int, draws: int) -> float:
    """``Var[N]`` for ``draws`` draws from ``n`` equally likely clients:
    ``n P (1 - P) + n (n - 1) (P_ij - P^2)`` with ``P = (1 - 1/n)^c`` the chance a client is missed
    and ``P_ij - P^2 = P^2 expm1(c log1p(-p^2 / (1 - p)^2))`` the covariance of two misses."""
    p = 1.0 / n
    missed = math.exp(draws * math.log1p(-p))
    pair = missed * missed * math.expm1(draws * math.log1p(-(p * p) / ((1 - p) ** 2)))
    return n * missed * (1 - missed) + n * (n - 1) * pair


def test_var_distinct_with_many_draws_from_one_row() -> None:
    sampler = make_sampler("md")
    state = sampler.init(Federation.from_sizes([4] * 2000), 20_000)
    stats = exact_statistics(sampler.design(state), sampler.importances(state))
    assert stats.var_distinct is not None
    np.testing.assert_allclose(stats.var_distinct, _balanced_row_var_distinct(2000, 20_000), rtol=1e-9)


def test_a_million_draws_on_a_hundred_clients() -> None:
    """``-m 1000000`` on 100 clients of sizes 1..100, against the pairwise form
    ``sum_i P_i (1 - P_i) + sum_{i != j} P_i P_j expm1(c log1p(-rho_i rho_j))`` (``rho = p / (1 - p)``)."""
    sampler = make_sampler("md")
    state = sampler.init(Federation.from_sizes(np.arange(1, 101)), 1_000_000)
    stats = exact_statistics(sampler.design(state), sampler.importances(state))
    p = sampler.importances(state)
    missed = np.exp(1_000_000 * np.log1p(-p))
    rho = p / (1 - p)
    pairs = np.outer(missed, missed) * np.expm1(1_000_000 * np.log1p(-np.outer(rho, rho)))
    np.fill_diagonal(pairs, 0.0)
    expected = float(np.sum(missed * (1 - missed)) + pairs.sum())
    assert stats.var_distinct is not None
    np.testing.assert_allclose(stats.var_distinct, expected, rtol=1e-9)
    assert 0 < expected < 1e-80  # client 0 (p = 1/5050) is missed with probability e^-198
