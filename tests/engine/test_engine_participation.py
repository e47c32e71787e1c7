"""The engine under availability and failures: recorded failures, feedback of the kept clients only,
rejected non-finite updates, resumable runs, and the inverse-probability policy's unbiased update."""

from __future__ import annotations

import copy
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest
from engine_cases import SIZES, RecordingSampler, classification_data, regression_data, spec_for

import fedsample
from fedsample.data import FederatedDataset
from fedsample.engine import (
    RunResult,
    RunSpec,
    SimulationCheckpoint,
    TrainingConfig,
    initial_params,
    load_checkpoint,
    save_checkpoint,
    simulate,
)
from fedsample.errors import FedsampleError
from fedsample.participation.availability import BernoulliAvailability, Dropout, TraceAvailability
from fedsample.participation.procedure import select_participants, settle_participants
from fedsample.participation.setting import Participation
from fedsample.samplers import FullSampler, MDSampler

DROPOUT = np.linspace(0.05, 0.55, len(SIZES))  # 30% on average, different per client


def _config(**options: Any) -> TrainingConfig:
    settings: dict[str, Any] = {"rounds": 6, "num_sampled": 4, "local_steps": 2, "batch_size": 4, "local_lr": 0.1}
    return TrainingConfig(**{**settings, **options})


def test_the_default_setting_records_no_failure_and_changes_nothing() -> None:
    data = classification_data(1)
    runs = [RunSpec(MDSampler(), seed=s) for s in (0, 1)]
    plain = simulate(data, spec_for("softmax", data), runs, _config())
    explicit = simulate(data, spec_for("softmax", data), runs, _config(), participation=Participation())
    for a, b in zip(plain, explicit, strict=True):
        for name in a.params:
            np.testing.assert_array_equal(a.params[name], b.params[name])
        for name in ("unavailable", "dropped", "rejected", "late"):
            assert getattr(a.history, name).tolist() == [0] * 6


def test_failures_are_recorded_and_only_kept_clients_are_fed_back() -> None:
    data = classification_data(2)
    participation = Participation(
        availability=BernoulliAvailability(0.7, seed=4),
        dropout=Dropout(DROPOUT, seed=1),
        over_selection=0.5,
        policy="inverse-probability",
        redraws=0,
    )
    config = _config(rounds=8)
    runs = [RunSpec(RecordingSampler(), seed=s) for s in (3, 8)]
    results = simulate(data, spec_for("softmax", data), runs, config, participation=participation)
    federation = data.federation()
    totals = dict.fromkeys(("unavailable", "dropped", "late"), 0)
    for run, result in zip(runs, results, strict=True):
        history = result.history
        setting = participation.for_run(run.seed)
        assert len(result.sampler_state.feedback) == config.rounds
        for t, feedback in enumerate(result.sampler_state.feedback):
            # The engine's round is the pipeline's: same selection, same fates, same kept set and weights.
            state = RecordingSampler().init(federation, participation.num_asked(config.num_sampled))
            selected = select_participants(
                RecordingSampler(), state, setting, seed=run.seed, round=t, num_clients=len(SIZES)
            )
            finite = np.ones(selected.clients.size, dtype=bool)
            settled = settle_participants(
                selected, finite, setting, seed=run.seed, round=t, num_kept=config.num_sampled, estimator=None
            )
            np.testing.assert_array_equal(feedback.clients, selected.clients[settled.kept])
            assert feedback.updates is not None
            assert feedback.updates.shape[0] == feedback.clients.size
            assert history.weight_sum[t] == pytest.approx(float(settled.weights.sum()))
            for name, count in settled.counts.items():
                assert getattr(history, name)[t] == count, (name, t)
        assert history.rejected.tolist() == [0] * config.rounds
        for name in totals:
            totals[name] += int(getattr(history, name).sum())
    assert all(count > 0 for count in totals.values()), totals


def _poisoned(data: FederatedDataset, client: int) -> FederatedDataset:
    """``data`` with NaN features on ``client`` (set past the dataset's own check, which refuses them)."""
    features = np.array(data.train_features)
    features[data.train_indptr[client] : data.train_indptr[client + 1]] = np.nan
    poisoned = copy.copy(data)
    object.__setattr__(poisoned, "train_features", features)
    return poisoned


