"""Oort (Lai et al., OSDI 2021): utility, exploration, system penalty, pacer, cut-off, availability and
its bias measured by Monte Carlo on a fixed feedback sequence."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection
from fedsample.cli import main
from fedsample.samplers import OortSampler, OortState
from fedsample.samplers.persistence import save_sampler
from fedsample.stats import monte_carlo_bias, monte_carlo_statistics

SIZES = [5, 1, 3, 8, 2, 6, 4, 1, 9, 12]


def _feedback(
    t: int,
    clients: list[int],
    *,
    squares: list[float] | None = None,
    losses: list[float] | None = None,
    times: list[float] | None = None,
    available: list[int] | None = None,
) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    return Feedback(
        round=t,
        selection=Selection(clients=ids, weights=np.full(ids.size, 1.0 / max(ids.size, 1))),
        clients=ids,
        loss_squares=None if squares is None else np.asarray(squares),
        losses=None if losses is None else np.asarray(losses),
        round_times=None if times is None else np.asarray(times),
        available=None if available is None else np.asarray(available),
    )


def _explored_state(sampler: OortSampler, squares: list[float], times: list[float] | None = None) -> OortState:
    """Every client of SIZES reports ``squares`` (and ``times``) in round 0."""
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    return sampler.update(state, _feedback(0, list(range(len(SIZES))), squares=squares, times=times))


def test_statistical_utility_is_size_times_root_mean_square_loss() -> None:
    """U_i = |B_i| sqrt(mean Loss^2) (Oort §4.2); with only the mean loss, |B_i| |mean| (a lower bound)."""
    sampler = OortSampler()
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    state = sampler.update(state, _feedback(0, [0, 3], squares=[4.0, 0.25]))
    assert state.utility[[0, 3]].tolist() == [5 * 2.0, 8 * 0.5]
    assert state.explored.tolist() == [i in (0, 3) for i in range(len(SIZES))]
    state = sampler.update(state, _feedback(1, [1], losses=[-3.0]))
    assert state.utility[1] == 1 * 3.0
    # Non-finite or negative mean squares, and means whose square overflows, count as not reported.
    state = sampler.update(state, _feedback(2, [2, 4, 5], squares=[np.nan, -1.0, np.inf]))
    state = sampler.update(state, _feedback(3, [6], losses=[1e200]))
    assert not state.explored[[2, 4, 5, 6]].any()
    assert state.last_round[[0, 1, 3, 6]].tolist() == [1, 2, 1, 4]


def test_without_losses_every_client_stays_unexplored_and_is_explored_uniformly() -> None:
    """Feedback without losses explores: selections come from the unexplored clients, uniformly."""
    sampler = OortSampler()
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    state = sampler.update(state, _feedback(0, [0, 1, 2]))
    assert not state.explored.any()
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=20_000)
    # P(i in S) = 3/10 for all: within 5 standard errors (false failure below 6e-6 per client).
    assert np.all(mc.p_included.deviation(np.full(len(SIZES), 0.3)) < 5)


def test_exploration_decays_to_its_floor() -> None:
    sampler = OortSampler(exploration=0.9, exploration_decay=0.5, exploration_min=0.2)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    epsilons = []
    for t in range(4):
        state = sampler.update(state, _feedback(t, [t]))
        epsilons.append(state.epsilon)
    assert epsilons == [0.45, 0.225, 0.2, 0.2]


def test_exploration_share_of_a_round() -> None:
    """With epsilon = 1/3 and K = 3, one slot goes to an unexplored client, two to explored ones."""
    sampler = OortSampler(exploration=1 / 3, exploration_decay=1.0, exploration_min=0.0)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    state = sampler.update(state, _feedback(0, [0, 1, 2, 3, 4], squares=[1.0] * 5))
    rng = np.random.default_rng(1)
    for _ in range(50):
        clients = sampler.sample(state, rng).clients
        assert int(np.sum(state.explored[clients])) == 2


def test_cutoff_admits_only_clients_near_the_kth_utility() -> None:
    """Exploitation (§4.4): clients below c x the K-th utility are never picked; the rest by utility."""
    sampler = OortSampler(exploration=0.0, exploration_min=0.0, staleness=0.0, cutoff=0.95)
    squares = [1.0] * len(SIZES)
    state = _explored_state(sampler, squares)
    # Utilities n_i: the 3rd highest is 8 (sizes 12, 9, 8): admitted are >= 7.6, i.e. clients 8, 9, 3.
    rng = np.random.default_rng(2)
    for _ in range(30):
        assert sorted(sampler.sample(state, rng).clients.tolist()) == [3, 8, 9]
    looser = OortSampler(exploration=0.0, exploration_min=0.0, staleness=0.0, cutoff=0.5)
    picked = np.concatenate([looser.sample(state, rng).clients for _ in range(300)])
    assert set(picked.tolist()) == {0, 3, 5, 6, 8, 9}  # utilities >= 4: n_i in {5, 8, 6, 4, 9, 12}


def test_system_penalty_multiplies_slow_clients_by_t_over_t_i_to_the_alpha() -> None:
    """(T / t_i)^alpha for t_i > T (§4.3); T is the duration_quantile level of the known round times."""
    sampler = OortSampler(round_penalty=2.0, duration_quantile=0.5, staleness=0.0)
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    state = _explored_state(sampler, [1.0] * len(SIZES), times)
    assert state.preferred_duration == pytest.approx(5.5)
    clients = np.arange(len(SIZES))
    utility = np.asarray(SIZES, dtype=float) / max(SIZES)
    penalty = np.where(np.asarray(times) > 5.5, (5.5 / np.asarray(times)) ** 2, 1.0)
    np.testing.assert_allclose(sampler.scores(state, clients), utility * penalty, rtol=1e-14)


def test_staleness_bonus() -> None:
    """Alg. 1: + sqrt(0.1 log R / L_i), R the round about to be drawn, L_i the client's last round."""
    sampler = OortSampler(staleness=0.1, round_penalty=0.0)
    state = _explored_state(sampler, [1.0] * len(SIZES))
    state = sampler.update(state, _feedback(1, [0]))  # client 0 last took part in round 2
    # Statistical utilities are normalised by the largest among the clients scored (all of them here).
    bonus = sampler.scores(state, np.arange(len(SIZES)))[:2] - np.array([SIZES[0], SIZES[1]]) / max(SIZES)
    np.testing.assert_allclose(bonus, [math.sqrt(0.1 * math.log(3) / 2), math.sqrt(0.1 * math.log(3) / 1)])


