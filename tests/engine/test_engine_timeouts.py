"""With a deadline, the engine tells every sampler which selected clients timed out (Feedback.timed_out,
the server waited the deadline for each): exactly the clients that trained but missed it, not those that
dropped out. Without a deadline or without a system model, the fields stay ``None``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from engine_cases import SIZES, RecordingSampler, classification_data, spec_for

from fedsample.engine import RunResult, RunSpec, TrainingConfig, initial_params, simulate
from fedsample.participation.availability import Dropout
from fedsample.participation.setting import Participation
from fedsample.participation.system import SystemModel
from fedsample.samplers import OortSampler, Sampler

N = len(SIZES)
SLOW = np.array([1, 4, 7, 10])  # 1 s per sample: 8 s of local work, far beyond the deadline
DEADLINE = 3.0  # the others need about 0.1 s


def _model(tmp_path: Path, **options: Any) -> SystemModel:
    """The trace's clients; a sample costs its compute value (reference_parameters = the model's size)."""
    data = classification_data(5)
    d = sum(int(v.numel()) for v in initial_params(spec_for("softmax", data), 0).values())
    return SystemModel(trace=_trace(tmp_path), reference_parameters=float(d), **options)


def _trace(tmp_path: Path) -> str:
    rows = ["client,compute,upload,download"]
    rows += [f"{i},{1.0 if i in SLOW else 0.01},100,100" for i in range(N)]
    path = tmp_path / "devices.csv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _run(sampler: Sampler[Any], participation: Participation, rounds: int = 8) -> RunResult:
    data = classification_data(5)
    config = TrainingConfig(rounds=rounds, num_sampled=5, local_steps=2, batch_size=4, local_lr=0.1)
    runs = [RunSpec(sampler, seed=2)]
    return simulate(data, spec_for("softmax", data), runs, config, participation=participation)[0]


def test_the_late_selected_clients_are_timed_out_with_the_deadline_as_their_wait(tmp_path: Path) -> None:
    model = _model(tmp_path, deadline=DEADLINE)
    result = _run(RecordingSampler(), Participation(system=model))
    feedbacks = result.sampler_state.feedback
    assert result.history.missed_deadline is not None
    for t, feedback in enumerate(feedbacks):
        asked = np.unique(feedback.selection.clients)
        assert feedback.timed_out is not None
        assert feedback.timed_out_seconds is not None
        assert feedback.timed_out.tolist() == np.intersect1d(asked, SLOW).tolist()
        assert feedback.timed_out_seconds.tolist() == [DEADLINE] * feedback.timed_out.size
        assert feedback.clients.tolist() == np.setdiff1d(asked, SLOW).tolist()
        assert result.history.missed_deadline[t] == feedback.timed_out.size
    assert sum(f.timed_out.size for f in feedbacks if f.timed_out is not None) > 0


def test_dropped_clients_are_not_timed_out(tmp_path: Path) -> None:
    model = _model(tmp_path, deadline=DEADLINE)
    result = _run(RecordingSampler(), Participation(system=model, dropout=Dropout(0.4, seed=3)), rounds=12)
    history, dropped_slow = result.history, 0
    for t, feedback in enumerate(result.sampler_state.feedback):
        assert feedback.timed_out is not None
        slow_asked = np.intersect1d(np.unique(feedback.selection.clients), SLOW)
        assert set(feedback.timed_out.tolist()) <= set(slow_asked.tolist())
        assert history.missed_deadline[t] == feedback.timed_out.size
        dropped_slow += slow_asked.size - feedback.timed_out.size
    assert dropped_slow > 0  # some slow clients dropped out and were not reported as timed out


def test_oort_knows_every_round_time_up_front_and_the_deadline_does_not_lower_one(tmp_path: Path) -> None:
    """With a system model the engine hands Oort every client's round time at init (FedScale's selector
    has them from registration); a straggler's wait, the deadline, is a lower bound below it."""
    model = _model(tmp_path, deadline=DEADLINE)
    state = _run(OortSampler(), Participation(system=model), rounds=10).sampler_state
    asked = state.last_round > 0
    slow = np.zeros(N, dtype=bool)
    slow[SLOW] = True
    assert (asked & slow).any()
    assert np.isfinite(state.durations).all()
    assert np.all(state.durations[slow] > DEADLINE)  # about 8 s, not the 3 s waited
    assert state.explored[asked & slow].all()  # stragglers count as explored (FedScale's aggregator)
    assert state.timed_out[asked & slow].all()
    assert np.all(state.durations[~slow] < 1.0)
    # Without a system model nothing is known until reported.
    plain = _run(OortSampler(), Participation(), rounds=1).sampler_state
    assert np.isinf(plain.durations).all()


def test_without_a_deadline_or_a_clock_nobody_times_out(tmp_path: Path) -> None:
    for participation in (Participation(system=_model(tmp_path)), Participation()):
        for feedback in _run(RecordingSampler(), participation, rounds=3).sampler_state.feedback:
            assert feedback.timed_out is None
            assert feedback.timed_out_seconds is None
