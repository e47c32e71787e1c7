"""The simulated clock charges a two-phase round's first phase (docs/system.md, "Two-phase rounds on the
clock"): pow-d's candidates receive the model, evaluate their loss over all their samples at a third of
a training sample's cost and report; cpow-d's over a mini-batch; optimal's candidates train and report a
norm. The round lasts that first phase, until the last report, plus the chosen clients' second phase.
Every expected time below is computed by hand from the model's medians (``distribution="constant"``:
every client has them) or from a small trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from engine_cases import SIZES, classification_data, spec_for

from fedsample.engine import RunResult, RunSpec, TrainingConfig, initial_params, simulate
from fedsample.participation.setting import Participation
from fedsample.participation.system import FORWARD_SHARE, SystemModel
from fedsample.samplers import DivFLSampler, HighLossSampler, MDSampler, OptimalSampler, PowerOfChoiceSampler, Sampler

ROUNDS, M, STEPS, BATCH = 3, 3, 2, 4
SAMPLES = STEPS * BATCH  # the samples a client trains on in a round
COMPUTE, UPLOAD, DOWNLOAD, LATENCY = 0.05, 10.0, 50.0, 0.05
N = len(SIZES)
BIGGEST = max(SIZES)  # 20 samples


def _num_parameters() -> int:
    data = classification_data(0)
    return sum(int(v.numel()) for v in initial_params(spec_for("softmax", data), 0).values())


D = _num_parameters()
MEGABITS = 32 * D / 1e6  # the model, as float32


def _model(**options: Any) -> SystemModel:
    # reference_parameters = d: a sample costs the compute median itself.
    settings: dict[str, Any] = {
        "distribution": "constant",
        "compute": COMPUTE,
        "upload": UPLOAD,
        "download": DOWNLOAD,
        "latency": LATENCY,
        "reference_parameters": float(D),
    }
    return SystemModel(**{**settings, **options})


def _run(sampler: Sampler[Any], model: SystemModel, rounds: int = ROUNDS) -> RunResult:
    data = classification_data(0)
    config = TrainingConfig(rounds=rounds, num_sampled=M, local_steps=STEPS, batch_size=BATCH, local_lr=0.1)
    participation = Participation(system=model)
    runs = [RunSpec(sampler, seed=4)]
    return simulate(data, spec_for("softmax", data), runs, config, participation=participation, init_seed=1)[0]


def _loss_report(samples: int, download: float = DOWNLOAD) -> float:
    """A candidate's first phase for a loss report: receive the model, a forward pass per sample, report."""
    return LATENCY + MEGABITS / download + samples * COMPUTE * FORWARD_SHARE + LATENCY


# A pow-d or cpow-d chosen client already holds the model: it trains and uploads.
TRAIN_AND_UPLOAD = SAMPLES * COMPUTE + LATENCY + MEGABITS / UPLOAD


def test_pow_d_rounds_last_the_slowest_loss_report_then_training_and_upload() -> None:
    # d = n: every client is a candidate, so the first phase waits for the largest client's pass.
    result = _run(PowerOfChoiceSampler(variant="pow-d", num_candidates=N), _model())
    history = result.history
    first_phase = _loss_report(BIGGEST)
    expected = first_phase + TRAIN_AND_UPLOAD
    np.testing.assert_array_equal(history.distinct_clients, np.full(ROUNDS, M))
    np.testing.assert_allclose(history.simulated_round_seconds, np.full(ROUNDS, expected), rtol=1e-12)
    np.testing.assert_allclose(history.simulated_seconds, expected * np.arange(1, ROUNDS + 1), rtol=1e-12)
    assert history.missed_deadline is not None
    assert history.missed_deadline.sum() == 0


def test_cpow_d_first_phase_is_shorter_than_pow_d_when_its_batch_is_smaller_than_the_clients() -> None:
    batch = 3  # < 20, the largest client's size
    pow_d = _run(PowerOfChoiceSampler(variant="pow-d", num_candidates=N), _model()).history
    cpow_d = _run(PowerOfChoiceSampler(variant="cpow-d", num_candidates=N, loss_batch=batch), _model()).history
    # Each candidate evaluates min(n_i, b) samples; every client holds at least 2 and the largest 20.
    expected = _loss_report(min(BIGGEST, batch)) + TRAIN_AND_UPLOAD
    np.testing.assert_allclose(cpow_d.simulated_round_seconds, np.full(ROUNDS, expected), rtol=1e-12)
    shorter = (BIGGEST - batch) * COMPUTE * FORWARD_SHARE
    np.testing.assert_allclose(pow_d.simulated_round_seconds - cpow_d.simulated_round_seconds, shorter, rtol=1e-9)


def test_the_first_phase_waits_for_the_slowest_candidate_of_a_trace(tmp_path: Path) -> None:
    # Identical compute and upload, different downloads: the chosen clients' second phases are equal,
    # and the first phase lasts until the slowest candidate, chosen or not, has reported.
    downloads = 10.0 + 5.0 * np.arange(N)
    rows = ["client,compute,upload,download", *(f"{i},{COMPUTE},{UPLOAD},{downloads[i]}" for i in range(N))]
    trace = tmp_path / "devices.csv"
    trace.write_text("\n".join(rows) + "\n")
    result = _run(PowerOfChoiceSampler(variant="pow-d", num_candidates=N), _model(trace=str(trace)))
    first_phase = max(_loss_report(size, download) for size, download in zip(SIZES, downloads, strict=True))
    expected = first_phase + TRAIN_AND_UPLOAD
    np.testing.assert_allclose(result.history.simulated_round_seconds, np.full(ROUNDS, expected), rtol=1e-12)


