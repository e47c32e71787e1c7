"""Oort as FedScale 1.0 releases it: utility, normalisation, staleness, preferred duration and pacer,
availability, aggregation, and its bias measured by Monte Carlo on a fixed feedback sequence.

The selection rules (exploration count, admission, exploration weights) are in
``test_oort_selection.py``; FedScale's code is cited as ``oort.py`` (``thirdparty/oort/oort.py`` at
FedScale ``7ec441c``, see ``benchmarks/reference/README.md``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection
from fedsample.cli import main
from fedsample.samplers import OortSampler, OortState, make_sampler
from fedsample.samplers.persistence import sampler_from_dict, sampler_to_dict, save_sampler
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
    selected: list[int] | None = None,
    timed_out: list[int] | None = None,
) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    asked = np.asarray(clients + (timed_out or []) if selected is None else selected, dtype=np.int64)
    return Feedback(
        round=t,
        selection=Selection(clients=asked, weights=np.full(asked.size, 1.0 / max(asked.size, 1))),
        clients=ids,
        loss_squares=None if squares is None else np.asarray(squares),
        losses=None if losses is None else np.asarray(losses),
        round_times=None if times is None else np.asarray(times),
        available=None if available is None else np.asarray(available),
        timed_out=None if timed_out is None else np.asarray(timed_out, dtype=np.int64),
        timed_out_seconds=None if timed_out is None else np.full(len(timed_out), 60.0),
    )


def _explored_state(sampler: OortSampler, squares: list[float], times: list[float] | None = None) -> OortState:
    """Every client of SIZES reports ``squares`` (and ``times``) in round 1."""
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    return sampler.update(state, _feedback(0, list(range(len(SIZES))), squares=squares, times=times))


def test_statistical_utility_is_capped_size_times_root_mean_square_loss() -> None:
    """U_i = |B_i| sqrt(mean Loss^2), |B_i| = min(n_i, samples_per_round) (FedScale's client reports
    ``sqrt(mean) x min(n_i, local_steps x batch_size)``); unexplored clients hold the placeholder
    min(n_i, samples_per_round) (``client_manager.py`` 62); with only the mean loss, |B_i| |mean|."""
    sampler = OortSampler(samples_per_round=4)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    assert state.utility.tolist() == [min(s, 4) for s in SIZES]
    state = sampler.update(state, _feedback(0, [0, 3], squares=[4.0, 0.25]))
    assert state.utility[[0, 3]].tolist() == [4 * 2.0, 4 * 0.5]
    assert state.explored.tolist() == [i in (0, 3) for i in range(len(SIZES))]
    state = sampler.update(state, _feedback(1, [1], losses=[-3.0]))
    assert state.utility[1] == 1 * 3.0
    # Non-finite or negative mean squares, and means whose square overflows, count as not reported.
    state = sampler.update(state, _feedback(2, [2, 4, 5], squares=[np.nan, -1.0, np.inf]))
    state = sampler.update(state, _feedback(3, [6], losses=[1e200]))
    assert not state.explored[[2, 4, 5, 6]].any()
    # The round of each client's last report (those that reported nothing keep 0).
    assert state.last_round.tolist() == [1, 2, 0, 1, 0, 0, 0, 0, 0, 0]
    # FedScale's default cap is 600 (local_steps 20 x batch_size 30); None: |B_i| = n_i.
    assert OortSampler().samples_per_round == 600
    uncapped = OortSampler(samples_per_round=None)
    assert uncapped.init(Federation.from_sizes([1000, 10]), 1).utility.tolist() == [1000.0, 10.0]


def test_the_first_round_is_uniform_whatever_the_sizes() -> None:
    """FedScale's ClientManager draws round 1 uniformly (Oort is asked from round 2 on)."""
    sampler = OortSampler()
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(0), num_rounds=20_000)
    # P(i in S) = 3/10 for all: within 5 standard errors (false failure below 6e-6 per client).
    assert np.all(mc.p_included.deviation(np.full(len(SIZES), 0.3)) < 5)


