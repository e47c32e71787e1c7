"""MIFA as its authors released it (``mifa_variant="released"``, issue 35 item 1): the warm-up's phases,
the memory filled at the warm-up model, the 1/N average and the learning-rate scaling, on the round
pipeline, against the released algorithm written out here from its description (docs/failures.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsample import Federation
from fedsample.engine.aggregation import memory_step, new_memory
from fedsample.errors import FedsampleError
from fedsample.participation import (
    BernoulliAvailability,
    Participation,
    Selected,
    TraceAvailability,
    select_participants,
    settle_participants,
)
from fedsample.participation.mifa import MemoryWarmup
from fedsample.participation.procedure import warmed_up
from fedsample.samplers import FullSampler


def test_the_warm_up_waits_for_every_client_then_fills_then_trains() -> None:
    warmup = MemoryWarmup(4)
    everyone = np.arange(4)
    assert warmup.observe(everyone, [True, False, False, True]) == "wait"
    assert warmup.observe(everyone, [False, False, False, False]) == "wait"
    assert warmup.observe(everyone, [True, True, False, False]) == "wait"
    assert warmup.observe(everyone, [False, False, True, False]) == "fill"
    assert warmup.observe(everyone, [False, False, False, False]) == "train"
    assert warmup.complete


def test_the_warm_up_s_counts_go_through_a_checkpoint_and_bad_ones_are_refused() -> None:
    warmup = MemoryWarmup(3)
    warmup.observe(np.arange(3), [True, False, True])
    again = MemoryWarmup(3)
    again.load_counts(warmup.counts())
    assert again.observe(np.array([1]), [True]) == "fill"
    with pytest.raises(FedsampleError, match=r"'mifa_seen' parameter of MemoryWarmup must be a 0 or 1 per client"):
        again.load_counts({"mifa_seen": np.array([0, 2, 1])})
    with pytest.raises(FedsampleError, match=r"'mifa_seen' parameter of MemoryWarmup must be 3 non-negative"):
        again.load_counts({"mifa_seen": np.array([0, 1])})


def _selected(rates: list[float]) -> Selected:
    setting = Participation(availability=BernoulliAvailability(np.array(rates), seed=1), policy="mifa")
    state = FullSampler().init(Federation.from_sizes(np.full(len(rates), 5)), len(rates))
    return select_participants(FullSampler(), state, setting, seed=0, round=0, num_clients=len(rates))


def test_who_trains_in_each_phase() -> None:
    selected = _selected([0.5, 0.5, 0.5])
    assert warmed_up(selected, "train", 3) is selected
    waiting = warmed_up(selected, "wait", 3)
    assert waiting.clients.size == 0
    assert waiting.trains.size == 0
    filling = warmed_up(selected, "fill", 3)
    assert filling.clients.tolist() == [0, 1, 2]
    assert filling.trains.all()
    assert filling.selection is selected.selection


def test_the_released_weights_are_one_over_n_whatever_the_sizes() -> None:
    sizes = np.array([1, 2, 3, 10])
    p = sizes / sizes.sum()
    selected = _selected([1.0, 1.0, 1.0, 1.0])
    kept = np.ones(4, dtype=bool)
    for variant, expected in (("released", np.full(4, 0.25)), ("zeros", p)):
        setting = Participation(policy="mifa", mifa_variant=variant)  # type: ignore[arg-type]
        settled = settle_participants(
            selected,
            kept,
            setting,
            seed=0,
            round=0,
            num_kept=4,
            estimator=setting.new_estimator(4),
            importances=p,
        )
        np.testing.assert_allclose(settled.weights, expected, rtol=1e-15)


def test_the_released_variant_refuses_over_selection_and_an_unknown_variant() -> None:
    with pytest.raises(FedsampleError, match=r"'over_selection' parameter of Participation must be 0 with mifa_var"):
        Participation(policy="mifa", mifa_variant="released", over_selection=0.2)
    with pytest.raises(FedsampleError, match=r"'mifa_variant' parameter of Participation must be one of"):
        Participation(policy="mifa", mifa_variant="zero")  # type: ignore[arg-type]
    Participation(policy="fedau", mifa_variant="released", over_selection=0.2)  # read under "mifa" only


def _pipeline(present: np.ndarray, updates: np.ndarray, lr0: float, variant: str) -> np.ndarray:
    """fedsample's round pipeline: the global vector after each round (every client asked each round)."""
    rounds, n, d = updates.shape
    client, start = np.nonzero(present.T)  # one one-round window per present (client, round)
    trace = TraceAvailability(clients=client, starts=start, ends=start + 1)
    setting = Participation(availability=trace, policy="mifa", mifa_variant=variant)  # type: ignore[arg-type]
    state = FullSampler().init(Federation.from_sizes(np.full(n, 7)), n)
    p = np.full(n, 1.0 / n)
    warmup = setting.new_estimator(n)
    memory = new_memory({"w": torch.zeros(1, d, dtype=torch.float64)}, n)
    w, out, trained = np.zeros(d), np.zeros((rounds, d)), 0
    for t in range(rounds):
        selected = select_participants(FullSampler(), state, setting, seed=0, round=t, num_clients=n)
        phase = "train"
        if isinstance(warmup, MemoryWarmup):
            phase = warmup.observe(selected.clients, selected.trains)
            selected = warmed_up(selected, phase, n)
        finite = np.ones(selected.clients.size, dtype=bool)
        settled = settle_participants(
            selected, finite, setting, seed=0, round=t, num_kept=n, estimator=warmup, importances=p
        )
        ids = selected.clients[settled.kept]
        lr = lr0 / (trained + 1) if variant == "released" else 1.0
        delta, memory = memory_step(
            memory,
            {"w": torch.as_tensor(updates[t, ids])},
            np.zeros(ids.size, dtype=np.int64),
            ids,
            settled.weights[settled.kept],
            settled.weights[settled.kept],
            still_without_kept=False,
            still_runs=[phase == "fill"],
            learning_rate=lr,
        )
        trained += phase == "train"
        w = w + delta["w"][0].numpy()
        out[t] = w
    return out


