"""Oort's selection as FedScale 1.0 releases it (``getTopK``, ``thirdparty/oort/oort.py`` 314-364 at
FedScale ``7ec441c``): the exploration count, exploitation's admission and draw, exploration's
shortlist and draw, and the refill of the exploration slots nobody unexplored can take.

The statistical tests compare pick frequencies with the exact inclusion probabilities of successive
sampling (numpy's ``choice(p=..., replace=False)``, what FedScale draws with) within 5 standard
errors: a false failure below 6e-7 per client, below 1e-5 per test.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, Feedback, Selection
from fedsample.samplers import OortSampler, OortState


def _report(t: int, clients: list[int] | np.ndarray, losses: list[float] | np.ndarray) -> Feedback:
    ids = np.asarray(clients, dtype=np.int64)
    return Feedback(
        round=t,
        selection=Selection(clients=ids, weights=np.full(ids.size, 1.0 / max(ids.size, 1))),
        clients=ids,
        loss_squares=np.asarray(losses, dtype=float) ** 2,
    )


def _inclusion_of_two(weights: np.ndarray) -> np.ndarray:
    """Exact P(i in S) for two successive draws without replacement, each proportional to ``weights``."""
    p = weights / weights.sum()
    second = np.array([sum(p[j] * p[i] / (1 - p[j]) for j in range(p.size) if j != i) for i in range(p.size)])
    inclusion: np.ndarray = p + second
    return inclusion


def _pick_counts(sampler: OortSampler, state: OortState, rounds: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = state.importances.size
    return np.sum([np.bincount(sampler.sample(state, rng).clients, minlength=n) for _ in range(rounds)], axis=0)


def test_the_exploration_count_truncates() -> None:
    """int(num x epsilon) explore (``oort.py`` 316), not round(): 13 x 0.3 = 3.9 gives 3, and at the
    first Oort round 10 x 0.882 = 8.82 gives 8, the others exploit."""
    federation = Federation.from_sizes([20] * 100)
    sampler = OortSampler(exploration=0.3, exploration_min=0.3)
    state = sampler.update(sampler.init(federation, 13), _report(0, list(range(20)), [1.0] * 20))
    assert state.epsilon == 0.3
    first = OortSampler()
    start = first.update(first.init(federation, 10), _report(0, list(range(10)), [1.0] * 10))
    assert start.epsilon == 0.9 * 0.98
    rng = np.random.default_rng(0)
    for _ in range(30):
        picks = sampler.sample(state, rng).clients
        assert picks.size == 13
        assert int((~state.explored[picks]).sum()) == 3
        picks = first.sample(start, rng).clients
        assert picks.size == 10
        assert int((~start.explored[picks]).sum()) == 8


def test_exploration_slots_nobody_unexplored_can_take_go_to_exploitation() -> None:
    """FedScale's defect fixed ("refill"): a round has num_sampled clients; when fewer clients are
    unexplored than int(num x epsilon), they are all explored and exploitation takes the other slots;
    once none is left, every slot is exploited (FedScale returns its last exploration list again)."""
    sampler = OortSampler()
    state = sampler.init(Federation.from_sizes([10] * 12), 5)
    rng = np.random.default_rng(1)
    explored_counts = []
    for t in range(4):
        picks = sampler.sample(state, rng).clients
        assert np.unique(picks).size == 5
        explored_counts.append(int((~state.explored[picks]).sum()))
        state = sampler.update(state, _report(t, picks, [1.0] * 5))
    # Round 1: uniform, 5 new; round 2: int(5 x 0.882) = 4 of 7 unexplored; round 3: the last 3
    # (int(5 x 0.864) = 4 asked for); round 4: none left, 5 exploited.
    assert explored_counts == [5, 4, 3, 0]


def _admission_state(losses: np.ndarray) -> tuple[OortSampler, OortState]:
    """One-sample clients that all reported ``losses`` in round 1; every slot of round 2 exploited
    (epsilon 0), no clip, no penalty (times unknown), no staleness bonus yet (ln 1 = 0)."""
    sampler = OortSampler(exploration=0.0, exploration_min=0.0, clip_quantile=1.0)
    state = sampler.init(Federation.from_sizes([1] * losses.size), 2)
    return sampler, sampler.update(state, _report(0, list(range(losses.size)), losses))


def test_exploitation_takes_at_least_ten_candidates_per_slot_below_the_cut_off() -> None:
    """Admission (``oort.py`` 319-337): the cut-off is 0.05 x the (k + 1)-th score; only three
    clients reach it, so the candidates are the best 10 k + 1 = 21 and the k = 2 exploited are drawn
    among them proportionally to score: the 19 lowest clients are never picked, the 18 best low ones
    are, at successive sampling's exact rates. (The old rule, 0.95 of the k-th score, admitted two.)"""
    losses = np.concatenate([[100.0, 90.0, 80.0], 0.5 + 0.05 * np.arange(37)])
    sampler, state = _admission_state(losses)
    scores = sampler.scores(state, np.arange(losses.size))
    np.testing.assert_allclose(scores, (losses - 0.4995) / (100.0 - 0.4995), rtol=1e-12)
    assert np.count_nonzero(scores >= 0.05 * np.sort(scores)[::-1][2]) == 3
    rounds = 20_000
    counts = _pick_counts(sampler, state, rounds, seed=2)
    candidates = np.r_[0:3, 22:40]
    assert counts[3:22].sum() == 0
    expected = _inclusion_of_two(scores[candidates])
    stderr = np.sqrt(expected * (1 - expected) / rounds)
    assert np.all(np.abs(counts[candidates] / rounds - expected) < 5 * stderr)
    assert counts[22:40].min() > 0