def test_pacer_relaxes_the_preferred_duration_when_utility_stalls() -> None:
    """Every W rounds, if the last W rounds gathered less utility than the W before, T's level rises."""
    sampler = OortSampler(pacer_window=2, pacer_step=0.25, duration_quantile=0.25)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    levels = []
    for t, square in enumerate([4.0, 4.0, 1.0, 1.0, 1.0, 4.0]):
        state = sampler.update(state, _feedback(t, [t], squares=[square], times=[float(t + 1)]))
        levels.append(state.quantile)
    # Round 4 closes the window (1, 1) after (4, 4): relaxed; round 6 closes (1, 4) after (1, 1): kept.
    assert levels == [0.25, 0.25, 0.25, 0.5, 0.5, 0.5]
    assert state.preferred_duration == pytest.approx(np.quantile([1, 2, 3, 4, 5, 6], 0.5))


def test_selection_is_among_available_clients() -> None:
    sampler = OortSampler()
    state = _explored_state(sampler, [1.0] * len(SIZES))
    state = sampler.update(state, _feedback(1, [], available=[1, 4, 6, 7]))
    rng = np.random.default_rng(3)
    for _ in range(40):
        assert set(sampler.sample(state, rng).clients.tolist()) <= {1, 4, 6, 7}
    state = sampler.update(state, _feedback(2, [], available=[5]))
    assert sampler.sample(state, rng).clients.tolist() == [5]
    with pytest.raises(FedsampleError, match="'feedback'"):
        sampler.update(state, _feedback(3, [], available=[10]))


