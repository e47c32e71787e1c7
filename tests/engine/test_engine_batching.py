"""The batch rule: each local step draws min(B, n_i) distinct local samples uniformly, from the stream
(seed, TRAINING, round, client), so a client's batches do not depend on who else trains with it."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fedsample.engine import BatchPlan, draw_client_batches, plan_batches
from fedsample.rng import Stream, stream_rng

SIZES = np.array([5, 9, 3, 7, 12, 4, 20, 6])
OFFSETS = np.concatenate([[0], np.cumsum(SIZES)]).astype(np.int64)


def _plan(
    clients: list[int], *, seeds: list[int] | None = None, round_index: int = 0, steps: int = 4, batch: int = 6
) -> BatchPlan:
    return plan_batches(
        seeds=np.array(seeds if seeds is not None else [0] * len(clients), dtype=np.int64),
        round_index=round_index,
        clients=np.array(clients, dtype=np.int64),
        offsets=OFFSETS,
        steps=steps,
        batch_size=batch,
    )


@pytest.mark.parametrize(("size", "batch"), [(10, 3), (10, 9), (10, 1), (50, 7), (2, 1)])
def test_draws_are_distinct_in_range_and_of_size_b(size: int, batch: int) -> None:
    indices = draw_client_batches(np.random.default_rng(0), size, 200, batch)
    assert indices.shape == (200, batch)
    assert indices.dtype == np.int64
    assert indices.min() >= 0
    assert indices.max() < size
    assert all(np.unique(row).size == batch for row in indices)


@pytest.mark.parametrize(("size", "batch"), [(3, 6), (6, 6), (1, 50)])
def test_small_clients_use_all_their_samples(size: int, batch: int) -> None:
    """n <= B: every step uses all n samples (min(B, n) = n)."""
    indices = draw_client_batches(np.random.default_rng(0), size, 5, batch)
    assert indices.shape == (5, size)
    assert all(sorted(row.tolist()) == list(range(size)) for row in indices)


def test_draws_depend_only_on_the_generator() -> None:
    first = draw_client_batches(np.random.default_rng(4), 30, 10, 5)
    again = draw_client_batches(np.random.default_rng(4), 30, 10, 5)
    other = draw_client_batches(np.random.default_rng(5), 30, 10, 5)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize(("size", "batch"), [(10, 3), (7, 6), (25, 2)])
def test_each_sample_is_included_with_probability_b_over_n(size: int, batch: int) -> None:
    """Uniform inclusion: each local sample appears in a step's batch with probability min(B, n)/n.

    Over T steps sample j's count is Binomial(T, b/n); every count lies within 5 standard errors
    of T b/n (false-failure rate below 1e-5 for the at most 25 samples; fixed seed).
    """
    steps = 20_000
    indices = draw_client_batches(np.random.default_rng(11), size, steps, batch)
    counts = np.bincount(indices.ravel(), minlength=size)
    q = batch / size
    se = np.sqrt(steps * q * (1 - q))
    assert np.all(np.abs(counts - steps * q) < 5 * se), (counts, steps * q, se)


def test_every_subset_is_equally_likely() -> None:
    """A step's batch is a uniform b-subset: chi-square over the C(5, 2) = 10 subsets, p-value above 1e-6."""
    steps = 20_000
    indices = np.sort(draw_client_batches(np.random.default_rng(12), 5, steps, 2), axis=1)
    subsets = list(itertools.combinations(range(5), 2))
    code = {s: i for i, s in enumerate(subsets)}
    observed = np.bincount([code[(int(a), int(b))] for a, b in indices], minlength=len(subsets))
    assert stats.chisquare(observed).pvalue > 1e-6


def test_plan_counts_rows_and_mask() -> None:
    """counts = min(B, n_i); real rows are distinct rows of the client's own block; padding repeats one of
    them with mask 0."""
    clients = [0, 2, 6, 5, 1]
    plan = _plan(clients, steps=5, batch=6)
    assert plan.rows.shape == (5, len(clients), 6)
    np.testing.assert_array_equal(plan.counts, np.minimum(6, SIZES[clients]))
    mask = plan.mask
    assert mask.dtype == np.float32
    np.testing.assert_array_equal(mask.sum(1), plan.counts)
    for j, client in enumerate(clients):
        count = int(plan.counts[j])
        assert np.all(mask[j, :count] == 1)
        assert np.all(mask[j, count:] == 0)
        rows = plan.rows[:, j, :]
        assert np.all((rows >= OFFSETS[client]) & (rows < OFFSETS[client + 1])), client
        for step in range(5):
            assert np.unique(rows[step, :count]).size == count


