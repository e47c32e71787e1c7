"""Power-of-Choice (Cho, Wang and Joshi, 2022), DivFL (Balakrishnan et al., 2022) and the simple
selectors (highest loss, random round robin): their rules, and their bias measured by Monte Carlo."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection, make_sampler
from fedsample.cli import main
from fedsample.samplers import DivFLSampler, HighLossSampler, PowerOfChoiceSampler, RoundRobinSampler
from fedsample.samplers.selectors.divfl import facility_location_greedy
from fedsample.stats import monte_carlo_bias, monte_carlo_statistics

SIZES = [5, 1, 3, 8, 2, 6, 4, 1, 9, 12]
N = len(SIZES)


def _losses_feedback(t: int, losses: np.ndarray, *, available: list[int] | None = None) -> Feedback:
    ids = np.arange(losses.size)
    return Feedback(
        round=t,
        selection=Selection(clients=ids, weights=np.full(ids.size, 1.0 / ids.size)),
        clients=ids,
        losses=losses,
        available=None if available is None else np.asarray(available),
    )


# --- Power-of-Choice ---------------------------------------------------------------------------


def test_choose_keeps_the_m_highest_losses_with_equal_weights() -> None:
    sampler = PowerOfChoiceSampler(num_candidates=6)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    rng = np.random.default_rng(0)
    candidates = np.array([0, 2, 4, 6, 8, 9])
    clients, weights = sampler.choose(state, candidates, np.array([0.1, 0.9, 0.5, 0.7, 0.2, 0.3]), rng)
    assert clients.tolist() == [2, 4, 6]
    assert weights.tolist() == [1 / 3] * 3
    with pytest.raises(FedsampleError, match="'losses'"):
        sampler.choose(state, candidates, np.ones(2), rng)
    with pytest.raises(FedsampleError, match=r"'candidates'.*Got \[0, 0\] instead") as info:
        sampler.choose(state, [0, 0], np.ones(2), rng)
    assert info.value.parameter == "candidates"


def test_candidates_are_d_distinct_available_clients_drawn_by_p() -> None:
    """Step 1 of Alg. 1: d distinct available clients; P(i in A) follows p (successive sampling: with
    d = 1, exactly p_i among the available, within 5 standard errors)."""
    sampler = PowerOfChoiceSampler(num_candidates=4)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=2)
    state = sampler.update(state, _losses_feedback(0, np.ones(N), available=list(range(6))))
    rng = np.random.default_rng(1)
    for _ in range(100):
        candidates = sampler.candidates(state, rng)
        assert np.unique(candidates).size == 4
        assert set(candidates.tolist()) <= set(range(6))
    single = PowerOfChoiceSampler(num_candidates=1)
    state = single.init(Federation.from_sizes(SIZES), num_sampled=1)
    counts = np.bincount(np.concatenate([single.candidates(state, rng) for _ in range(20_000)]), minlength=N)
    p = np.asarray(SIZES) / sum(SIZES)
    assert np.all(np.abs(counts / 20_000 - p) < 5 * np.sqrt(p * (1 - p) / 20_000))
    # With d = n every client is a candidate: the m highest losses are kept, every time (rpow-d).
    full = PowerOfChoiceSampler(num_candidates=N)
    state = full.update(full.init(Federation.from_sizes(SIZES), 3), _losses_feedback(0, np.arange(N, dtype=float)))
    assert full.sample(state, rng).clients.tolist() == [7, 8, 9]


def test_clients_without_a_reported_loss_rank_first() -> None:
    sampler = PowerOfChoiceSampler(num_candidates=N)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    feedback = Feedback(
        round=0, selection=Selection(clients=[0, 1], weights=[0.5, 0.5]), clients=[0, 1], losses=[9.0, 8.0]
    )
    state = sampler.update(state, feedback)
    picked = sampler.sample(state, np.random.default_rng(2)).clients
    assert not set(picked.tolist()) & {0, 1}


@pytest.mark.parametrize("num_candidates", [2, N + 1])
def test_num_candidates_outside_m_to_n_raises(num_candidates: int) -> None:
    with pytest.raises(FedsampleError, match=rf"'num_candidates'.*Got {num_candidates} instead") as info:
        PowerOfChoiceSampler(num_candidates=num_candidates).init(Federation.from_sizes(SIZES), 3)
    assert info.value.parameter == "num_candidates"


def test_power_of_choice_bias_favours_high_loss_clients() -> None:
    """Biased, stated and measured: with losses rising with the id, the last clients are selected far
    more often than their share p_i. 5000 rounds; thresholds of 8 standard errors (a false failure
    below 1e-14 per client under the null of no bias)."""
    sampler = PowerOfChoiceSampler()
    federation = Federation.from_sizes([10] * N)
    state = sampler.update(sampler.init(federation, 3), _losses_feedback(0, np.arange(N, dtype=float)))
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(3), num_rounds=5_000)
    bias = monte_carlo_bias(mc, state.importances)
    assert bias.max_z > 8
    assert mc.mean_weights.value[N - 1] - 0.1 > 8 * mc.mean_weights.stderr[N - 1]
    assert 0.1 - mc.mean_weights.value[0] > 8 * mc.mean_weights.stderr[0]


# --- DivFL -------------------------------------------------------------------------------------


def _coverage(distances: np.ndarray, subset: np.ndarray) -> float:
    return float(distances[:, subset].min(axis=1).sum())


def _plain_greedy(distances: np.ndarray, count: int) -> list[int]:
    chosen: list[int] = []
    nearest = np.full(distances.shape[0], distances.max())
    for _ in range(count):
        gains = np.maximum(nearest[None, :] - distances, 0.0).sum(axis=1)
        gains[chosen] = -1
        k = int(np.argmax(gains))
        chosen.append(k)
        nearest = np.minimum(nearest, distances[k])
    return chosen


@pytest.mark.parametrize("seed", range(5))
def test_lazy_greedy_matches_plain_greedy_and_the_1_minus_1_over_e_bound(seed: int) -> None:
    """Lazy evaluations (Minoux) reach the plain greedy's value at every step, and the
    facility-location value is within 1 - 1/e of the best subset (checked by enumeration)."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(12, 3))
    distances = np.linalg.norm(points[:, None] - points[None, :], axis=2)
    picked, representative = facility_location_greedy(distances, np.arange(12), 4, rng)
    # Equal gains may be broken either way: the greedy values agree after every step.
    plain = _plain_greedy(distances, 4)
    for k in range(1, 5):
        assert _coverage(distances, picked[:k]) == pytest.approx(_coverage(distances, np.array(plain[:k])), rel=1e-12)
    top = distances.max()
    value = 12 * top - _coverage(distances, picked)
    best = max(12 * top - _coverage(distances, np.array(s)) for s in itertools.combinations(range(12), 4))
    assert value >= (1 - 1 / np.e) * best
    np.testing.assert_array_equal(representative, picked[np.argmin(distances[:, picked], axis=1)])