def _released(present: np.ndarray, updates: np.ndarray, lr0: float) -> np.ndarray:
    """The released ``fdu`` trainer's arithmetic, written out: wait, fill, then the decaying mean."""
    rounds, n, d = updates.shape
    w, out, seen, table, k = np.zeros(d), np.zeros((rounds, d)), np.zeros(n, dtype=bool), None, 0
    for t in range(rounds):
        if table is None:
            seen |= present[t]
            if seen.all():
                table = updates[t] / lr0  # every client, at the warm-up model
        else:
            lr = lr0 / (k + 1)
            table[present[t]] = updates[t, present[t]] / lr
            w = w + lr * table.mean(axis=0)
            k += 1
        out[t] = w
    return out


def test_the_round_pipeline_is_the_released_algorithm() -> None:
    """Warm-up rounds and the filling round leave the model; a client absent after the warm-up still
    contributes the update it made at the warm-up model; 1/N; stale updates rescaled by the decay."""
    rng = np.random.default_rng(5)
    rounds, n, d = 40, 6, 3
    present = rng.random((rounds, n)) < np.linspace(0.15, 0.9, n)
    present[:, 0] = False
    present[9, 0] = True  # client 0 completes the set in round 9, and is never there again
    updates = rng.normal(size=(rounds, n, d))
    ours, theirs = _pipeline(present, updates, 0.3, "released"), _released(present, updates, 0.3)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-13)
    assert np.all(ours[:10] == 0)
    assert np.all(ours[10] != 0)
    # Client 0's update of round 9 is in every later direction: dropping it changes round 10's step.
    without = updates.copy()
    without[9, 0] = 0
    assert not np.allclose(_released(present, without, 0.3)[10], theirs[10])
    # The zeros variant moves from round 0 and never sees client 0 before round 9.
    zeros = _pipeline(present, updates, 0.3, "zeros")
    assert np.any(zeros[0] != 0)
