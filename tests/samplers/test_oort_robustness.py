"""Oort's robustness measures (Lai et al., OSDI 2021, §4.4) as FedScale 1.0 releases them: the reward
clip and the blacklist, their parameters, and their state through JSON and resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import Federation, FedsampleError, Feedback, Selection
from fedsample.samplers import OortSampler, OortState
from fedsample.samplers.persistence import sampler_from_dict, sampler_to_dict


def _report(t: int, clients: list[int], squares: list[float]) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    return Feedback(
        round=t,
        selection=Selection(clients=ids, weights=np.full(ids.size, 1.0 / max(ids.size, 1))),
        clients=ids,
        loss_squares=np.asarray(squares),
    )


def _planted_outlier(sampler: OortSampler, n: int = 40) -> OortState:
    """``n`` clients of one sample each, every loss 1 but client 0's, a corrupted 1000."""
    state = sampler.init(Federation.from_sizes([1] * n), num_sampled=5)
    squares = [1.0] * n
    squares[0] = 1000.0**2
    return sampler.update(state, _report(0, list(range(n)), squares))


def test_a_planted_outlier_utility_is_clipped_at_the_quantile() -> None:
    """With 40 rewards (39 ones, one 1000), FedScale's clip is at index int(0.9 x 40) = 36: 1. The
    range stays that of the unclipped rewards (``get_norm``), so every client scores the same."""
    quiet = {"round_penalty": 0.0, "exploration": 0.0, "exploration_min": 0.0}
    clipped = OortSampler(clip_quantile=0.9, **quiet)  # type: ignore[arg-type]
    state = _planted_outlier(clipped)
    assert state.utility[0] == 1000.0  # the state keeps what was reported; the score clips it
    assert clipped.normalisation(state) == (1.0, 0.999, 1000.0 - 0.999)
    clients = np.arange(40)
    scores = clipped.scores(state, clients)
    np.testing.assert_array_equal(scores, np.full(40, scores[0]))
    unclipped = OortSampler(clip_quantile=1.0, **quiet)  # type: ignore[arg-type]
    scores = unclipped.scores(state, clients)
    assert scores[0] == 1.0
    np.testing.assert_allclose(scores[1:], (1.0 - 0.999) / (1000.0 - 0.999))
    # Exploitation: unclipped, the outlier's score is 1000 times the others' and it misses a round with
    # probability below 1e-4; clipped, it is one of 40 equals: in 200 rounds of 5 it is drawn
    # Binomial(200, 1/8) times, mean 25 and standard deviation 4.7 (outside [5, 60]: p < 1e-5).
    rng = np.random.default_rng(0)
    assert all(0 in unclipped.sample(state, rng).clients for _ in range(50))
    hits = sum(0 in clipped.sample(state, rng).clients for _ in range(200))
    assert 5 <= hits <= 60


@settings(max_examples=200, deadline=None)
@given(
    utility=st.lists(st.floats(0.0, 1e12, allow_nan=False), min_size=1, max_size=60),
    quantile=st.floats(0.01, 1.0),
)
def test_clipping_changes_at_most_the_top_share_and_keeps_the_order(utility: list[float], quantile: float) -> None:
    sampler = OortSampler(clip_quantile=quantile, samples_per_round=None, round_penalty=0.0)
    values = np.asarray(utility)
    state = sampler.init(Federation.from_sizes([1] * values.size), 1)
    state = sampler.update(state, _report(0, list(range(values.size)), (values**2).tolist()))
    clip, bottom, span = sampler.normalisation(state)
    reported = state.utility  # |sqrt(v^2)|: v itself, or 0 where v^2 underflows
    positive = reported[reported > 0]
    if positive.size == 0:
        assert (clip, bottom, span) == (0.0, 0.0, 1e-4)
        return
    assert clip in positive
    assert int((positive > clip).sum()) <= positive.size * (1 - quantile) + 1e-9
    assert bottom == 0.999 * positive.min()
    # Clipping never reorders two clients with a positive reward (FedScale's absolute value can put a
    # zero reward above a small positive one: (0 - bottom) / range).
    scores = sampler.scores(state, np.flatnonzero(reported > 0))
    order = np.argsort(positive, kind="stable")
    assert np.all(np.diff(scores[order]) >= 0)
    if quantile == 1.0:
        assert clip == positive.max()