def test_client_rows_do_not_depend_on_the_other_clients_or_slot_order() -> None:
    """Client 4's batches are the same alone, among others, or in another slot."""
    alone = _plan([4])
    among = _plan([0, 4, 6])
    reordered = _plan([6, 1, 3, 4])
    np.testing.assert_array_equal(alone.rows[:, 0], among.rows[:, 1])
    np.testing.assert_array_equal(alone.rows[:, 0], reordered.rows[:, 3])
    np.testing.assert_array_equal(among.rows[:, 2], reordered.rows[:, 0])  # client 6 as well


def test_client_rows_follow_the_training_stream() -> None:
    """Slot (seed, client) in round t reads draw_client_batches(stream_rng(seed, TRAINING, t, client))."""
    plan = _plan([4, 6, 4], seeds=[3, 3, 8], round_index=7, steps=3, batch=5)
    for j, (seed, client) in enumerate([(3, 4), (3, 6), (8, 4)]):
        local = draw_client_batches(stream_rng(seed, Stream.TRAINING, 7, client), int(SIZES[client]), 3, 5)
        np.testing.assert_array_equal(plan.rows[:, j, :5], OFFSETS[client] + local)


def test_client_rows_change_with_seed_round_and_client() -> None:
    base = _plan([6], seeds=[0], round_index=0).rows[:, 0]
    assert not np.array_equal(base, _plan([6], seeds=[1], round_index=0).rows[:, 0])
    assert not np.array_equal(base, _plan([6], seeds=[0], round_index=1).rows[:, 0])
    # Two clients of equal size draw different local indices: the client is part of the key.
    offsets = np.array([0, 12, 24], dtype=np.int64)
    plan = plan_batches(
        seeds=np.zeros(2, dtype=np.int64),
        round_index=0,
        clients=np.array([0, 1]),
        offsets=offsets,
        steps=4,
        batch_size=5,
    )
    assert not np.array_equal(plan.rows[:, 0] - offsets[0], plan.rows[:, 1] - offsets[1])


def test_slots_of_several_runs_are_keyed_by_their_own_seed() -> None:
    """Batching runs together: each (seed, client) slot equals the plan of that run alone."""
    together = _plan([1, 4, 1, 6], seeds=[2, 2, 5, 5])
    for j, (seed, client) in enumerate([(2, 1), (2, 4), (5, 1), (5, 6)]):
        alone = _plan([client], seeds=[seed])
        np.testing.assert_array_equal(together.rows[:, j], alone.rows[:, 0])
        assert together.counts[j] == alone.counts[0]


def test_a_kept_subset_is_read_at_every_step() -> None:
    """A data-level slot (kept_subsets) reads one uniform subset at all N steps, the one its first step
    would draw; the other slots of the same plan still draw a fresh batch per step."""
    clients = np.array([6, 4, 6], dtype=np.int64)
    kept = plan_batches(
        seeds=np.array([0, 0, 1], dtype=np.int64),
        round_index=2,
        clients=clients,
        offsets=OFFSETS,
        steps=5,
        batch_size=4,
        slot_batch_sizes=np.array([7, 4, 3], dtype=np.int64),
        kept_subsets=np.array([True, False, True]),
    )
    for j in (0, 2):
        count = int(kept.counts[j])
        rows = kept.rows[:, j, :count]
        assert np.all(rows == rows[0]), j  # the same samples at every step
        assert np.unique(rows[0]).size == count
        first = draw_client_batches(stream_rng(int([0, 0, 1][j]), Stream.TRAINING, 2, int(clients[j])), 20, 5, count)
        np.testing.assert_array_equal(rows[0], OFFSETS[6] + first[0])
    assert np.unique(kept.rows[:, 1, :4], axis=0).shape[0] > 1  # a client-level slot: fresh batches


def test_one_step_reads_the_same_batch_with_or_without_a_kept_subset() -> None:
    """With N = 1 the kept subset is the batch the first step always drew: runs of one local step
    (FedSampling's mini-batch SGD) are unchanged by the kept-subset rule."""
    common: dict[str, Any] = {
        "seeds": np.array([0, 2], dtype=np.int64),
        "round_index": 3,
        "clients": np.array([6, 4], dtype=np.int64),
        "offsets": OFFSETS,
        "steps": 1,
        "batch_size": 6,
        "slot_batch_sizes": np.array([9, 5], dtype=np.int64),
    }
    fresh = plan_batches(**common)
    kept = plan_batches(**common, kept_subsets=np.array([True, True]))
    np.testing.assert_array_equal(fresh.rows, kept.rows)