def test_exploitation_admits_every_client_above_the_cut_off() -> None:
    """With 40 clients above 0.05 x the third score, all 40 are candidates (more than 21)."""
    losses = np.linspace(50.0, 100.0, 40)
    sampler, state = _admission_state(losses)
    rounds = 8_000
    counts = _pick_counts(sampler, state, rounds, seed=3)
    expected = _inclusion_of_two(sampler.scores(state, np.arange(40)))
    stderr = np.sqrt(expected * (1 - expected) / rounds)
    assert np.all(np.abs(counts / rounds - expected) < 5 * stderr)


@pytest.mark.parametrize("up_front", [False, True], ids=["times unknown", "times up front"])
def test_exploration_draws_from_the_shortlist_by_capped_size_times_the_duration_penalty(up_front: bool) -> None:
    """Exploration (``oort.py`` 342-361): an unexplored client weighs min(n_i, 600) x (T / t_i)^2 when
    slower than T (round times known up front; unknown ones are not penalised); the best 5 x (the
    exploration count) form the shortlist (ties, such as the capped 600s, to the lower id) and the
    explored clients are drawn from it proportionally to weight. (The old rule drew uniformly.)"""
    rng = np.random.default_rng(4)
    n = 30
    sizes = rng.integers(100, 1000, size=n)
    durations = rng.lognormal(np.log(60.0), 0.6, size=n)
    sampler = OortSampler(exploration=0.5, exploration_decay=1.0, exploration_min=0.0)
    state = sampler.init(Federation.from_sizes(sizes), 4, **({"durations": durations} if up_front else {}))
    state = sampler.update(state, _report(0, list(range(5)), [1.0] * 5))  # 2 of 4 slots explore: int(4 x 0.5)
    weight = np.minimum(sizes, 600).astype(float)
    if up_front:
        preferred = np.sort(durations)[int(n * 30 / 100)]
        assert state.preferred_duration == preferred
        weight *= np.minimum(1.0, (preferred / durations) ** 2)
    unexplored = np.arange(5, n)
    order = sorted(unexplored.tolist(), key=lambda i: -weight[i])  # stable: ties to the lower id
    shortlist = np.asarray(order[:10])
    rounds = 20_000
    counts = _pick_counts(sampler, state, rounds, seed=5)
    others = np.setdiff1d(unexplored, shortlist)
    assert counts[others].sum() == 0
    assert counts[unexplored].sum() == 2 * rounds
    expected = _inclusion_of_two(weight[shortlist])
    stderr = np.sqrt(expected * (1 - expected) / rounds)
    assert np.all(np.abs(counts[shortlist] / rounds - expected) < 5 * stderr)
