"""Participation on designs the other participation tests leave out: the renormalise policy on
weights that do not sum to one (Poisson sampling, uniform sampling with size importances), and
redraws of unavailable entries on clustered designs with several rows.

Both go through the engine's own code path (:func:`select_participants`, then
:func:`settle_participants`). Statistical checks use fixed seeds and state their confidence.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.stats import chi2

from fedsample import Federation
from fedsample.designs import RowDesign
from fedsample.participation.availability import Dropout, TraceAvailability
from fedsample.participation.policies import correct_weights
from fedsample.participation.procedure import select_participants, settle_participants
from fedsample.participation.setting import Participation
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import ClusteredSampler, PoissonSampler, SizeClusteredSampler, UniformSampler

# --- renormalise keeps the selection's total ---------------------------------------------------------


def test_renormalise_rescales_the_kept_weights_to_the_selections_total() -> None:
    """Weights summing to 1.5: the two kept entries share 1.5 in proportion 0.2 : 0.5, not 1."""
    weights = np.array([0.2, 0.8, 0.5])
    corrected = correct_weights(weights, np.array([True, False, True]), "renormalise")
    np.testing.assert_allclose(corrected, [0.2 * 1.5 / 0.7, 0.0, 0.5 * 1.5 / 0.7], rtol=1e-15)
    assert corrected.sum() == pytest.approx(1.5, rel=1e-15)


SIZES = np.array([5, 40, 12, 90, 7, 33, 60, 3, 21, 150, 18, 9, 75, 44, 26, 11])


@pytest.mark.parametrize("sampler", [PoissonSampler(), UniformSampler()], ids=["poisson", "uniform-size-importance"])
def test_renormalise_keeps_each_rounds_total_on_weights_that_do_not_sum_to_one(sampler: Any) -> None:
    """Poisson sampling (w_i = 1/m for a random number of clients) and uniform sampling with size
    importances (w_i = (n/m) p_i) give rounds whose weights do not sum to one. With 40% dropout,
    renormalise scales the returned clients' weights by total / kept total, so each round keeps the
    selection's own total, and the failed clients get zero. Exact, round by round."""
    federation = Federation.from_sizes(SIZES)
    state = sampler.init(federation, 4)
    participation = Participation(dropout=Dropout(0.4, seed=9), policy="renormalise").for_run(3)
    far_from_one = 0
    for t in range(200):
        selected = select_participants(sampler, state, participation, seed=3, round=t, num_clients=SIZES.size)
        finite = np.ones(selected.clients.size, dtype=bool)
        settled = settle_participants(selected, finite, participation, seed=3, round=t, num_kept=4, estimator=None)
        total, kept = float(selected.weights.sum()), settled.kept
        if not kept.any():
            assert settled.weights.tolist() == [0.0] * kept.size  # nobody back: the server keeps its model
            continue
        far_from_one += abs(total - 1.0) > 0.05
        expected = np.where(kept, selected.weights * total / float(selected.weights[kept].sum()), 0.0)
        np.testing.assert_allclose(settled.weights, expected, rtol=1e-12)
        assert float(settled.weights.sum()) == pytest.approx(total, rel=1e-12)
    assert far_from_one > 100  # the test does exercise totals other than one


# --- redraws on clustered designs ----------------------------------------------------------------------

# Sizes with p_i = n_i / 20 and m = 2: the given rows hold clients 0-3 and 4-7, with different laws.
ROW_SIZES = np.array([4, 3, 2, 1, 1, 1, 1, 7])
GIVEN_ROWS = np.array(
    [
        [0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.1, 0.7],
    ]
)
ROUNDS = 4_000


def _never_available(clients: list[int], num_clients: int) -> TraceAvailability:
    """Every client but ``clients`` available in every round."""
    others = np.array([i for i in range(num_clients) if i not in clients], dtype=np.int64)
    return TraceAvailability(clients=others, starts=np.zeros_like(others), ends=np.full_like(others, 10**9))


@pytest.mark.parametrize(
    ("sampler", "sizes", "unavailable"),
    [
        (ClusteredSampler(rows=GIVEN_ROWS), ROW_SIZES, [0, 7]),  # disjoint rows: row 1 loses 70% of its mass
        # Alg. 1's rows, m = 2: {0, 1, 2} and {2, ..., 9}, sharing client 2.
        (SizeClusteredSampler(), np.array([8, 7, 6, 5, 4, 3, 3, 2, 1, 1]), [1, 4]),
    ],
    ids=["given-rows", "algorithm-1"],
)
def test_redrawn_entries_come_from_their_own_row_with_the_rows_law(
    sampler: Any, sizes: np.ndarray, unavailable: list[int]
) -> None:
    """Every entry of row k, redrawn or not, is a client of row k that is available, and over 4000
    rounds the clients of each row's entries, and of its redrawn entries alone, follow the row's
    law restricted to the available clients, q_ki 1{i available} / Q_k(A). Chi-square goodness of fit,
    each at p > 1e-6: over the 4 tests of a case the false-failure rate is below 4e-6."""
    n = sizes.size
    federation = Federation.from_sizes(sizes)
    state = sampler.init(federation, 2)
    design = sampler.design(state)
    assert isinstance(design, RowDesign)
    rows = design.dense_rows()
    available = np.ones(n, dtype=bool)
    available[unavailable] = False
    assert np.all((rows * ~available).sum(axis=1) > 0.05)  # each row loses mass to the unavailable
    participation = Participation(availability=_never_available(unavailable, n), redraws=100)
    seed = 12
    drawn = np.zeros((design.num_rows, n), dtype=np.int64)
    redrawn = np.zeros((design.num_rows, n), dtype=np.int64)
    for t in range(ROUNDS):
        selected = select_participants(sampler, state, participation, seed=seed, round=t, num_clients=n)
        first = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t)).clients  # before the redraws
        clients = selected.selection.clients
        assert clients.size == design.num_draws
        for k, (client, original) in enumerate(zip(clients.tolist(), first.tolist(), strict=True)):
            row = int(design.draw_rows[k])
            assert rows[row, client] > 0, f"round {t}: entry {k} of row {row} landed on client {client}"
            assert available[client]
            drawn[row, client] += 1
            if not available[original]:
                redrawn[row, client] += 1
    for k in range(design.num_rows):
        law = rows[k] * available / float((rows[k] * available).sum())
        for counts, what in ((drawn[k], "entries"), (redrawn[k], "redrawn entries")):
            assert counts[law == 0].sum() == 0
            cells = law > 0
            assert cells.sum() >= 2  # a law on one client has nothing to test
            expected = counts.sum() * law[cells]
            statistic = float(np.sum((counts[cells] - expected) ** 2 / expected))
            p_value = float(chi2.sf(statistic, df=int(cells.sum()) - 1))
            assert p_value > 1e-6, f"row {k} {what}: counts {counts.tolist()}, law {law.round(4).tolist()}"
        assert redrawn[k].sum() > 200  # the redraw path is exercised in every row