def test_optimal_charges_its_candidates_training_then_only_the_chosen_clients_upload() -> None:
    result = _run(OptimalSampler(mode="protocol", candidates=6), _model(), rounds=4)
    history = result.history
    np.testing.assert_array_equal(history.computed_clients, np.full(4, 6))
    # Every candidate trains the round's samples: the same first phase for each.
    first_phase = LATENCY + MEGABITS / DOWNLOAD + SAMPLES * COMPUTE + LATENCY
    upload = LATENCY + MEGABITS / UPLOAD
    chosen = history.distinct_clients > 0
    assert chosen.any()
    np.testing.assert_allclose(history.simulated_round_seconds[chosen], first_phase + upload, rtol=1e-12)
    # A round that chose nobody still took its first phase.
    np.testing.assert_allclose(history.simulated_round_seconds[~chosen], first_phase, rtol=1e-12)


def test_a_one_phase_sampler_is_charged_the_documented_round_time() -> None:
    history = _run(MDSampler(), _model()).history
    round_time = (LATENCY + MEGABITS / DOWNLOAD) + SAMPLES * COMPUTE + (LATENCY + MEGABITS / UPLOAD)
    np.testing.assert_allclose(history.simulated_round_seconds, np.full(ROUNDS, round_time), rtol=1e-12)


def test_a_deadline_shorter_than_the_first_phase_makes_every_chosen_client_late() -> None:
    first_phase = _loss_report(BIGGEST)
    deadline = first_phase - 1e-3
    history = _run(PowerOfChoiceSampler(variant="pow-d", num_candidates=N), _model(deadline=deadline)).history
    assert history.missed_deadline is not None
    np.testing.assert_array_equal(history.missed_deadline, np.full(ROUNDS, M))
    np.testing.assert_array_equal(history.late, np.full(ROUNDS, M))
    np.testing.assert_array_equal(history.communicated_clients, np.zeros(ROUNDS))
    # The round lasts its first phase: the server needs every report before it draws, and the
    # deadline, already past, then ends the round.
    np.testing.assert_allclose(history.simulated_round_seconds, np.full(ROUNDS, first_phase), rtol=1e-12)


def test_a_deadline_a_one_phase_round_meets_is_missed_once_the_first_phase_is_charged() -> None:
    one_phase = (LATENCY + MEGABITS / DOWNLOAD) + SAMPLES * COMPUTE + (LATENCY + MEGABITS / UPLOAD)
    two_phase = _loss_report(BIGGEST) + TRAIN_AND_UPLOAD
    deadline = (one_phase + two_phase) / 2
    assert one_phase < deadline < two_phase
    model = _model(deadline=deadline)
    md = _run(MDSampler(), model).history
    assert md.missed_deadline is not None
    assert md.missed_deadline.sum() == 0
    history = _run(PowerOfChoiceSampler(variant="pow-d", num_candidates=N), model).history
    assert history.missed_deadline is not None
    np.testing.assert_array_equal(history.missed_deadline, np.full(ROUNDS, M))
    # Fewer than m kept with a chosen client awaited: the server waits until the deadline.
    np.testing.assert_allclose(history.simulated_round_seconds, np.full(ROUNDS, deadline), rtol=1e-12)


# An initial phase (issue 25): DivFL and high-loss ask every client once, before their first selection.
ONE_PHASE = 2 * LATENCY + MEGABITS / DOWNLOAD + SAMPLES * COMPUTE + MEGABITS / UPLOAD  # download, train, upload


def test_divfl_charges_every_clients_gradient_once_then_each_chosen_clients_gradient() -> None:
    """Round 0: every client receives the model, computes its gradient over its n_i samples (a training
    sample's cost each) and uploads it (d floats); the chosen then train and upload. Later rounds are
    one-phase, each kept client also computing and uploading its full-batch gradient."""
    history = _run(DivFLSampler(), _model()).history
    first_phase = LATENCY + MEGABITS / DOWNLOAD + BIGGEST * COMPUTE + LATENCY + MEGABITS / UPLOAD
    assert history.simulated_round_seconds[0] == pytest.approx(first_phase + TRAIN_AND_UPLOAD, rel=1e-12)
    later = history.simulated_round_seconds[1:]
    extra = MEGABITS / UPLOAD + np.array([min(SIZES), BIGGEST]) * COMPUTE
    assert np.all(later >= ONE_PHASE + extra[0] - 1e-12)
    assert np.all(later <= ONE_PHASE + extra[1] + 1e-12)


def test_divfl_with_updates_charges_every_clients_training_and_upload_once() -> None:
    """representative='update': round 0's clients train and send their update with their report, so the
    chosen ones have nothing left to do: the round lasts the first phase. Later rounds are one-phase."""
    history = _run(DivFLSampler(representative="update"), _model()).history
    first_phase = LATENCY + MEGABITS / DOWNLOAD + SAMPLES * COMPUTE + LATENCY + MEGABITS / UPLOAD
    assert history.simulated_round_seconds[0] == pytest.approx(first_phase, rel=1e-12)
    np.testing.assert_allclose(history.simulated_round_seconds[1:], ONE_PHASE, rtol=1e-12)


def test_high_loss_charges_every_clients_loss_evaluation_once() -> None:
    history = _run(HighLossSampler(), _model()).history
    assert history.simulated_round_seconds[0] == pytest.approx(_loss_report(BIGGEST) + TRAIN_AND_UPLOAD, rel=1e-12)
    np.testing.assert_allclose(history.simulated_round_seconds[1:], ONE_PHASE, rtol=1e-12)
    old = _run(HighLossSampler(initial_evaluation=False), _model()).history
    np.testing.assert_allclose(old.simulated_round_seconds, ONE_PHASE, rtol=1e-12)