def _update_feedback(t: int, clients: np.ndarray, updates: np.ndarray) -> Feedback:
    return Feedback(
        round=t,
        selection=Selection(clients=clients, weights=np.full(clients.size, 1.0)),
        clients=clients,
        updates=updates,
    )


def test_divfl_picks_one_client_per_gradient_cluster() -> None:
    """Three tight clusters of stale gradients and m = 3: one client of each, whatever the seed."""
    sampler = DivFLSampler(aggregation="assignment", representative="update")
    federation = Federation.from_sizes([1] * 9)
    state = sampler.init(federation, num_sampled=3)
    centres = np.array([[10.0, 0, 0], [0, 10.0, 0], [0, 0, 10.0]])
    labels = np.arange(9) % 3
    updates = centres[labels] + 0.01 * np.random.default_rng(4).normal(size=(9, 3))
    state = sampler.update(state, _update_feedback(0, np.arange(9), updates))
    for seed in range(10):
        selection = sampler.sample(state, np.random.default_rng(seed))
        assert sorted(labels[selection.clients].tolist()) == [0, 1, 2]
        np.testing.assert_allclose(selection.weights, 1 / 3)  # each represents three clients of p = 1/9


def test_divfl_keeps_stale_gradients_and_sketches() -> None:
    """A client's gradient stays until it reports again; with projection_dim the state keeps sketches."""
    sampler = DivFLSampler(projection_dim=4, representative="update")
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    rng = np.random.default_rng(5)
    state = sampler.update(state, _update_feedback(0, np.array([0, 1]), rng.normal(size=(2, 50))))
    first = state.gradients[0].copy()
    state = sampler.update(state, _update_feedback(1, np.array([1, 2]), rng.normal(size=(2, 50))))
    assert state.gradients.shape == (N, 4)
    assert state.update_dim == 50
    np.testing.assert_array_equal(state.gradients[0], first)
    assert np.all(state.gradients[3:] == 0)
    with pytest.raises(FedsampleError, match="'feedback'"):
        sampler.update(state, Feedback(round=2, selection=Selection(clients=[0], weights=[1.0]), clients=[0]))


def test_divfl_is_biased_towards_isolated_clients() -> None:
    """One client far from the nine others is picked every round: P(i in S) = 1, far above its share."""
    sampler = DivFLSampler(representative="update")
    state = sampler.init(Federation.from_sizes([1] * 10), num_sampled=2)
    updates = np.zeros((10, 2))
    updates[:9, 0] = np.linspace(1.0, 1.1, 9)
    updates[9] = [0.0, 50.0]
    state = sampler.update(state, _update_feedback(0, np.arange(10), updates))
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(6), num_rounds=2_000)
    assert mc.p_included.value[9] == 1.0
    assert monte_carlo_bias(mc, state.importances).max_z > 8


# --- highest loss and round robin ---------------------------------------------------------------


def test_high_loss_with_a_large_inverse_temperature_takes_the_m_highest() -> None:
    sampler = HighLossSampler(inverse_temperature=1e3)
    state = sampler.update(sampler.init(Federation.from_sizes(SIZES), 3), _losses_feedback(0, np.arange(N) / 10))
    assert sampler.sample(state, np.random.default_rng(7)).clients.tolist() == [9, 8, 7]


