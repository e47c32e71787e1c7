"""Availability and failures: the policies' bias, by Monte Carlo with fixed client updates.

The aggregated update of round ``t`` is ``U_t = sum_i w'_i u_i`` with fixed vectors ``u_i`` and the
weights ``w'_i`` produced by the engine's own code path (:func:`select_participants` then
:func:`settle_participants`). Under full participation the update is ``sum_i p_i u_i``. Each test
z-tests the mean of ``U_t`` over ``R`` rounds per coordinate against it, two-sided at family-wise
confidence 99.9% (Bonferroni over the ``d`` coordinates: ``|z| < Phi^-1(1 - 0.001 / (2 d))``).
Rounds are independent (hashed fates keyed by the round, a fresh sampling stream per round), so
the plain standard error of the mean applies. Seeds are fixed: the outcome is deterministic.
"""

from __future__ import annotations

import dataclasses
import time
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from fedsample import Federation
from fedsample.errors import FedsampleError
from fedsample.participation.availability import AlwaysAvailable, BernoulliAvailability, Dropout, TraceAvailability
from fedsample.participation.procedure import select_participants, settle_participants
from fedsample.participation.setting import Participation
from fedsample.samplers import MDSampler, PoissonSampler, UniformSampler
from fedsample.stats.participation import format_participation, participation_statistics

NUM_CLIENTS = 20
DIMENSION = 5
CONFIDENCE = 0.999
Z_CRITICAL = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / (2 * DIMENSION))  # 3.72


