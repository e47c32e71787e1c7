"""The first phase's candidates: ``optimal``'s ``K`` drawn uniformly among the available clients with
two-stage Horvitz-Thompson weights, availability honoured before anyone computes, and Power-of-Choice's
pow-d and cpow-d fed their candidates' current losses by a forward pass."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import torch
from engine_cases import SIZES, Recorded, RecordingSampler, classification_data, regression_data, spec_for

import fedsample
from fedsample.data import FederatedDataset
from fedsample.engine import RunResult, RunSpec, TrainingConfig, simulate
from fedsample.engine.first_phase import design_variance
from fedsample.errors import FedsampleError
from fedsample.participation import BernoulliAvailability, Participation
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import Feedback, LossState, NormState
from fedsample.samplers.two_phase import draw_candidates

ROUNDS = 4
M = 3
N = len(SIZES)


def _run(
    samplers: list[fedsample.Sampler[object]],
    *,
    participation: Participation | None = None,
    regression: bool = False,
    rounds: int = ROUNDS,
) -> list[RunResult]:
    data = regression_data(4) if regression else classification_data(5)
    config = TrainingConfig(rounds=rounds, num_sampled=M, local_steps=2, batch_size=4, local_lr=0.05)
    runs = [RunSpec(sampler, seed=1) for sampler in samplers]
    model = spec_for("linear" if regression else "mlp", data)
    return simulate(data, model, runs, config, init_seed=2, participation=participation)


# --- optimal's candidate set ---------------------------------------------------------------------


def test_the_two_stage_weights_are_unbiased_over_the_candidate_draw() -> None:
    # E[w_i] = E_C[E[w_i | C]] with E[w_i | C] = q_i (w^C_i / q_i) read from the exact second-stage design,
    # averaged over T candidate draws. Within 5 standard errors (false-failure rate below 1e-6 per client);
    # without the 1 / (K / N) of the first stage the mean would be p_i K / N, 20 standard errors away or more.
    sizes = np.array([5, 1, 9, 3, 3, 7, 2])
    federation = fedsample.Federation.from_sizes(sizes)
    p = np.asarray(federation.importances)
    norms = np.random.default_rng(0).uniform(0.5, 3.0, sizes.size)
    sampler = fedsample.make_sampler("optimal", mode="protocol", candidates=4)
    state = sampler.init(federation, 2)
    rng = np.random.default_rng(1)
    trials = 4000
    means = np.empty((trials, sizes.size))
    everyone = np.arange(sizes.size)
    for k in range(trials):
        selection = draw_candidates(sampler, state, everyone, rng, p)
        assert selection.clients.size == 4
        report = Feedback(
            round=0, selection=selection, clients=selection.clients, update_norms=norms[selection.clients]
        )
        design = sampler.design(sampler.update(state, report))
        means[k] = design.inclusion * design.weights
    error = means.std(axis=0, ddof=1) / math.sqrt(trials)
    assert np.all(np.abs(means.mean(axis=0) - p) <= 5 * error)


def test_optimal_with_k_candidates_computes_k_and_draws_among_them() -> None:
    (result,) = _run([fedsample.make_sampler("optimal", mode="protocol", candidates=5)])
    h = result.history
    assert h.computed_clients is not None
    assert h.communicated_clients is not None
    np.testing.assert_array_equal(h.computed_clients, np.full(ROUNDS, 5))
    assert np.all(h.communicated_clients <= 5)
    state = result.sampler_state
    assert isinstance(state, NormState)
    assert state.candidates.size == 5
    # The candidates carry the first stage's weights p_i N / K.
    np.testing.assert_allclose(state.candidate_weights, state.importances[state.candidates] * N / 5, rtol=1e-12)
    # The recorded variance is the second stage's given the candidates; MD and uniform need every update.
    assert h.aggregate_variance is not None
    assert np.all(np.isfinite(h.aggregate_variance))
    assert h.aggregate_variance_md is not None
    assert np.all(np.isnan(h.aggregate_variance_md))


def test_the_default_candidates_are_every_client_as_before() -> None:
    default, explicit = _run(
        [
            fedsample.make_sampler("optimal", mode="protocol"),
            fedsample.make_sampler("optimal", mode="protocol", candidates=N),
        ]
    )
    assert default.history.computed_clients is not None
    np.testing.assert_array_equal(default.history.computed_clients, np.full(ROUNDS, N))
    for name in ("aggregate_variance", "aggregate_variance_md", "distinct_clients"):
        np.testing.assert_array_equal(getattr(default.history, name), getattr(explicit.history, name), err_msg=name)


def test_the_conditional_variance_is_the_designs_on_the_candidates_updates() -> None:
    rng = np.random.default_rng(3)
    federation = fedsample.Federation.from_sizes(np.array([4, 2, 8, 1, 6, 3]))
    p = np.asarray(federation.importances)
    updates = rng.normal(size=(6, 3))
    sampler = fedsample.make_sampler("optimal", mode="protocol", candidates=3)
    state = sampler.init(federation, 2)
    selection = draw_candidates(sampler, state, np.arange(6), rng, p)
    report = Feedback(
        round=0,
        selection=selection,
        clients=selection.clients,
        update_norms=np.linalg.norm(updates[selection.clients], axis=1),
    )
    state = sampler.update(state, report)
    dense = np.zeros_like(updates)
    dense[selection.clients] = updates[selection.clients]
    q = sampler.inclusion(state)[selection.clients]
    w = selection.weights
    expected = float(np.sum((1 - q) / q * w**2 * np.sum(updates[selection.clients] ** 2, axis=1)))
    assert design_variance(sampler.design(state), p, dense) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"candidates": 4}, "'candidates' parameter of OptimalSampler must be None unless mode='protocol'"),
        ({"mode": "protocol", "candidates": 0}, "'candidates' parameter"),
        ({"mode": "protocol", "candidates": 2}, "[num_sampled, num_clients] = [3, 12]"),
    ],
)
def test_a_bad_candidate_count_is_one_clear_error(params: dict[str, object], message: str) -> None:
    with pytest.raises(FedsampleError, match=message.replace("[", r"\[").replace("]", r"\]")):
        fedsample.make_sampler("optimal", **params).init(fedsample.Federation.from_sizes(np.array(SIZES)), M)


# --- availability in the first phase -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TwoPhaseRecorder(RecordingSampler):
    """MD sampling declared two-phase: its state collects every report it reads."""

    name: ClassVar[str] = "recording-two-phase-availability"
    two_phase: ClassVar[bool] = True


@pytest.mark.parametrize("candidates", [None, 4])
def test_only_available_clients_are_candidates_and_report(candidates: int | None) -> None:
    participation = Participation(availability=BernoulliAvailability(probability=0.5, seed=7))
    optimal = fedsample.make_sampler("optimal", mode="protocol", candidates=candidates)
    recorder, result = _run([TwoPhaseRecorder(), optimal], participation=participation, rounds=6)
    availability = participation.for_run(1).availability
    state = recorder.sampler_state
    assert isinstance(state, Recorded)
    assert [f.round for f in state.feedback] == list(range(6))
    for f in state.feedback:
        available = np.flatnonzero(availability.available(f.round, np.arange(N)))
        np.testing.assert_array_equal(f.clients, available)  # every available client, no other
    # optimal's candidates are available, so none of its selected clients is unavailable.
    assert result.history.unavailable is not None
    np.testing.assert_array_equal(result.history.unavailable, np.zeros(6))
    assert result.history.computed_clients is not None
    assert np.all(result.history.computed_clients <= (4 if candidates else N))
    final = result.sampler_state  # after round 5's report: its candidates are among round 5's available clients
    assert isinstance(final, NormState)
    assert set(final.candidates.tolist()) <= set(np.flatnonzero(availability.available(5, np.arange(N))).tolist())


# --- Power-of-Choice's pow-d and cpow-d ----------------------------------------------------------


def _constant_target_data() -> tuple[FederatedDataset, np.ndarray]:
    """Regression clients whose targets are one constant each: at the zero model client i's loss is c_i^2."""
    data = regression_data(4)
    sizes = np.diff(np.asarray(data.train_indptr))
    constants = np.linspace(0.5, 6.0, sizes.size)[np.random.default_rng(0).permutation(sizes.size)]
    dataset = FederatedDataset(
        train_features=data.train_features,
        train_targets=np.repeat(constants, sizes),
        train_indptr=data.train_indptr,
        test_features=data.test_features,
        test_targets=data.test_targets,
        test_indptr=data.test_indptr,
        task="regression",
    )
    return dataset, constants