def test_aggregation_is_fedavg_over_participants() -> None:
    """Oort keeps the framework's aggregation: p_i / sum_S p_j (or 1/K)."""
    state = _explored_state(OortSampler(), [1.0] * len(SIZES))
    p = np.asarray(SIZES) / sum(SIZES)
    for aggregation in ("size", "average"):
        selection = OortSampler(aggregation=aggregation).sample(state, np.random.default_rng(4))
        expected = p[selection.clients] / p[selection.clients].sum() if aggregation == "size" else np.full(3, 1 / 3)
        np.testing.assert_allclose(selection.weights, expected)


@pytest.mark.parametrize(
    ("parameter", "value"),
    [("exploration", 1.5), ("exploration_decay", 0.0), ("cutoff", 0.0), ("pacer_window", 0), ("round_penalty", -1.0)],
)
def test_bad_hyperparameters_raise(parameter: str, value: float) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        OortSampler(**{parameter: value})  # type: ignore[arg-type]
    assert info.value.parameter == parameter


def _fixed_sequence_state() -> tuple[OortSampler, OortState]:
    """Oort after a fixed feedback sequence: every client reports once, loss rising with its id."""
    sampler = OortSampler()
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    n = len(SIZES)
    for t in range(n):
        state = sampler.update(state, _feedback(t, [t], squares=[float(1 + t) ** 2], times=[1.0 + (t % 3)]))
    assert state.explored.all()
    assert state.round == n
    return sampler, state


def test_bias_is_measured_by_monte_carlo_on_a_fixed_feedback_sequence() -> None:
    """Oort is biased by design: E[w_i] differs from p_i, by many standard errors.

    Under unbiasedness each client's |mean - p_i| / stderr is about standard normal; 5000 rounds
    put Oort's largest deviation far above 8 standard errors (a false positive below 1e-14 per
    client), and the clients with the largest utility get more than their share.
    """
    sampler, state = _fixed_sequence_state()
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(5), num_rounds=5_000)
    bias = monte_carlo_bias(mc, state.importances)
    assert bias.max_z > 8
    assert bias.max_bias > 8 * bias.stderr
    high, low = 9, 1  # the largest utility (12 x 10) against a small one (1 x 2)
    assert mc.mean_weights.value[high] - state.importances[high] > 8 * mc.mean_weights.stderr[high]
    assert mc.p_included.value[high] > mc.p_included.value[low]


def test_cli_stats_reports_the_bias_of_a_saved_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``fedsample stats --sampler-state`` estimates a learned Oort state's bias by Monte Carlo."""
    sampler, state = _fixed_sequence_state()
    path = tmp_path / "oort.json"
    save_sampler(path, sampler, state)
    assert main(["stats", "--sampler-state", str(path), "--monte-carlo", "5000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (entry,) = out["samplers"].values()
    assert entry["exact"] is False
    assert entry["monte_carlo"]["bias"]["max_z"] > 5
    assert main(["stats", "--sampler-state", str(path), "--monte-carlo", "5000"]) == 0
    assert "(biased)" in capsys.readouterr().out


def test_feedback_fields_for_the_selection_systems_are_read_only_arrays() -> None:
    """loss_squares and round_times are float64, available int64; all read-only, None by default."""
    feedback = _feedback(0, [0, 2], squares=[1, 4], times=[3, 5], available=[0, 1, 2])
    assert feedback.loss_squares is not None
    assert feedback.round_times is not None
    assert feedback.available is not None
    assert (feedback.loss_squares.dtype, feedback.round_times.dtype) == (np.float64, np.float64)
    assert feedback.available.dtype == np.int64
    for array in (feedback.loss_squares, feedback.round_times, feedback.available):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0
    bare = _feedback(0, [0])
    assert (bare.loss_squares, bare.round_times, bare.available) == (None, None, None)