def test_high_loss_with_extreme_losses_stays_finite() -> None:
    """Losses at the largest a sampler reads (the feedback's bound, 1e100: beyond it a loss counts as not
    reported): no overflow warning (warnings are errors here), highest losses first; with a huge inverse
    temperature every loss but the highest has weight zero, so the highest is always in."""
    losses = np.array([-1e100, 1e100, 5e99, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    rng = np.random.default_rng(12)
    sampler = HighLossSampler(inverse_temperature=1.0)
    state = sampler.update(sampler.init(Federation.from_sizes(SIZES), 2), _losses_feedback(0, losses))
    assert sorted(sampler.sample(state, rng).clients.tolist()) == [1, 2]
    tiny = HighLossSampler(inverse_temperature=1e300)
    state = tiny.update(tiny.init(Federation.from_sizes(SIZES), 2), _losses_feedback(0, losses))
    assert all(1 in tiny.sample(state, rng).clients for _ in range(20))


def test_high_loss_draws_by_softmax_of_inverse_temperature_times_loss() -> None:
    """One draw (m = 1): P(i) = softmax(inverse_temperature * loss)_i, FLSim's softmax_temperature
    convention (it multiplies), within 5 standard errors (false failure below 6e-6 per client)."""
    sampler = HighLossSampler(inverse_temperature=2.0)
    losses = np.linspace(0.0, 1.0, N)
    state = sampler.update(sampler.init(Federation.from_sizes(SIZES), 1), _losses_feedback(0, losses))
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(8), num_rounds=10_000)
    softmax = np.exp(2.0 * losses) / np.exp(2.0 * losses).sum()
    assert np.all(mc.p_included.deviation(softmax) < 5)


@pytest.mark.parametrize(("num_clients", "m"), [(10, 2), (10, 3)])
def test_round_robin_visits_every_client_once_a_cycle(num_clients: int, m: int) -> None:
    sampler = RoundRobinSampler()
    state = sampler.init(Federation.from_sizes([1] * num_clients), num_sampled=m)
    rng = np.random.default_rng(9)
    seen: list[int] = []
    rounds = -(-num_clients // m)
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        assert np.unique(selection.clients).size == m
        seen += selection.clients.tolist()
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=np.sort(selection.clients)))
    assert set(seen) == set(range(num_clients))
    assert len(seen) - num_clients == rounds * m - num_clients  # repeats only to fill the last round


@pytest.mark.parametrize("name", ["oort", "power-of-choice", "high-loss", "round-robin"])
def test_feedback_without_losses_keeps_selecting_sensibly(name: str) -> None:
    """Rounds that report no loss (the engine's first rounds, or a caller without losses) leave the
    learned losses as they were, and every round still selects m distinct clients."""
    sampler = make_sampler(name)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    rng = np.random.default_rng(10)
    for t in range(2 * N):
        selection = sampler.sample(state, rng)
        assert np.unique(selection.clients).size == 3
        assert selection.weights.sum() == pytest.approx(1.0)
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=np.unique(selection.clients)))
    if name == "oort":
        assert not state.explored.any()
    else:
        assert not np.isfinite(state.losses).any()


def test_divfl_without_update_vectors_raises() -> None:
    sampler = DivFLSampler(representative="update")
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    selection = sampler.sample(state, np.random.default_rng(11))
    with pytest.raises(FedsampleError, match=r"'feedback'.*updates") as info:
        sampler.update(state, Feedback(round=0, selection=selection, clients=np.unique(selection.clients)))
    assert info.value.parameter == "feedback"


SYSTEMS = ["oort", "power-of-choice", "divfl", "high-loss", "round-robin"]


@pytest.mark.parametrize("name", SYSTEMS)
def test_cli_sample_draws_each_system(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``fedsample sample NAME`` draws m distinct clients a round at the initial state."""
    assert main(["sample", name, "--sizes", ",".join(map(str, SIZES)), "-m", "3", "--rounds", "4", "--json"]) == 0
    rounds = json.loads(capsys.readouterr().out)["rounds"]
    assert len(rounds) == 4
    for entry in rounds:
        assert len(set(entry["clients"])) == 3
        assert sum(entry["weights"]) == pytest.approx(1.0)


def test_cli_stats_estimates_each_system_by_monte_carlo(capsys: pytest.CaptureFixture[str]) -> None:
    """``fedsample stats`` has no closed form for these samplers: Monte Carlo estimates with their bias."""
    sizes = ",".join(map(str, SIZES))
    args = ["stats", "--samplers", ",".join(SYSTEMS), "--sizes", sizes, "-m", "3", "--monte-carlo", "300", "--json"]
    assert main(args) == 0
    samplers = json.loads(capsys.readouterr().out)["samplers"]
    assert set(samplers) == set(SYSTEMS)
    for entry in samplers.values():
        assert entry["exact"] is False
        assert entry["monte_carlo"]["num_rounds"] == 300
        assert set(entry["monte_carlo"]["bias"]) == {"max_bias", "client", "stderr", "max_z"}
