"""Oort and the clients that time out (Feedback.timed_out): their waiting time is a lower bound on their
round time, and exploration prefers the unexplored clients not known to be slower than ``T``."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection
from fedsample.samplers import OortSampler, OortState

N = 20
REPORTED = list(range(10))  # clients 0..9 report a loss and about 10 s
SLOW = 10  # client 10 is selected with them and times out at the 60 s deadline
DRAWS = 2000


def _round(
    t: int,
    clients: list[int],
    *,
    times: list[float] | None = None,
    timed_out: list[int] | None = None,
    waited: list[float] | None = None,
) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    asked = np.concatenate([ids, np.asarray(timed_out or [], dtype=np.int64)])
    return Feedback(
        round=t,
        selection=Selection(clients=asked, weights=np.full(asked.size, 1.0 / max(asked.size, 1))),
        clients=ids,
        loss_squares=np.ones(ids.size),
        round_times=None if times is None else np.asarray(times),
        timed_out=None if timed_out is None else np.asarray(timed_out),
        timed_out_seconds=None if waited is None else np.asarray(waited),
    )


def _state(sampler: OortSampler, **timeouts: list[int] | list[float]) -> OortState:
    """Round 0: clients 0..9 report ~10 s; ``timeouts`` (``timed_out``, ``waited``) as given. K = 1."""
    state = sampler.init(Federation.from_sizes([5] * N), num_sampled=1)
    times = [9.5 + 0.1 * i for i in REPORTED]
    return sampler.update(state, _round(0, REPORTED, times=times, **timeouts))  # type: ignore[arg-type]


def test_a_timed_out_client_gets_its_waiting_time_as_a_lower_bound_and_stays_unexplored() -> None:
    sampler = OortSampler()
    state = _state(sampler, timed_out=[SLOW], waited=[60.0])
    assert state.durations[SLOW] == 60.0
    assert not state.explored[SLOW]
    assert np.isinf(state.durations[SLOW + 1 :]).all()  # never selected: unknown
    # T, the 30th percentile of the known times, stays near the reporters' ~10 s.
    assert 9.5 <= state.preferred_duration <= 10.5
    # A later timeout keeps the larger bound; a shorter known time is raised to the bound.
    later = sampler.update(state, _round(1, [0], times=[5.0], timed_out=[SLOW, 0], waited=[50.0, 60.0]))
    assert later.durations[SLOW] == 60.0
    assert later.durations[0] == 60.0
    # Non-finite or negative waiting times tell nothing.
    same = sampler.update(state, _round(1, [], timed_out=[11, 12], waited=[np.nan, -1.0]))
    assert np.isinf(same.durations[[11, 12]]).all()


def test_exploration_draws_a_client_slower_than_t_at_rate_t_over_t_i_to_the_alpha() -> None:
    """One exploration slot among the 10 unexplored clients: client 10's weight is ``(T / 60)^2``
    (about 1/36 with ``T`` about 10 s), the 9 others' 1. So ``P(10) = w / (9 + w)`` is about 0.003
    (6 expected picks in 2000 draws), each other ``1 / (9 + w)`` about 0.11 (221 picks)."""
    sampler = OortSampler()
    state = _state(sampler, timed_out=[SLOW], waited=[60.0])
    weight = (state.preferred_duration / 60.0) ** sampler.round_penalty
    assert weight < 1 / 30
    rng = np.random.default_rng(7)
    picks = np.concatenate([sampler.sample(state, rng).clients for _ in range(DRAWS)])
    counts = np.bincount(picks, minlength=N)
    assert counts[REPORTED].sum() == 0  # every slot explores (epsilon K rounds to 1)
    # Binomial(2000, 0.0031): P(count >= 26) < 1e-8; uniform exploration would give about 200.
    assert counts[SLOW] <= 25
    # Each other unexplored client: Binomial(2000, 0.11), mean 221, sd 14; 150 is 5 sd below.
    assert counts[SLOW + 1 :].min() >= 150


def test_without_timeouts_exploration_is_the_uniform_draw_it_always_was() -> None:
    """No known time above T among the unexplored (or equal weights, or alpha = 0): the very
    ``rng.choice`` draw of before, so runs without timeouts are bit-identical."""
    unexplored = np.arange(len(REPORTED), N)
    cases = [
        (OortSampler(), {}),
        (OortSampler(), {"timed_out": list(range(10, N)), "waited": [60.0] * (N - 10)}),  # all equal
        (OortSampler(round_penalty=0.0), {"timed_out": [SLOW], "waited": [60.0]}),
    ]
    for sampler, timeouts in cases:
        state = _state(sampler, **timeouts)
        for seed in range(20):
            rng = np.random.default_rng(seed)
            expected = copy.deepcopy(rng).choice(unexplored, size=1, replace=False)
            assert sampler.sample(state, rng).clients.tolist() == expected.tolist()


def test_timeout_fields_are_read_only_and_none_by_default() -> None:
    plain = _round(0, [1, 2])
    assert plain.timed_out is None
    assert plain.timed_out_seconds is None
    feedback = _round(0, [1], timed_out=[3], waited=[60])
    assert feedback.timed_out is not None
    assert feedback.timed_out_seconds is not None
    assert feedback.timed_out.dtype == np.int64
    assert feedback.timed_out_seconds.dtype == np.float64
    assert not feedback.timed_out.flags.writeable
    assert not feedback.timed_out_seconds.flags.writeable


@pytest.mark.parametrize(
    ("timed_out", "waited", "needle"),
    [([N], [60.0], "'timed_out' are client ids in [0, 20)"), ([3, 4], [60.0], "'timed_out_seconds' align")],
)
def test_bad_timeouts_raise_one_error_naming_the_feedback(
    timed_out: list[int], waited: list[float], needle: str
) -> None:
    sampler = OortSampler()
    state = sampler.init(Federation.from_sizes([5] * N), num_sampled=1)
    with pytest.raises(FedsampleError, match="feedback") as error:
        sampler.update(state, _round(0, [1], timed_out=timed_out, waited=waited))
    assert needle in str(error.value)