def test_non_finite_updates_are_rejected_and_counted() -> None:
    data = _poisoned(classification_data(3), client=6)  # the largest client: MD draws it often
    runs = [RunSpec(RecordingSampler(), seed=s) for s in range(4)]
    config = _config(rounds=5, num_sampled=5)
    results = simulate(data, spec_for("softmax", data), runs, config)
    rejected = 0
    for result in results:
        for name, value in result.params.items():
            assert np.isfinite(value).all(), name
        for t, feedback in enumerate(result.sampler_state.feedback):
            drawn = 6 in feedback.selection.clients
            assert result.history.rejected[t] == int(drawn)
            assert 6 not in feedback.clients
            # renormalise: the kept weights keep the selection's sum
            assert result.history.weight_sum[t] == pytest.approx(1.0 if feedback.clients.size else 0.0)
        rejected += int(result.history.rejected.sum())
    assert rejected > 0


def _simulate_with_failures(**options: Any) -> list[RunResult]:
    data = classification_data(4)
    participation = Participation(
        availability=BernoulliAvailability(0.8),
        dropout=Dropout(0.3),
        over_selection=0.25,
        policy="inverse-probability",
        return_rates="estimated",
    )
    runs = [RunSpec(fedsample.make_sampler(name), seed=seed) for name in ("md", "osmd", "uniform") for seed in (0, 5)]
    return simulate(
        data, spec_for("mlp", data), runs, _config(rounds=7, eval_every=2), participation=participation, **options
    )


def test_resuming_a_run_with_failures_reproduces_it(tmp_path: Path) -> None:
    saved: list[Path] = []

    def keep(checkpoint: SimulationCheckpoint) -> None:
        path = tmp_path / f"round-{checkpoint.rounds_done}.ckpt"
        save_checkpoint(path, checkpoint)
        saved.append(path)

    reference = _simulate_with_failures(checkpoint=keep, checkpoint_every=3)
    assert len(saved) == 2
    assert sum(int(r.history.dropped.sum()) for r in reference) > 0
    for path in saved:
        resumed = _simulate_with_failures(resume=load_checkpoint(path))
        for a, b in zip(reference, resumed, strict=True):
            for name in a.params:
                np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
            one, two = a.history.to_dict(), b.history.to_dict()
            one["rounds"].pop("round_seconds")
            two["rounds"].pop("round_seconds")
            assert one == two


def test_a_trace_with_known_rates_under_inverse_probability_is_refused() -> None:
    data = classification_data(5)
    trace = TraceAvailability(np.arange(len(SIZES)), np.zeros(len(SIZES), dtype=np.int64), np.full(len(SIZES), 3))
    setting = Participation(availability=trace, policy="inverse-probability")
    with pytest.raises(FedsampleError, match="The 'participation' parameter of simulate must be") as caught:
        simulate(data, spec_for("softmax", data), [RunSpec(MDSampler())], _config(), participation=setting)
    assert "\n" not in str(caught.value)


def test_inverse_probability_round_matches_full_participation() -> None:
    """One round from a shared model, many runs: the mean server update under 30% dropout matches the
    full-participation update. Full-batch gradient descent (``B`` above every client's size, one local
    step) makes each client's update a fixed vector, so the only randomness is selection and dropout.
    z-test per parameter, Bonferroni over the parameters at family-wise confidence 99.9%."""
    data = regression_data(6)
    spec = spec_for("linear", data)
    start = initial_params(spec, 0)
    config = TrainingConfig(rounds=1, num_sampled=4, local_steps=1, batch_size=64, local_lr=0.05)
    full = simulate(data, spec, [RunSpec(FullSampler())], config, params=start)[0]
    target = np.concatenate([(full.params[n] - start[n].numpy()).ravel() for n in sorted(start)])
    runs = [RunSpec(MDSampler(), seed=s) for s in range(400)]
    critical = NormalDist().inv_cdf(1 - 0.001 / (2 * target.size))  # 3.76 for the 6 parameters
    largest = {}
    for policy in ("inverse-probability", "renormalise"):
        participation = Participation(dropout=Dropout(DROPOUT), policy=policy)
        results = simulate(data, spec, runs, config, params=start, participation=participation)
        deltas = np.stack(
            [np.concatenate([(r.params[n] - start[n].numpy()).ravel() for n in sorted(start)]) for r in results]
        )
        stderr = deltas.std(axis=0, ddof=1) / np.sqrt(len(runs))
        largest[policy] = float(np.max(np.abs(deltas.mean(axis=0) - target) / stderr))
        assert sum(int(r.history.dropped.sum()) for r in results) > 0.2 * len(runs)
    assert largest["inverse-probability"] < critical, largest  # measured 1.65
    assert largest["renormalise"] > critical, largest  # measured 5.64: renormalise is biased


def test_the_failure_names_agree_across_layers() -> None:
    from fedsample.engine.history import FAILURES
    from fedsample.experiments.results.metrics import FAILURE_COLUMNS
    from fedsample.participation.procedure import FAILURE_COUNTS

    assert FAILURES == FAILURE_COLUMNS == FAILURE_COUNTS