def test_exploration_decays_to_fedscales_floor_of_0_3() -> None:
    """epsilon <- max(0.98 epsilon, 0.3) each round (``oort.py`` 315, ``exploration_min`` 0.3)."""
    sampler = OortSampler()
    assert (sampler.exploration, sampler.exploration_decay, sampler.exploration_min) == (0.9, 0.98, 0.3)
    state = sampler.init(Federation.from_sizes(SIZES), num_sampled=3)
    epsilons = []
    for t in range(60):
        state = sampler.update(state, _feedback(t, [t % 10]))
        epsilons.append(state.epsilon)
    expected, value = [], 0.9
    for _ in range(60):
        value = max(value * 0.98, 0.3)
        expected.append(value)
    assert epsilons == expected
    assert epsilons[-1] == 0.3


def test_scores_normalise_by_the_range_over_every_positive_reward_placeholders_included() -> None:
    """``oort.py`` 280-311: rewards of the available, non-blacklisted clients with a positive reward
    (the unexplored ones' placeholders too) give the clip (index int(0.9 len) of them sorted), the
    bottom (0.999 x their smallest) and the range (largest minus bottom); an explored client scores
    (min(reward, clip) - bottom) / range, no staleness bonus in the first Oort round (ln 1 = 0)."""
    sampler = OortSampler()  # every size below the cap of 600: the placeholders are the sizes
    sizes = [*SIZES, 7, 3, 5, 2, 11, 4, 6, 8, 2, 3]
    state = sampler.init(Federation.from_sizes(sizes), num_sampled=3)
    state = sampler.update(state, _feedback(0, [0, 1, 2], squares=[400.0, 1.0, 9.0]))  # utilities 100, 1, 9
    rewards = sorted([100.0, 1.0, 9.0] + [float(s) for s in sizes[3:]])  # explored + placeholders n_i
    clip = rewards[int(len(rewards) * 0.9)]  # index 18 of 20: 12, client 9's placeholder
    bottom, top = 0.999 * rewards[0], rewards[-1]
    expected = [(min(u, clip) - bottom) / (top - bottom) for u in (100.0, 1.0, 9.0)]
    np.testing.assert_allclose(sampler.scores(state, np.array([0, 1, 2])), expected, rtol=1e-14)
    assert clip == 12.0


def test_staleness_bonus_uses_the_round_of_the_last_report_one_later_for_a_time_out() -> None:
    """``oort.py`` 298-299: + sqrt(0.1 ln t / L_i), t the selector's counter (the round being drawn
    minus one) and L_i the round of the client's last report; a straggler's report is stamped with
    the next round (FedScale's aggregator reports it when that round starts)."""
    sampler = OortSampler(round_penalty=0.0)
    state = _explored_state(sampler, [1.0] * len(SIZES))  # everyone reported in round 1
    state = sampler.update(state, _feedback(1, [0], squares=[1.0], timed_out=[1]))  # round 2
    clients = np.arange(4)
    # Rewards: the sizes, client 1's replaced by the round's mean (client 0's 5); the clip at index
    # int(10 x 0.9) = 9 is the largest, 12; the bottom 0.999 x 1.
    rewards = np.array([5.0, 5.0, 3.0, 8.0])
    base = (rewards - 0.999) / (12.0 - 0.999)
    # Round 3 is drawn: t = 2; client 0 reported in round 2, client 1 timed out in it (stamp 3).
    stamps = np.array([2, 3, 1, 1])
    np.testing.assert_allclose(sampler.scores(state, clients) - base, np.sqrt(0.1 * math.log(2) / stamps))
    assert state.timed_out.tolist() == [i == 1 for i in range(len(SIZES))]
    assert state.last_round[:3].tolist() == [2, 2, 1]


