"""The row-draw protocol and the one redraw loop (fedsample.samplers.row_draws), shared by the
engine's designs, the population samplers and select_participants."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, MDSampler, SizeClusteredSampler
from fedsample.participation import BernoulliAvailability, Participation, TraceAvailability, select_participants
from fedsample.samplers.population.samplers import Population, PopulationClusteredSampler, PopulationMDSampler
from fedsample.samplers.row_draws import RowDraws, redraw_unavailable

SIZES = np.array([4, 3, 2, 1, 1, 1, 1, 7])
# Thirty clients of sizes 1 to 5: every clustered row (m <= 3) holds at least eight of them.
MANY = np.arange(30) % 5 + 1


def _available_only(clients: list[int]) -> TraceAvailability:
    ids = np.array(clients, dtype=np.int64)
    return TraceAvailability(clients=ids, starts=np.zeros_like(ids), ends=np.full_like(ids, 10**9))


def test_engine_designs_and_population_states_are_row_designs() -> None:
    federation = Federation.from_sizes(SIZES)
    population = Population.from_sizes(SIZES)
    designs = [
        MDSampler().design(MDSampler().init(federation, 3)),
        SizeClusteredSampler().design(SizeClusteredSampler().init(federation, 3)),
        PopulationMDSampler().init(population, 3),
        PopulationClusteredSampler().init(population, 3),
    ]
    for design in designs:
        assert isinstance(design, RowDraws)
        clients = design.draw_from_rows(design.draw_rows, np.random.default_rng(0))
        assert clients.shape == (3,)
        np.testing.assert_allclose(design.entry_weights(clients).sum(), 1.0)


def test_the_stopping_rule_counts_every_unavailable_candidate() -> None:
    """A row with no available client stays pending after `redraws` doubling batches: 1 + 2 + 4 + 8 draws each."""
    state = PopulationMDSampler().init(Population.from_sizes(SIZES), 4)
    never = _available_only([])
    clients = state.draw_from_rows(state.draw_rows, np.random.default_rng(1))
    redrawn = redraw_unavailable(state, state.draw_rows, clients, never, 0, np.random.default_rng(2), redraws=3)
    np.testing.assert_array_equal(redrawn.pending, np.arange(4))
    assert redrawn.unavailable == 4 * (1 + 2 + 4 + 8)
    np.testing.assert_array_equal(redrawn.clients, clients)  # pending entries keep their first draw
    none = redraw_unavailable(state, state.draw_rows, clients, never, 0, np.random.default_rng(2), redraws=0)
    assert none.unavailable == 4
    assert none.pending.size == 4


def test_redrawn_entries_land_on_available_clients_of_their_row() -> None:
    state = PopulationClusteredSampler().init(Population.from_sizes(MANY), 2)
    availability = BernoulliAvailability(0.3, seed=5)
    rows = state.draw_rows
    for t in range(50):
        rng = np.random.default_rng(t)
        clients = state.draw_from_rows(rows, rng)
        redrawn = redraw_unavailable(state, rows, clients, availability, t, rng, redraws=20)
        for j, (k, client) in enumerate(zip(rows, redrawn.clients, strict=True)):
            members, units = state.row(int(k))
            assert client in members[units > 0]
            # An entry stays pending only when its row has no available client (2^21 - 2 candidates).
            row_has_one = bool(availability.available(t, members[units > 0]).any())
            assert (j in redrawn.pending) == (not row_has_one)
            assert bool(availability.available(t, [client])[0]) == row_has_one
        assert redrawn.unavailable >= int((~availability.available(t, clients)).sum())


@pytest.mark.parametrize("sampler", [PopulationMDSampler(), PopulationClusteredSampler()], ids=["md", "clustered"])
def test_select_participants_redraws_the_population_samplers_entries(sampler: object) -> None:
    """The engine's round procedure redraws a population sampler's unavailable entries by the same loop."""
    federation = Federation.from_sizes(MANY)
    state = sampler.init(federation, 3)  # type: ignore[attr-defined]
    availability = BernoulliAvailability(0.8, seed=3)
    participation = Participation(availability=availability, redraws=10)
    hits = 0
    for t in range(40):
        selected = select_participants(sampler, state, participation, seed=0, round=t, num_clients=MANY.size)  # type: ignore[arg-type]
        assert selected.selection.num_draws == 3
        assert selected.available.all()
        np.testing.assert_allclose(selected.selection.weights, 1 / 3)
        hits += selected.unavailable
    assert hits > 10  # the redraw path is exercised
