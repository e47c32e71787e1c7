"""Oort and the clients that time out (Feedback.timed_out), as FedScale's aggregator feeds Oort's selector:
a straggler is reported with the round's mean utility and counts as explored, its waiting time is a
lower bound on its round time, and the system penalty then keeps it out of later rounds instead of
exploration retrying it."""

from __future__ import annotations

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


def test_a_timed_out_client_is_explored_with_the_rounds_mean_utility_and_its_waiting_time() -> None:
    sampler = OortSampler()
    state = _state(sampler, timed_out=[SLOW], waited=[60.0])
    assert state.durations[SLOW] == 60.0
    assert state.explored[SLOW]
    assert state.utility[SLOW] == pytest.approx(state.utility[REPORTED].mean())  # every reporter: 5 * sqrt(1)
    # FedScale's aggregator reports it (update_client_util): a count, a report stamped a round later.
    assert state.participations[SLOW] == 1
    assert state.timed_out[SLOW]
    assert not state.timed_out[REPORTED].any()
    assert not state.explored[SLOW + 1 :].any()
    assert np.isinf(state.durations[SLOW + 1 :]).all()  # never selected: unknown
    # T, the known time at index int(11 x 30 / 100) = 3 of the 11 known, is a reporter's.
    assert state.preferred_duration == 9.8
    # A later timeout keeps the larger bound; a shorter known time is raised to the bound; a client
    # that returned and timed out in the same feedback keeps its own utility.
    later = sampler.update(state, _round(1, [0], times=[5.0], timed_out=[SLOW, 0], waited=[50.0, 60.0]))
    assert later.durations[SLOW] == 60.0
    assert later.durations[0] == 60.0
    assert later.utility[0] == 5.0
    # A round in which nobody returned gives its stragglers utility 0 (FedScale's mean over none).
    empty = sampler.update(state, _round(1, [], timed_out=[11], waited=[60.0]))
    assert empty.explored[11]
    assert empty.utility[11] == 0.0
    # Non-finite or negative waiting times tell nothing.
    same = sampler.update(state, _round(1, [], timed_out=[12, 13], waited=[np.nan, -1.0]))
    assert np.isinf(same.durations[[12, 13]]).all()
    assert not same.explored[[12, 13]].any()


def test_a_straggler_is_not_explored_again_and_is_exploited_at_its_penalised_score() -> None:
    """K = 2 over 20 clients, one slot exploited and one explored (``epsilon`` 0.5: int(2 x 0.5) = 1):
    0..9 reported ~10 s, client 10 timed out at 60 s, 11..19 unexplored. The explored slot always goes
    to a never-selected client. Client 10's score is its normalised utility times ``(T / 60)^2`` (T =
    9.8 s), below the cut-off, but it is one of the 10 k + 1 = 11 candidates, so it is exploited at the
    rate its score gives: 2.8 per 1000 draws, within 5 standard errors in 20000 draws. Before
    stragglers counted as explored, exploration retried it in about 1 draw of 10."""
    sampler = OortSampler(exploration=0.5, exploration_decay=1.0)
    state = sampler.init(Federation.from_sizes([5] * N), num_sampled=2)
    times = [9.5 + 0.1 * i for i in REPORTED]
    state = sampler.update(state, _round(0, REPORTED, times=times, timed_out=[SLOW], waited=[60.0]))
    explored = np.arange(SLOW + 1)
    scores = sampler.scores(state, explored)
    assert scores[SLOW] == pytest.approx(scores[0] * (9.8 / 60.0) ** 2)
    rng = np.random.default_rng(7)
    rounds = 20_000
    picks = np.concatenate([sampler.sample(state, rng).clients for _ in range(rounds)])
    counts = np.bincount(picks, minlength=N)
    assert counts[SLOW + 1 :].sum() == rounds  # the explored slot: a never-selected client
    assert counts[explored].sum() == rounds  # the exploited slot, the straggler included
    rate = scores[SLOW] / scores.sum()
    assert abs(counts[SLOW] / rounds - rate) < 5 * np.sqrt(rate * (1 - rate) / rounds)


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