def test_the_system_penalty_multiplies_the_whole_score_of_a_slow_client() -> None:
    """(T / t_i)^alpha for t_i > T, bonus included (``oort.py`` 304-306)."""
    sampler = OortSampler(round_penalty=2.0, duration_percentile=50.0)
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    state = _explored_state(sampler, [1.0] * len(SIZES), times)
    state = sampler.update(state, _feedback(1, [], squares=[]))
    assert state.preferred_duration == 6.0  # index int(10 x 50 / 100) = 5 of the sorted times
    clients = np.arange(len(SIZES))
    unpenalised = OortSampler(round_penalty=0.0, duration_percentile=50.0).scores(state, clients)
    penalty = np.minimum(1.0, (6.0 / np.asarray(times)) ** 2)
    np.testing.assert_allclose(sampler.scores(state, clients), unpenalised * penalty, rtol=1e-14)


def test_the_preferred_duration_is_an_order_statistic_of_the_round_times_known_up_front() -> None:
    """``oort.py`` 274-278: T is the element at index int(n x level / 100) of all clients' round times
    sorted (no interpolation), known from registration; infinite at level 100. Without ``durations``
    the order statistic runs over the times known so far, and an unknown time is not penalised."""
    times = np.array([10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0])
    federation = Federation.from_sizes(SIZES)
    state = OortSampler().init(federation, num_sampled=3, durations=times)
    assert state.preferred_duration == 4.0  # sorted[int(10 x 30 / 100)] = sorted[3]; np.quantile says 3.7
    assert OortSampler(duration_percentile=25.0).init(federation, 3, durations=times).preferred_duration == 3.0
    assert math.isinf(OortSampler(duration_percentile=100.0).init(federation, 3, durations=times).preferred_duration)
    partly = times.copy()
    partly[[0, 2, 4]] = np.inf  # three unknown: the order statistic of the seven known
    state = OortSampler().init(federation, 3, durations=partly)
    assert state.preferred_duration == 3.0  # sorted known [1..7][int(7 x 0.3) = 2]
    assert OortSampler().penalty(state, np.array([0, 6])).tolist() == [1.0, (3.0 / 7.0) ** 2]
    assert math.isinf(OortSampler().init(federation, 3).preferred_duration)  # nothing known


@pytest.mark.parametrize(
    "durations", [[1.0] * 9, [-1.0] + [1.0] * 9, [np.nan] + [1.0] * 9, "fast", [[1.0] * 10]], ids=repr
)
def test_durations_that_are_not_round_times_are_refused(durations: object) -> None:
    with pytest.raises(FedsampleError, match="'durations'") as info:
        OortSampler().init(Federation.from_sizes(SIZES), 3, durations=durations)  # type: ignore[arg-type]
    assert info.value.parameter == "durations"


def _pacer_run(utilities: list[float]) -> list[float]:
    """W = 2; round 1: everyone reports (nobody exploited yet, signal 0); round r >= 2: client 0, an
    explored client and so an exploited one, reports utility ``utilities[r - 2]``. The level after
    each round."""
    sampler = OortSampler(pacer_window=2, samples_per_round=None)
    federation = Federation.from_sizes([1] * 10)
    state = sampler.init(federation, num_sampled=3, durations=np.arange(1.0, 11.0))
    state = sampler.update(state, _feedback(0, list(range(10)), squares=[1.0] * 10))
    levels = [state.percentile]
    for t, utility in enumerate(utilities, start=1):
        state = sampler.update(state, _feedback(t, [0], squares=[utility**2]))
        levels.append(state.percentile)
        expected = math.inf if state.percentile >= 100 else float(int(10 * state.percentile / 100) + 1)
        assert state.preferred_duration == expected
    return levels