def _zero_model_run(sampler: fedsample.Sampler[object]) -> tuple[RunResult, np.ndarray]:
    data, constants = _constant_target_data()
    spec = spec_for("linear", data)
    zero = {name: torch.zeros_like(v) for name, v in spec.build().state_dict().items()}
    config = TrainingConfig(rounds=1, num_sampled=M, local_steps=1, batch_size=4, local_lr=0.01)
    (result,) = simulate(data, spec, [RunSpec(sampler, seed=1)], config, params=zero)
    return result, constants


@pytest.mark.parametrize("variant", ["pow-d", "cpow-d"])
def test_pow_d_keeps_the_candidates_with_the_highest_current_loss(variant: str) -> None:
    params = {"loss_batch": 2} if variant == "cpow-d" else {}
    sampler = fedsample.make_sampler("power-of-choice", num_candidates=7, variant=variant, **params)
    result, constants = _zero_model_run(sampler)
    state = result.sampler_state
    assert isinstance(state, LossState)
    candidates = np.flatnonzero(state.available)
    assert candidates.size == 7
    # The report is every candidate's current loss at the global (zero) model: c_i^2 on any of its samples.
    np.testing.assert_allclose(state.losses[candidates], constants[candidates] ** 2, rtol=1e-6)
    assert np.all(np.isneginf(np.delete(state.losses, candidates)))  # nobody else computed
    # The round's draw (the engine's stream) keeps the m candidates of highest loss.
    selection = sampler.sample(state, stream_rng(1, Stream.SAMPLING, 0))
    top = candidates[np.argsort(-(constants[candidates] ** 2))[:M]]
    np.testing.assert_array_equal(np.sort(selection.clients), np.sort(top))
    assert result.history.computed_clients is not None
    np.testing.assert_array_equal(result.history.computed_clients, [7])
    np.testing.assert_array_equal(result.history.communicated_clients, [M])


