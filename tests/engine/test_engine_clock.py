"""The simulated clock in the engine: deadlines make slow clients late, over-selection keeps the fastest
replies, the round times reach the samplers, the metrics exist only with a system model, and a
resumed run with a system model is the uninterrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from engine_cases import SIZES, RecordingSampler, classification_data, spec_for

from fedsample.engine import (
    RunSpec,
    SimulationCheckpoint,
    TrainingConfig,
    initial_params,
    load_checkpoint,
    save_checkpoint,
    simulate,
)
from fedsample.experiments.results.metrics import SYSTEM_COLUMNS, metrics_table
from fedsample.participation.availability import BernoulliAvailability
from fedsample.participation.setting import Participation
from fedsample.participation.system import SystemModel
from fedsample.samplers import MDSampler


def _config(**options: Any) -> TrainingConfig:
    settings: dict[str, Any] = {"rounds": 6, "num_sampled": 4, "local_steps": 2, "batch_size": 4, "local_lr": 0.1}
    return TrainingConfig(**{**settings, **options})


def _times(model: SystemModel, seed: int, data: Any) -> np.ndarray:
    """Every client's round time under ``model`` for the run seed ``seed`` (the engine's formula)."""
    num_parameters = sum(int(v.numel()) for v in initial_params(spec_for("softmax", data), 0).values())
    systems = model.clients(len(SIZES), seed)
    return systems.round_times(np.arange(len(SIZES)), 2 * 4, num_parameters, model.reference_parameters)


def test_without_a_system_model_there_is_no_clock() -> None:
    data = classification_data(1)
    results = simulate(data, spec_for("softmax", data), [RunSpec(MDSampler(), seed=0)], _config())
    history = results[0].history
    assert history.simulated_seconds is None
    assert history.missed_deadline is None
    assert not set(SYSTEM_COLUMNS) & set(metrics_table([history]))
    assert not set(SYSTEM_COLUMNS) & set(history.to_dict()["rounds"])


def test_a_deadline_makes_the_slow_clients_late_and_counts_them() -> None:
    data = classification_data(2)
    base = SystemModel(compute=0.05, compute_sigma=1.5)
    times = _times(base, 3, data)
    deadline = float(np.median(times))  # about half the clients are too slow
    model = SystemModel(compute=0.05, compute_sigma=1.5, deadline=deadline)
    config = _config(rounds=8)
    result = simulate(
        data,
        spec_for("softmax", data),
        [RunSpec(RecordingSampler(), seed=3)],
        config,
        participation=Participation(system=model),
    )[0]
    history = result.history
    assert history.missed_deadline is not None
    assert history.missed_deadline.sum() > 0
    assert np.all(history.late >= history.missed_deadline)
    for t, feedback in enumerate(result.sampler_state.feedback):
        # Only the clients within the deadline are kept, and their times reach the sampler.
        assert np.all(times[feedback.clients] <= deadline)
        np.testing.assert_allclose(feedback.round_times, times[feedback.clients])
        if history.missed_deadline[t]:
            assert history.simulated_round_seconds[t] == deadline
    np.testing.assert_allclose(history.simulated_seconds, np.cumsum(history.simulated_round_seconds))
    assert np.all(history.simulated_round_seconds <= deadline + 1e-12)
    table = metrics_table([history])
    assert set(SYSTEM_COLUMNS) <= set(table)
    assert table["missed_deadline"][1:].tolist() == history.missed_deadline.tolist()


def test_over_selection_keeps_the_fastest_replies() -> None:
    data = classification_data(3)
    model = SystemModel(compute=0.05, compute_sigma=1.0)
    times = _times(model, 5, data)
    participation = Participation(system=model, over_selection=1.0)
    config = _config(rounds=6, num_sampled=3)
    result = simulate(
        data, spec_for("softmax", data), [RunSpec(RecordingSampler(), seed=5)], config, participation=participation
    )[0]
    history = result.history
    assert history.late.sum() > 0
    for t, feedback in enumerate(result.sampler_state.feedback):
        kept = feedback.clients
        asked = np.unique(feedback.selection.clients)
        late = np.setdiff1d(asked, kept)
        assert kept.size == min(3, asked.size)
        if late.size:  # every late client is slower than every kept one
            assert times[late].min() >= times[kept].max()
            assert history.simulated_round_seconds[t] == times[kept].max()


def test_resuming_with_a_system_model_reproduces_the_run(tmp_path: Path) -> None:
    data = classification_data(4)
    participation = Participation(system=SystemModel(compute=0.05, deadline=0.5), over_selection=0.5)
    runs = [RunSpec(MDSampler(), seed=s) for s in (0, 1)]
    saved: list[Path] = []

    def keep(checkpoint: SimulationCheckpoint) -> None:
        path = tmp_path / f"round-{checkpoint.rounds_done}.ckpt"
        save_checkpoint(path, checkpoint)
        saved.append(path)

    spec = spec_for("softmax", data)
    reference = simulate(data, spec, runs, _config(), participation=participation, checkpoint=keep, checkpoint_every=2)
    assert len(saved) == 2
    assert reference[0].history.simulated_seconds[-1] > 0
    for path in saved:
        resumed = simulate(data, spec, runs, _config(), participation=participation, resume=load_checkpoint(path))
        for a, b in zip(reference, resumed, strict=True):
            one, two = a.history.to_dict(), b.history.to_dict()
            one["rounds"].pop("round_seconds")
            two["rounds"].pop("round_seconds")
            assert one == two
            for name in a.params:
                np.testing.assert_array_equal(a.params[name], b.params[name])


def test_samplers_see_the_clients_available_next_round() -> None:
    data = classification_data(6)
    availability = BernoulliAvailability(0.6, seed=2)
    participation = Participation(availability=availability)
    result = simulate(
        data, spec_for("softmax", data), [RunSpec(RecordingSampler(), seed=1)], _config(), participation=participation
    )[0]
    setting = participation.for_run(1)
    for t, feedback in enumerate(result.sampler_state.feedback):
        expected = np.flatnonzero(setting.availability.available(t + 1, np.arange(len(SIZES))))
        assert feedback.available is not None
        np.testing.assert_array_equal(feedback.available, expected)
        assert feedback.round_times is None  # no system model: no clock
    plain = simulate(data, spec_for("softmax", data), [RunSpec(RecordingSampler(), seed=1)], _config())[0]
    assert all(f.available is None for f in plain.sampler_state.feedback)
