"""Sampling designs draw what they claim: row draws follow their (integer) probabilities,
Bernoulli inclusions are independent with probabilities q_i, fixed-size draws are m distinct
clients uniformly.

Confidence: every statistical check rejects at a p-value below 1e-5 (exact binomial tests, or
chi-square tests whose expected counts are all above 100), with fixed seeds; each test states
its number of checks and the resulting family-wise false-failure bound.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fedsample import BernoulliDesign, FixedSizeDesign, FullDesign, RowDesign, dumps, loads
from fedsample.errors import FedsampleError

LEVEL = 1e-5  # per-check false-failure probability


def _binomial_p_values(successes: np.ndarray, trials: int, probabilities: np.ndarray) -> np.ndarray:
    """Two-sided exact binomial p-values, ``2 min(P(X <= k), P(X >= k))`` capped at 1."""
    lower = stats.binom.cdf(successes, trials, probabilities)
    upper = stats.binom.sf(successes - 1, trials, probabilities)
    return np.minimum(1.0, 2 * np.minimum(lower, upper))


def _row_design_with_units() -> RowDesign:
    # Row 0: clients 0, 1, 2 with 1, 2, 7 units of 10, drawn twice; row 1: clients 2, 3 with 3, 7 units.
    return RowDesign.from_units(
        num_clients=5,
        indptr=np.array([0, 3, 5]),
        indices=np.array([0, 1, 2, 2, 3]),
        units=np.array([1, 2, 7, 3, 7]),
        unit_total=10,
        row_counts=np.array([2, 1]),
        draw_weights=np.array([0.5, 0.5, 0.5, 0.25, 1.0]),
    )


def _draw_matrix(design: RowDesign, rounds: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([design.draw(rng)[0] for _ in range(rounds)])


def test_row_design_integer_draws_follow_the_units() -> None:
    """Each draw of row u picks client j with probability units / unit_total exactly.

    Three chi-square goodness-of-fit checks (one per draw position) at level 1e-5: family-wise
    false-failure bound 3e-5.
    """
    design = _row_design_with_units()
    rounds = 20_000
    draws = _draw_matrix(design, rounds, seed=1)
    assert draws.shape == (rounds, 3)
    expected = {0: np.array([0.1, 0.2, 0.7, 0.0, 0.0]), 1: np.array([0.0, 0.0, 0.3, 0.7, 0.0])}
    for position, row in enumerate(design.draw_rows.tolist()):
        counts = np.bincount(draws[:, position], minlength=5)
        support = expected[row] > 0
        assert counts[~support].sum() == 0  # never outside the row
        p_value = stats.chisquare(counts[support], rounds * expected[row][support]).pvalue
        assert p_value > LEVEL


def test_row_design_draws_are_independent() -> None:
    """The two draws of row 0 in one round are independent: chi-square test of the 3 x 3 table of
    joint counts against the product of the row probabilities, level 1e-5."""
    design = _row_design_with_units()
    rounds = 20_000
    draws = _draw_matrix(design, rounds, seed=2)
    table = np.zeros((3, 3))
    np.add.at(table, (draws[:, 0], draws[:, 1]), 1)
    row = np.array([0.1, 0.2, 0.7])
    assert stats.chisquare(table.ravel(), rounds * np.outer(row, row).ravel()).pvalue > LEVEL


def test_row_design_weights_are_per_draw() -> None:
    """A client gets draw_weights[i] for each time it is drawn."""
    design = _row_design_with_units()
    rng = np.random.default_rng(3)
    for _ in range(100):
        clients, weights = design.draw(rng)
        np.testing.assert_array_equal(weights, design.draw_weights[clients])


def test_row_design_with_float_probabilities() -> None:
    """from_probabilities draws follow the float row and never pick a zero-probability client.

    One chi-square check at level 1e-5.
    """
    design = RowDesign.from_probabilities(
        num_clients=4,
        indptr=np.array([0, 4]),
        indices=np.array([0, 1, 2, 3]),
        probabilities=np.array([0.15, 0.0, 0.35, 0.5]),
        row_counts=np.array([3]),
        draw_weights=np.full(4, 1 / 3),
    )
    rounds = 10_000
    draws = _draw_matrix(design, rounds, seed=4).ravel()
    counts = np.bincount(draws, minlength=4)
    assert counts[1] == 0
    expected = 3 * rounds * np.array([0.15, 0.35, 0.5])
    assert stats.chisquare(counts[[0, 2, 3]], expected).pvalue > LEVEL


def test_row_design_single_entry_rows_are_certain() -> None:
    """A row holding one client (probability 1) draws it every time, in integer and float form."""
    for design in (
        RowDesign.from_units(
            num_clients=3,
            indptr=np.array([0, 1, 3]),
            indices=np.array([2, 0, 1]),
            units=np.array([4, 1, 3]),
            unit_total=4,
            row_counts=np.array([1, 1]),
            draw_weights=np.full(3, 0.5),
        ),
        RowDesign.from_probabilities(
            num_clients=3,
            indptr=np.array([0, 1, 3]),
            indices=np.array([2, 0, 1]),
            probabilities=np.array([1.0, 0.25, 0.75]),
            row_counts=np.array([1, 1]),
            draw_weights=np.full(3, 0.5),
        ),
    ):
        draws = _draw_matrix(design, 500, seed=5)
        assert np.all(draws[:, 0] == 2)
        assert set(draws[:, 1].tolist()) <= {0, 1}


def test_row_design_dense_rows_and_round_trip() -> None:
    """dense_rows gives the (rows x clients) matrix; JSON round-trip keeps the integer units and draws."""
    design = _row_design_with_units()
    np.testing.assert_allclose(design.dense_rows(), [[0.1, 0.2, 0.7, 0, 0], [0, 0, 0.3, 0.7, 0]])
    restored = loads(dumps(design))
    assert restored.units is not None
    assert restored.units.dtype == np.int64
    np.testing.assert_array_equal(_draw_matrix(restored, 50, seed=6), _draw_matrix(design, 50, seed=6))


def test_row_design_refuses_int64_overflow() -> None:
    with pytest.raises(FedsampleError, match="unit_total"):
        RowDesign.from_units(
            num_clients=1,
            indptr=np.array([0, 1]),
            indices=np.array([0]),
            units=np.array([2**61]),
            unit_total=2**61,
            row_counts=np.array([1]),
            draw_weights=np.ones(1),
        )


# q spread over many orders of magnitude, with q = 1, q = 0 and several values in one bucket
# (bucket (1/4, 1/2] holds 0.26, 0.3, 0.5, 0.5).
INCLUSION = np.array([1.0, 0.999, 0.75, 0.5, 0.5, 0.26, 0.3, 0.1, 0.03, 1e-3, 1e-5, 1e-9, 0.0])


def _inclusion_matrix(design: BernoulliDesign, rounds: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    included = np.zeros((rounds, design.num_clients), dtype=bool)
    for t in range(rounds):
        clients, weights = design.draw(rng)
        assert np.unique(clients).size == clients.size  # each client at most once
        np.testing.assert_array_equal(weights, design.weights[clients])
        included[t, clients] = True
    return included


@pytest.fixture(scope="module")
def bernoulli_draws() -> tuple[BernoulliDesign, np.ndarray]:
    design = BernoulliDesign(inclusion=INCLUSION, weights=np.arange(1.0, INCLUSION.size + 1))
    return design, _inclusion_matrix(design, 20_000, seed=7)


def test_bernoulli_marginal_inclusion_frequencies(bernoulli_draws: tuple[BernoulliDesign, np.ndarray]) -> None:
    """Client i is included with probability q_i: q = 1 always, q = 0 never, the rest pass an exact
    binomial test at level 1e-5 (11 checks: family-wise bound 1.1e-4)."""
    _, included = bernoulli_draws
    rounds = included.shape[0]
    counts = included.sum(axis=0)
    assert counts[0] == rounds
    assert counts[-1] == 0
    inner = slice(1, -1)
    p_values = _binomial_p_values(counts[inner], rounds, INCLUSION[inner])
    assert p_values.min() > LEVEL, dict(zip(INCLUSION[inner].tolist(), p_values.tolist(), strict=True))


def test_bernoulli_inclusions_are_pairwise_independent(bernoulli_draws: tuple[BernoulliDesign, np.ndarray]) -> None:
    """For every pair with 0 < q < 1, the joint count is Binomial(R, q_i q_j): exact binomial test at
    level 1e-5 on each of the 55 pairs (family-wise bound 5.5e-4). Pairs within one bucket included."""
    _, included = bernoulli_draws
    rounds = included.shape[0]
    inner = [i for i in range(INCLUSION.size) if 0 < INCLUSION[i] < 1]
    pairs = list(itertools.combinations(inner, 2))
    assert len(pairs) == 55
    joint = np.array([np.sum(included[:, i] & included[:, j]) for i, j in pairs])
    expected = np.array([INCLUSION[i] * INCLUSION[j] for i, j in pairs])
    assert _binomial_p_values(joint, rounds, expected).min() > LEVEL


def test_bernoulli_over_many_orders_of_magnitude() -> None:
    """2000 clients with q log-uniform on [1e-6, 1]: the inclusions of each decade total
    Binomial-like counts with mean R sum q and variance R sum q (1 - q); each of the 6 decade totals
    is within 4.42 standard errors (two-sided level 1e-5 under normality; family-wise bound 6e-5)."""
    q = 10.0 ** np.random.default_rng(8).uniform(-6, 0, size=2000)
    design = BernoulliDesign(inclusion=q, weights=1 / q)
    rounds = 2000
    included = _inclusion_matrix(design, rounds, seed=9)
    counts = included.sum(axis=0)
    decade = np.floor(-np.log10(q)).astype(int)
    for d in range(6):
        in_decade = decade == d
        mean = rounds * q[in_decade].sum()
        sd = np.sqrt(rounds * np.sum(q[in_decade] * (1 - q[in_decade])))
        assert abs(counts[in_decade].sum() - mean) < 4.42 * sd, d


def test_fixed_size_design_draws_m_distinct_clients_uniformly() -> None:
    """Every draw is m distinct clients; the 10 subsets of 2 among 5 are equally likely (chi-square,
    level 1e-5)."""
    design = FixedSizeDesign(num_sampled=2, weights=np.array([0.1, 0.2, 0.3, 0.15, 0.25]))
    rng = np.random.default_rng(10)
    rounds = 20_000
    subsets = list(itertools.combinations(range(5), 2))
    counts = np.zeros(len(subsets))
    for _ in range(rounds):
        clients, weights = design.draw(rng)
        assert clients.size == 2
        assert np.unique(clients).size == 2
        np.testing.assert_array_equal(weights, design.weights[clients])
        counts[subsets.index(tuple(sorted(clients.tolist())))] += 1
    assert stats.chisquare(counts).pvalue > LEVEL


@pytest.mark.parametrize(("n", "m"), [(1, 1), (6, 6), (10**6, 5)])
def test_fixed_size_design_edge_sizes(n: int, m: int) -> None:
    """m = n selects everyone; a huge n with small m still gives m distinct valid ids."""
    design = FixedSizeDesign(num_sampled=m, weights=np.full(n, 1.0 / n))
    clients, _ = design.draw(np.random.default_rng(11))
    assert clients.size == m
    assert np.unique(clients).size == m
    assert clients.min() >= 0
    assert clients.max() < n
    if m == n:
        assert sorted(clients.tolist()) == list(range(n))


def test_full_design_selects_everyone() -> None:
    design = FullDesign(weights=np.array([0.2, 0.3, 0.5]))
    clients, weights = design.draw(np.random.default_rng(12))
    assert clients.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(weights, [0.2, 0.3, 0.5])
