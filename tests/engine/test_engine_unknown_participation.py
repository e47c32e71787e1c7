"""The engine under the policies for unknown participation rates (FedAU, MIFA, FedVARP): their first
round against the memoryless policies, their state through checkpoints, FedAU's weights against the
round pipeline replayed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engine_cases import SIZES, classification_data, spec_for

import fedsample
from fedsample.engine import (
    RunResult,
    RunSpec,
    SimulationCheckpoint,
    TrainingConfig,
    load_checkpoint,
    save_checkpoint,
    simulate,
)
from fedsample.errors import FedsampleError
from fedsample.participation import (
    CyclicAvailability,
    Dropout,
    MarkovAvailability,
    Participation,
    select_participants,
    settle_participants,
)
from fedsample.samplers import FullSampler, MDSampler

RATES = np.linspace(0.2, 0.9, len(SIZES))


def _participation(policy: str, **options: Any) -> Participation:
    availability = MarkovAvailability.stationary(RATES, off_to_on=0.3, seed=2)
    return Participation(availability=availability, policy=policy, **options)  # type: ignore[arg-type]


def _simulate(policy: str, rounds: int = 6, **options: Any) -> list[RunResult]:
    data = classification_data(2)
    runs = [RunSpec(FullSampler(), seed=0), RunSpec(MDSampler(), seed=3), RunSpec(FullSampler(), seed=5)]
    config = TrainingConfig(rounds=rounds, num_sampled=len(SIZES), local_steps=2, batch_size=4, local_lr=0.1)
    return simulate(
        data, spec_for("mlp", data), runs, config, init_seed=1, participation=_participation(policy), **options
    )


def _assert_identical(first: list[RunResult], second: list[RunResult]) -> None:
    for a, b in zip(first, second, strict=True):
        for name in a.params:
            np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
        one, two = a.history.to_dict(), b.history.to_dict()
        one["rounds"].pop("round_seconds")
        two["rounds"].pop("round_seconds")
        assert one == two


@pytest.mark.parametrize(("policy", "memoryless"), [("mifa", "ignore"), ("fedvarp", "renormalise")])
def test_the_first_round_of_a_memory_policy_is_its_memoryless_counterpart(policy: str, memoryless: str) -> None:
    """Round 1 from an empty memory: MIFA adds ``p_i Delta_i`` of the kept clients (the never-seen ones
    contribute zero), which is "ignore" under full participation; FedVARP's correction is the
    renormalised update, under MD sampling too."""
    with_memory, without = _simulate(policy, rounds=1), _simulate(memoryless, rounds=1)
    if policy == "mifa":  # MIFA weighs by p_i, which "ignore" does under full participation only
        with_memory, without = with_memory[::2], without[::2]
    for a, b in zip(with_memory, without, strict=True):
        for name in a.params:
            np.testing.assert_allclose(a.params[name], b.params[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_the_memory_changes_the_later_rounds() -> None:
    mifa, ignore = _simulate("mifa", rounds=3), _simulate("ignore", rounds=3)
    assert not np.allclose(mifa[0].params["layers.0.weight"], ignore[0].params["layers.0.weight"])


@pytest.mark.parametrize("policy", ["fedau", "mifa", "fedvarp"])
def test_resuming_reproduces_the_uninterrupted_run_bit_for_bit(policy: str, tmp_path: Path) -> None:
    saved: list[Path] = []

    def keep(checkpoint: SimulationCheckpoint) -> None:
        path = tmp_path / f"{policy}-{checkpoint.rounds_done}.ckpt"
        save_checkpoint(path, checkpoint)
        saved.append(path)

    reference = _simulate(policy, checkpoint=keep, checkpoint_every=2)
    assert len(saved) == 2
    loaded = load_checkpoint(saved[0])
    if policy == "fedau":
        assert loaded.memory is None
        assert loaded.metrics["interval_count"].shape == (3, len(SIZES))
        assert loaded.metrics["interval_count"].sum() > 0
    else:
        assert loaded.memory is not None
        assert loaded.memory.updates["layers.0.weight"].shape[:2] == (3, len(SIZES))
        assert loaded.memory.updates["layers.0.weight"].abs().sum() > 0
    for path in saved:
        _assert_identical(reference, _simulate(policy, resume=load_checkpoint(path)))
    # One checkpoint object resumed twice: the rounds do not write into it.
    twice = load_checkpoint(saved[0])
    _assert_identical(_simulate(policy, resume=twice), _simulate(policy, resume=twice))
    _assert_identical(reference, _simulate(policy))  # checkpointing itself changes nothing


def test_a_checkpoint_without_the_memory_is_refused(tmp_path: Path) -> None:
    checkpoints: list[SimulationCheckpoint] = []
    _simulate("renormalise", checkpoint=checkpoints.append, checkpoint_every=2)
    with pytest.raises(FedsampleError, match=r"'resume' parameter of simulate must be a checkpoint with remembered"):
        _simulate("mifa", resume=checkpoints[0])
    with pytest.raises(FedsampleError, match=r"'resume' parameter of simulate must be a checkpoint with the counts"):
        _simulate("fedau", resume=checkpoints[0])


def test_fedau_s_weights_in_the_engine_are_the_round_pipeline_s() -> None:
    """Replaying the selection and settlement with a fresh interval estimator gives each round's weight
    sum the engine recorded: the engine feeds the estimator once a round, with who returned."""
    data = classification_data(2)
    participation = Participation(
        availability=CyclicAvailability(RATES, period=6, seed=1), dropout=Dropout(0.2, seed=4), policy="fedau"
    )
    config = TrainingConfig(rounds=12, num_sampled=len(SIZES), local_steps=1, batch_size=4, local_lr=0.1)
    (result,) = simulate(
        data, spec_for("softmax", data), [RunSpec(FullSampler(), seed=7)], config, participation=participation
    )
    setting = participation.for_run(7)
    estimator = setting.new_estimator(len(SIZES))
    state = FullSampler().init(data.federation(), len(SIZES))
    for t in range(config.rounds):
        selected = select_participants(FullSampler(), state, setting, seed=7, round=t, num_clients=len(SIZES))
        settled = settle_participants(
            selected,
            np.ones(selected.clients.size, dtype=bool),
            setting,
            seed=7,
            round=t,
            num_kept=len(SIZES),
            estimator=estimator,
        )
        assert result.history.weight_sum[t] == pytest.approx(settled.weights.sum(), rel=1e-12)
    assert result.history.weight_sum.max() > 1  # the intervals' mean exceeds one for the rarely available


def test_a_run_from_a_config_with_the_new_keys(tmp_path: Path) -> None:
    from fedsample.experiments.build import build_participation
    from fedsample.experiments.config.reading import ParticipationSection

    section = ParticipationSection(
        availability=0.3,
        availability_process="markov",
        markov_off_to_on=0.1,
        policy="fedvarp",
        availability_label_alpha=0.5,
    )
    with pytest.raises(FedsampleError, match=r"The 'participation.availability_label_alpha' key of config must be"):
        build_participation(section)
    built = build_participation(section, data=classification_data(1))
    assert isinstance(built.availability, MarkovAvailability)
    assert built.policy == "fedvarp"
    rates = built.availability.probabilities(len(SIZES))
    assert rates.min() >= 0.02
    assert len(np.unique(rates)) > 1
    cyclic = build_participation(ParticipationSection(availability=0.5, availability_process="cyclic", cyclic_period=8))
    assert isinstance(cyclic.availability, CyclicAvailability)
    assert cyclic.availability.period == 8
    assert fedsample.participation.POLICIES[-3:] == ("fedau", "mifa", "fedvarp")