def test_cpow_d_estimates_the_loss_on_a_mini_batch() -> None:
    # Client-dependent targets within a client: the mini-batch mean differs from the full mean in general,
    # and lies between the client's smallest and largest sample loss.
    data = regression_data(4)
    spec = spec_for("linear", data)
    zero = {name: torch.zeros_like(v) for name, v in spec.build().state_dict().items()}
    config = TrainingConfig(rounds=1, num_sampled=M, local_steps=1, batch_size=4, local_lr=0.01)
    runs = [
        RunSpec(fedsample.make_sampler("power-of-choice", num_candidates=N, variant=v, **extra), seed=1)
        for v, extra in (("pow-d", {}), ("cpow-d", {"loss_batch": 1}))
    ]
    full, batch = simulate(data, spec, runs, config, params=zero)
    offsets = np.asarray(data.train_indptr)
    y2 = np.asarray(data.train_targets, dtype=np.float64) ** 2
    means = np.array([y2[offsets[i] : offsets[i + 1]].mean() for i in range(N)])
    assert isinstance(full.sampler_state, LossState)
    assert isinstance(batch.sampler_state, LossState)
    np.testing.assert_allclose(full.sampler_state.losses, means, rtol=1e-5)
    one = batch.sampler_state.losses  # one sample each: exactly one of the client's squared targets
    for i in range(N):
        assert np.min(np.abs(y2[offsets[i] : offsets[i + 1]] - one[i])) <= 1e-5 * max(1.0, one[i])
    assert not np.allclose(one, means)


def test_rpow_d_stays_one_phase() -> None:
    sampler = fedsample.make_sampler("power-of-choice")
    assert not sampler.two_phase
    assert fedsample.make_sampler("power-of-choice", variant="pow-d").two_phase
    (result,) = _run([sampler])
    assert result.history.computed_clients is None
    with pytest.raises(FedsampleError, match="'loss_batch' parameter of PowerOfChoiceSampler must be None"):
        fedsample.make_sampler("power-of-choice", loss_batch=4)


def test_pow_d_draws_its_candidates_among_the_available_clients() -> None:
    participation = Participation(availability=BernoulliAvailability(probability=0.4, seed=2))
    sampler = fedsample.make_sampler("power-of-choice", variant="pow-d")
    for rounds in (1, 3):
        (result,) = _run([sampler], participation=participation, rounds=rounds)
        state = result.sampler_state
        assert isinstance(state, LossState)
        available = participation.for_run(1).availability.available(rounds - 1, np.arange(N))
        candidates = np.flatnonzero(state.available)  # the last round's candidates
        assert candidates.size == min(2 * M, int(available.sum()))
        assert np.all(available[candidates])
        assert result.history.unavailable is not None
        np.testing.assert_array_equal(result.history.unavailable, np.zeros(rounds))


def test_a_round_without_available_clients_computes_nothing_and_trains_nobody() -> None:
    nobody = Participation(availability=BernoulliAvailability(probability=np.zeros(N)))
    samplers = [
        fedsample.make_sampler("optimal", mode="protocol", candidates=4),
        fedsample.make_sampler("power-of-choice", variant="pow-d"),
        fedsample.make_sampler("power-of-choice", variant="cpow-d"),
        fedsample.make_sampler("md"),
    ]
    results = _run(samplers, participation=nobody, rounds=2)
    for result in results[:3]:
        assert result.history.computed_clients is not None
        np.testing.assert_array_equal(result.history.computed_clients, [0, 0])
        np.testing.assert_array_equal(result.history.communicated_clients, [0, 0])
    for result in results:
        assert np.all(result.history.weight_sum == 0)