def _frequent_state(sampler: OortSampler) -> OortState:
    """Ten clients; client 9 (the largest) reported in rounds 0, 1, 2, client 8 in 0 and 1, the rest in 0."""
    state = sampler.init(Federation.from_sizes([5, 1, 3, 8, 2, 6, 4, 1, 9, 12]), num_sampled=3)
    state = sampler.update(state, _report(0, list(range(10)), [1.0] * 10))
    state = sampler.update(state, _report(1, [8, 9], [1.0, 1.0]))
    return sampler.update(state, _report(2, [9], [1.0]))


def test_a_client_over_the_blacklist_cap_is_not_exploited() -> None:
    quiet = {"staleness": 0.0, "exploration": 0.0, "exploration_min": 0.0}
    capped = OortSampler(blacklist_rounds=2, **quiet)  # type: ignore[arg-type]
    state = _frequent_state(capped)
    assert state.participations.tolist() == [1] * 8 + [2, 3]
    assert capped.blacklisted(state).tolist() == [False] * 9 + [True]
    rng = np.random.default_rng(1)
    assert not any(9 in capped.sample(state, rng).clients for _ in range(100))
    free = OortSampler(**quiet)  # type: ignore[arg-type]  # the default: no blacklist
    assert not free.blacklisted(state).any()
    assert sum(9 in free.sample(state, rng).clients for _ in range(100)) > 50
    # Two clients over a cap of one: at most floor(0.1 x 10) = 1 is blacklisted, the most frequent.
    lower = OortSampler(blacklist_rounds=1, blacklist_fraction=0.1, **quiet)  # type: ignore[arg-type]
    assert np.flatnonzero(lower.blacklisted(state)).tolist() == [9]
    assert np.flatnonzero(OortSampler(blacklist_rounds=1).blacklisted(state)).tolist() == [8, 9]


def test_blacklist_counts_and_clipping_survive_json_and_resume() -> None:
    sampler = OortSampler(blacklist_rounds=2, clip_quantile=0.9)
    state = _frequent_state(sampler)
    loaded_sampler, loaded = sampler_from_dict(sampler_to_dict(sampler, state))
    assert loaded_sampler == sampler
    np.testing.assert_array_equal(loaded.participations, state.participations)
    first = sampler.sample(state, np.random.default_rng(5)).clients
    np.testing.assert_array_equal(loaded_sampler.sample(loaded, np.random.default_rng(5)).clients, first)
    after = loaded_sampler.update(loaded, _report(3, [0], [1.0]))
    assert after.participations.tolist() == [2] + [1] * 7 + [2, 3]


def test_a_state_saved_without_the_counts_loads_with_zero_counts() -> None:
    sampler = OortSampler()
    data = sampler_to_dict(sampler, _frequent_state(sampler))
    del data["state"]["fields"]["participations"]
    del data["state"]["fields"]["timed_out"]
    for key in ("clip_quantile", "blacklist_rounds", "blacklist_fraction"):
        del data["params"]["__dict__"][key]
    loaded_sampler, loaded = sampler_from_dict(data)
    assert loaded_sampler == sampler
    assert loaded.participations.tolist() == [0] * 10
    assert loaded.timed_out.tolist() == [False] * 10
    assert not loaded.participations.flags.writeable


@pytest.mark.parametrize(
    ("parameter", "value"),
    [("clip_quantile", 0.0), ("clip_quantile", 1.5), ("blacklist_rounds", -1), ("blacklist_fraction", 1.5)],
)
def test_bad_robustness_parameters_raise(parameter: str, value: float) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        OortSampler(**{parameter: value})  # type: ignore[arg-type]
    assert info.value.parameter == parameter