def test_pacer_relaxes_on_stagnation_tightens_on_a_sharp_change_and_holds_otherwise() -> None:
    """``oort.py`` 187-202, every W selections from 2 W on: the summed signal of the last W rounds
    within 10% of the W before: level + 5; differing by 5 times the older or more: level - 5; else
    unchanged. The signal is the mean utility of the round's exploited clients (``calculateSumUtil``).

    Rounds 4, 6, 8, 10 close windows: (0 + 10) -> (5 + 5.5), 5% apart: +5; (10.5) -> (80), 6.6x:
    -5; (80) -> (50 + 25), 6% apart: +5; (75) -> (200), 1.7x: held. The old "relax when utility
    fell" rule would have held at round 4 and relaxed at round 8 only."""
    levels = _pacer_run([10.0, 5.0, 5.5, 40.0, 40.0, 50.0, 25.0, 100.0, 100.0])
    assert levels == [30.0, 30.0, 30.0, 35.0, 35.0, 30.0, 30.0, 35.0, 35.0, 35.0]


def test_pacer_level_stays_between_its_step_and_100() -> None:
    """Stagnant utility raises the level 5 points a window up to 100, where T is infinite; utility
    growing tenfold a window lowers it 5 points a window down to ``pacer_delta`` (5)."""
    stagnant = _pacer_run([1.0] * 40)
    assert stagnant[3] == 30.0  # round 4: (0 + 1) -> (1 + 1) is neither within 10% nor 5x
    assert stagnant[5] == 35.0  # round 6: (1 + 1) -> (1 + 1)
    assert stagnant[-1] == 100.0
    growing = _pacer_run([10.0 ** (r // 2) for r in range(2, 20)])
    assert growing[:6] == [30.0, 30.0, 30.0, 25.0, 25.0, 20.0]
    assert growing[-1] == 5.0


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
    [
        ("exploration", 1.5),
        ("exploration_decay", 0.0),
        ("cutoff", 1.5),
        ("pacer_window", 0),
        ("round_penalty", -1.0),
        ("duration_percentile", 101.0),
        ("pacer_delta", -5.0),
        ("exploration_window", 0.5),
        ("samples_per_round", 0),
    ],
)
def test_bad_hyperparameters_raise(parameter: str, value: float) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        OortSampler(**{parameter: value})  # type: ignore[arg-type]
    assert info.value.parameter == parameter


@pytest.mark.parametrize(("old", "new"), [("duration_quantile", "duration_percentile"), ("pacer_step", "pacer_delta")])
def test_the_previous_parameter_names_are_refused_with_a_hint(old: str, new: str) -> None:
    """The same number would now mean something else (a percentage, not a quantile level)."""
    with pytest.raises(FedsampleError, match=f"'{old}'.*no longer exists.*{new}") as info:
        make_sampler("oort", **{old: 0.3})
    assert info.value.parameter == old


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


def test_state_with_durations_timeouts_and_pacer_survives_json_and_resume() -> None:
    sampler = OortSampler(pacer_window=2)
    times = np.linspace(1.0, 10.0, len(SIZES))
    state = sampler.init(Federation.from_sizes(SIZES), 3, durations=times)
    rng = np.random.default_rng(6)
    for t in range(7):
        selection = sampler.sample(state, rng)
        clients = selection.clients.tolist()
        state = sampler.update(state, _feedback(t, clients[1:], squares=[1.0 + t] * 2, timed_out=clients[:1]))
    loaded_sampler, loaded = sampler_from_dict(json.loads(json.dumps(sampler_to_dict(sampler, state))))
    assert loaded_sampler == sampler
    for name in ("utility", "durations", "timed_out", "last_round", "participations", "history"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(state, name))
    assert (loaded.percentile, loaded.preferred_duration, loaded.epsilon) == (
        state.percentile,
        state.preferred_duration,
        state.epsilon,
    )
    first = sampler.sample(state, np.random.default_rng(7)).clients
    np.testing.assert_array_equal(loaded_sampler.sample(loaded, np.random.default_rng(7)).clients, first)


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