def _federation_and_updates() -> tuple[Federation, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    federation = Federation.from_sizes(rng.integers(20, 200, NUM_CLIENTS))
    # Heterogeneous dropout, 30% on average, and updates that trend with it: the clients that
    # fail most pull the full-participation update one way, so losing them biases renormalise.
    dropout = np.linspace(0.05, 0.55, NUM_CLIENTS)
    updates = rng.normal(size=(NUM_CLIENTS, DIMENSION)) + 4.0 * dropout[:, None]
    return federation, dropout, updates


def _aggregated_updates(
    sampler: Any, participation: Participation, policies: tuple[str, ...], *, rounds: int, num_sampled: int = 10
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``U_t`` per policy (``rounds x d``) from the same draws, and the full-participation update."""
    federation, _, updates = _federation_and_updates()
    state = sampler.init(federation, participation.num_asked(num_sampled))
    seed = 5
    settings = {p: dataclasses.replace(participation, policy=p).for_run(seed) for p in policies}
    estimators = {p: settings[p].new_estimator(NUM_CLIENTS) for p in policies}
    out = {p: np.zeros((rounds, DIMENSION)) for p in policies}
    run = participation.for_run(seed)
    for t in range(rounds):
        selected = select_participants(sampler, state, run, seed=seed, round=t, num_clients=NUM_CLIENTS)
        finite = np.ones(selected.clients.size, dtype=bool)
        for p in policies:
            settled = settle_participants(
                selected, finite, settings[p], seed=seed, round=t, num_kept=num_sampled, estimator=estimators[p]
            )
            out[p][t] = settled.weights @ updates[selected.clients]
    return out, np.asarray(federation.importances) @ updates


def _max_abs_z(samples: np.ndarray, target: np.ndarray) -> float:
    mean = samples.mean(axis=0)
    stderr = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    return float(np.max(np.abs(mean - target) / stderr))


@pytest.mark.parametrize(
    ("extra", "num_sampled"),
    [
        pytest.param({}, 10, id="dropout"),
        # m = 4 of 8 asked: more than m return in about half the rounds, so the keep probability
        # m / R matters (leaving it out gives max|z| above 20 here).
        pytest.param({"over_selection": 1.0}, 4, id="dropout+over-selection"),
        pytest.param(
            {
                "availability": BernoulliAvailability(np.linspace(0.6, 1.0, NUM_CLIENTS)),
                "redraws": 0,
                "over_selection": 1.0,
            },
            4,
            id="dropout+availability-skipped+over-selection",
        ),
    ],
)
def test_inverse_probability_matches_full_participation_under_30_percent_dropout(
    extra: dict[str, Any], num_sampled: int
) -> None:
    _, dropout, _ = _federation_and_updates()
    assert dropout.mean() == pytest.approx(0.3)
    participation = Participation(dropout=Dropout(dropout), **extra)
    begin = time.perf_counter()
    aggregated, full = _aggregated_updates(
        MDSampler(), participation, ("inverse-probability", "renormalise"), rounds=5_000, num_sampled=num_sampled
    )
    z_inverse = _max_abs_z(aggregated["inverse-probability"], full)
    z_renormalise = _max_abs_z(aggregated["renormalise"], full)
    print(
        f"max|z| inverse-probability {z_inverse:.2f}, renormalise {z_renormalise:.2f} "
        f"(critical {Z_CRITICAL:.2f}, {time.perf_counter() - begin:.1f}s)"
    )
    assert z_inverse < Z_CRITICAL
    assert z_renormalise > Z_CRITICAL


def test_estimated_return_rates_are_nearly_unbiased() -> None:
    """Estimated rates converge, so the bias shrinks with rounds; the first rounds' error leaves a
    small bias, which this test bounds in relative terms (1% of the update) rather than in standard errors."""
    _, dropout, _ = _federation_and_updates()
    participation = Participation(dropout=Dropout(dropout), return_rates="estimated")
    aggregated, full = _aggregated_updates(
        MDSampler(), participation, ("inverse-probability", "renormalise"), rounds=8_000
    )
    error = np.abs(aggregated["inverse-probability"].mean(axis=0) - full)
    renormalised = np.abs(aggregated["renormalise"].mean(axis=0) - full)
    assert np.max(error / np.abs(full)) < 0.02
    assert np.max(renormalised) > 5 * np.max(error)


def test_statistics_report_the_bias_of_each_policy() -> None:
    federation, dropout, _ = _federation_and_updates()
    sampler = MDSampler()
    state = sampler.init(federation, 10)
    stats = participation_statistics(
        sampler, state, Participation(dropout=Dropout(dropout)), num_sampled=10, num_rounds=6_000, seed=1
    )
    policies = stats.policies
    # Per client, 20 z-tests: Bonferroni at 99.9% gives |z| < 3.89.
    critical = NormalDist().inv_cdf(1 - 0.001 / (2 * NUM_CLIENTS))
    assert policies["inverse-probability"].max_abs_z < critical
    assert policies["renormalise"].max_abs_z > critical
    # "ignore" keeps the failed clients' weight lost: E[sum w'] = sum p_i (1 - d_i), in expectation.
    expected = float(np.asarray(federation.importances) @ (1 - dropout))
    ignore = policies["ignore"].weight_sum
    assert abs(ignore.value - expected) < 4 * ignore.stderr
    # renormalise keeps the sum at 1, but for the rare rounds in which every selected client failed.
    assert 0.99 < policies["renormalise"].weight_sum.value <= 1
    assert 1 < stats.failures["dropped"] < 10 * 0.4  # about 30% of the (at most 10) distinct clients
    table = format_participation([("md", stats)])
    assert table.count("\n") == 3
    assert "inverse-probability" in table


def test_statistics_show_that_redrawing_unavailable_clients_is_biased() -> None:
    """Redrawing keeps the round's size but conditions on availability: no policy corrects that."""
    federation = Federation.from_sizes([10, 10, 10, 10])
    sampler = MDSampler()
    state = sampler.init(federation, 2)
    availability = BernoulliAvailability(np.array([0.2, 1.0, 1.0, 1.0]))
    redrawn = participation_statistics(
        sampler,
        state,
        Participation(availability=availability),
        num_sampled=2,
        num_rounds=1_500,
        policies=("inverse-probability",),
    )
    skipped = participation_statistics(
        sampler,
        state,
        Participation(availability=availability, redraws=0, policy="inverse-probability"),
        num_sampled=2,
        num_rounds=1_500,
        policies=("inverse-probability",),
    )
    assert redrawn.policies["inverse-probability"].max_abs_z > 10  # client 0 under-represented (measured 52)
    assert skipped.policies["inverse-probability"].max_abs_z < 4  # 4 SE, 4 clients: false failure < 3e-4
    assert redrawn.kept.value > skipped.kept.value  # redrawing fills the round


def test_redraws_replace_unavailable_entries_of_a_row_design() -> None:
    federation = Federation.from_sizes([5] * 10)
    sampler = MDSampler()
    state = sampler.init(federation, 4)
    availability = BernoulliAvailability(0.5, seed=3)
    participation = Participation(availability=availability, redraws=50)
    hits = 0
    for t in range(50):
        selected = select_participants(sampler, state, participation, seed=0, round=t, num_clients=10)
        assert selected.selection.num_draws == 4
        assert selected.available.all()  # 50 tries at 1/2: never exhausted in practice
        assert np.all(availability.available(t, selected.selection.clients))
        np.testing.assert_allclose(selected.selection.weights, 0.25)
        hits += selected.unavailable
    assert 50 < hits < 350  # about 4 unavailable hits per round (geometric tries)


@pytest.mark.parametrize("sampler", [UniformSampler(), PoissonSampler()], ids=["fixed-size", "bernoulli"])
def test_unavailable_clients_of_other_designs_are_skipped(sampler: Any) -> None:
    federation = Federation.from_sizes([5] * 30)
    state = sampler.init(federation, 6)
    availability = BernoulliAvailability(0.5, seed=1)
    participation = Participation(availability=availability)
    skipped = 0
    for t in range(20):
        selected = select_participants(sampler, state, participation, seed=2, round=t, num_clients=30)
        plain = sampler.sample(state, np.random.default_rng([2, 1, t]))  # the unrestricted draw
        np.testing.assert_array_equal(np.sort(selected.selection.clients), np.sort(plain.clients))
        np.testing.assert_array_equal(selected.available, availability.available(t, selected.clients))
        assert selected.unavailable == int((~selected.available).sum())
        skipped += selected.unavailable
        settled = settle_participants(
            selected,
            np.ones(selected.clients.size, dtype=bool),
            participation,
            seed=2,
            round=t,
            num_kept=6,
            estimator=None,
        )
        assert not settled.kept[~selected.available].any()
    assert skipped > 0


def test_over_selection_keeps_the_first_replies_and_records_the_late_ones() -> None:
    federation = Federation.from_sizes([5] * 40)
    participation = Participation(over_selection=0.5, policy="inverse-probability")
    assert participation.num_asked(10) == 15
    assert Participation(over_selection=0.2).num_asked(10) == 12  # not 13 from 12.000000000000002
    sampler = UniformSampler()
    state = sampler.init(federation, participation.num_asked(10))
    selected = select_participants(sampler, state, participation, seed=0, round=0, num_clients=40)
    finite = np.ones(15, dtype=bool)
    settled = settle_participants(selected, finite, participation, seed=0, round=0, num_kept=10, estimator=None)
    assert settled.kept.sum() == 10
    assert settled.counts["late"] == 5
    # Each kept weight is w_i / (m / R) = (1/15) * 15/10.
    np.testing.assert_allclose(settled.weights[settled.kept], 0.1)
    assert np.all(settled.weights[~settled.kept] == 0)
    again = settle_participants(selected, finite, participation, seed=0, round=0, num_kept=10, estimator=None)
    np.testing.assert_array_equal(again.kept, settled.kept)  # the reply order is keyed, not drawn
    other = settle_participants(selected, finite, participation, seed=1, round=0, num_kept=10, estimator=None)
    assert not np.array_equal(other.kept, settled.kept)


def test_rejected_updates_are_failures_under_every_policy() -> None:
    federation = Federation.from_sizes([5] * 6)
    sampler = UniformSampler()
    state = sampler.init(federation, 3)
    participation = Participation(policy="renormalise")
    selected = select_participants(sampler, state, participation, seed=0, round=0, num_clients=6)
    finite = np.array([True, False, True])
    settled = settle_participants(selected, finite, participation, seed=0, round=0, num_kept=3, estimator=None)
    assert settled.counts == {"unavailable": 0, "dropped": 0, "rejected": 1, "late": 0}
    np.testing.assert_allclose(settled.weights, [0.5, 0.0, 0.5])


def test_default_participation_leaves_the_selection_untouched() -> None:
    federation = Federation.from_sizes([5, 6, 7, 8])
    sampler = MDSampler()
    state = sampler.init(federation, 3)
    participation = Participation()
    assert participation.is_default
    assert isinstance(participation.availability, AlwaysAvailable)
    selected = select_participants(sampler, state, participation, seed=4, round=2, num_clients=4)
    plain = sampler.sample(state, np.random.default_rng([4, 1, 2]))
    ids, weights = plain.distinct()
    np.testing.assert_array_equal(selected.clients, ids)
    settled = settle_participants(
        selected, np.ones(ids.size, dtype=bool), participation, seed=4, round=2, num_kept=3, estimator=None
    )
    np.testing.assert_array_equal(settled.weights, weights)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Participation(over_selection=-0.1), "'over_selection' parameter of Participation"),
        (lambda: Participation(policy="average"), "'policy' parameter of Participation"),
        (lambda: Participation(return_rates="guessed"), "'return_rates' parameter of Participation"),
        (lambda: Participation(redraws=-1), "'redraws' parameter of Participation"),
        (lambda: Participation(availability=0.5), "'availability' parameter of Participation"),  # type: ignore[arg-type]
        (lambda: Participation(dropout=0.3), "'dropout' parameter of Participation"),  # type: ignore[arg-type]
    ],
)
def test_bad_participation_is_one_line_naming_the_parameter(build: Any, match: str) -> None:
    with pytest.raises(FedsampleError, match=match) as caught:
        build()
    assert "\n" not in str(caught.value)
    assert "Got" in str(caught.value)


def test_known_rates_need_availability_probabilities() -> None:
    trace = TraceAvailability(np.array([0, 1]), np.array([0, 0]), np.array([5, 5]))
    setting = Participation(availability=trace, policy="inverse-probability")
    with pytest.raises(FedsampleError, match="return_rates='estimated'"):
        setting.check_known_rates(2, "simulate")
    Participation(availability=trace, policy="inverse-probability", return_rates="estimated").check_known_rates(2, "x")
