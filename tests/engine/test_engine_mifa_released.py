"""The engine under MIFA as its authors released it (``mifa_variant="released"``, issue 35 item 1): the
warm-up and the round that fills the memory leave the model where it is, the rounds are the round
pipeline's, and the warm-up goes through checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from engine_cases import SIZES, RecordingSampler, classification_data, spec_for

from fedsample.engine import (
    RunResult,
    RunSpec,
    SimulationCheckpoint,
    TrainingConfig,
    load_checkpoint,
    save_checkpoint,
    simulate,
)
from fedsample.participation import MarkovAvailability, Participation, select_participants
from fedsample.participation.mifa import MemoryWarmup
from fedsample.samplers import FullSampler

RATES = np.linspace(0.1, 0.9, len(SIZES))
SEEDS = (0, 5)


def _participation(variant: str = "released") -> Participation:
    availability = MarkovAvailability.stationary(RATES, off_to_on=0.3, seed=2)
    return Participation(availability=availability, policy="mifa", mifa_variant=variant)  # type: ignore[arg-type]


def _simulate(rounds: int, variant: str = "released", **options: object) -> list[RunResult]:
    data = classification_data(2)
    runs = [RunSpec(FullSampler(), seed=SEEDS[0]), RunSpec(FullSampler(), seed=SEEDS[1])]
    config = TrainingConfig(
        rounds=rounds, num_sampled=len(SIZES), local_steps=2, batch_size=4, local_lr=0.1, lr_decay=0.9
    )
    return simulate(
        data,
        spec_for("mlp", data),
        runs,
        config,
        init_seed=1,
        participation=_participation(variant),
        **options,  # type: ignore[arg-type]
    )


def _fill_round(seed: int) -> int:
    """The round in which the run's every client has taken part once, from the round pipeline."""
    setting = _participation().for_run(seed)
    warmup = MemoryWarmup(len(SIZES))
    state = FullSampler().init(classification_data(2).federation(), len(SIZES))
    for t in range(200):
        selected = select_participants(FullSampler(), state, setting, seed=seed, round=t, num_clients=len(SIZES))
        if warmup.observe(selected.clients, selected.trains) == "fill":
            return t
    raise AssertionError("no filling round in 200")


def test_the_model_stays_through_the_warm_up_and_the_filling_round() -> None:
    fills = [_fill_round(seed) for seed in SEEDS]
    assert fills[0] != fills[1]
    assert min(fills) >= 2
    results = _simulate(max(fills) + 3)
    for fill, result in zip(fills, results, strict=True):
        history = result.history
        losses = history.train_loss  # after 0, 1, ... rounds
        assert np.all(losses[: fill + 2] == losses[0]), (fill, losses)  # rounds 0..fill move nothing
        assert losses[fill + 2] != losses[0]
        np.testing.assert_array_equal(history.weight_sum[:fill], 0.0)  # nobody trains while waiting
        assert history.weight_sum[fill] == 1.0  # every client, at 1/N, fills the memory
        assert 0 < history.weight_sum[fill + 1] <= 1.0
    zeros = _simulate(2, variant="zeros")
    assert zeros[0].history.train_loss[1] != zeros[0].history.train_loss[0]  # the default moves at once


def test_resuming_in_and_after_the_warm_up_reproduces_the_run_bit_for_bit(tmp_path: Path) -> None:
    saved: list[Path] = []

    def keep(checkpoint: SimulationCheckpoint) -> None:
        path = tmp_path / f"mifa-{checkpoint.rounds_done}.ckpt"
        save_checkpoint(path, checkpoint)
        saved.append(path)

    rounds = max(_fill_round(seed) for seed in SEEDS) + 3
    reference = _simulate(rounds, checkpoint=keep, checkpoint_every=2)
    loaded = load_checkpoint(saved[0])
    assert loaded.metrics["mifa_seen"].shape == (2, len(SIZES))
    assert 0 < loaded.metrics["mifa_seen"].sum() < 2 * len(SIZES)  # in the warm-up after 2 rounds
    for path in saved:
        for a, b in zip(reference, _simulate(rounds, resume=load_checkpoint(path)), strict=True):
            for name in a.params:
                np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
            np.testing.assert_array_equal(a.history.train_loss, b.history.train_loss)


def test_a_sampler_hears_nothing_of_the_filling_round() -> None:
    """MD sampling under the released MIFA: the filling round trains every client, but a learning
    sampler's feedback holds none of them (nobody it selected took part in a round that moved the model);
    in the other rounds it holds the kept clients of its own selection."""
    data = classification_data(2)
    config = TrainingConfig(rounds=12, num_sampled=len(SIZES), local_steps=1, batch_size=4, local_lr=0.1)
    run = RunSpec(RecordingSampler(), seed=SEEDS[0])
    (result,) = simulate(data, spec_for("softmax", data), [run], config, participation=_participation())
    feedback = result.sampler_state.feedback
    fill = int(np.argmax(result.history.weight_sum == 1.0))
    assert fill > 0
    assert feedback[fill].clients.size == 0
    assert all(f.clients.size == 0 for f in feedback[:fill])
    later = [f for f in feedback[fill + 1 :] if f.clients.size]
    assert later
    assert all(np.isin(f.clients, f.selection.clients).all() for f in later)
