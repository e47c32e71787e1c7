"""Two-phase rounds (``optimal``, ``optimal-distribution``): every client reports before the draw, the
engine counts computation apart from communication, and records the exact variance of the aggregate
against MD and uniform sampling on the same updates."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from engine_cases import Recorded, RecordingSampler, classification_data, spec_for

import fedsample
from fedsample.engine import RunResult, RunSpec, TrainingConfig, simulate
from fedsample.engine.first_phase import aggregate_variances, design_variance
from fedsample.experiments.results.metrics import FAILURE_COLUMNS, TWO_PHASE_COLUMNS, metrics_table
from fedsample.experiments.results.metrics_files import read_metrics, write_metrics
from fedsample.samplers import Feedback

ROUNDS = 4
M = 3


def _run(samplers: list[fedsample.Sampler[object]], rounds: int = ROUNDS) -> list[RunResult]:
    data = classification_data(5)
    config = TrainingConfig(rounds=rounds, num_sampled=M, local_steps=2, batch_size=4, local_lr=0.1)
    runs = [RunSpec(sampler, seed=1) for sampler in samplers]
    return simulate(data, spec_for("mlp", data), runs, config, init_seed=2)


@dataclass(frozen=True, kw_only=True)
class TwoPhaseRecorder(RecordingSampler):
    """MD sampling declared two-phase: its state collects every feedback it reads."""

    name: ClassVar[str] = "recording-two-phase"
    two_phase: ClassVar[bool] = True


def test_a_two_phase_sampler_reads_every_clients_report_before_each_draw_and_nothing_after() -> None:
    n = len(classification_data(5).train_indptr) - 1
    (result,) = _run([TwoPhaseRecorder()])
    state = result.sampler_state
    assert isinstance(state, Recorded)
    assert [f.round for f in state.feedback] == list(range(ROUNDS))  # one report per round, none after it
    for f in state.feedback:
        assert isinstance(f, Feedback)
        np.testing.assert_array_equal(f.clients, np.arange(n))
        np.testing.assert_array_equal(f.selection.clients, np.arange(n))
        assert f.update_norms is not None
        assert np.all(f.update_norms > 0)
        assert f.gradient_norms is not None
        assert f.gradient_norms.shape == (n,)
    np.testing.assert_array_equal(result.history.computed_clients, np.full(ROUNDS, n))
    np.testing.assert_array_equal(result.history.communicated_clients, result.history.distinct_clients)


def test_optimal_records_computation_communication_and_its_variance_against_md_and_uniform() -> None:
    n = len(classification_data(5).train_indptr) - 1
    optimal, md = _run([fedsample.make_sampler("optimal"), fedsample.make_sampler("md")])
    h = optimal.history
    assert h.computed_clients is not None
    assert h.communicated_clients is not None
    np.testing.assert_array_equal(h.computed_clients, np.full(ROUNDS, n))
    assert np.all(h.communicated_clients <= n)
    assert np.all(h.communicated_clients == h.distinct_clients)
    for name in ("aggregate_variance", "aggregate_variance_md", "aggregate_variance_uniform"):
        values = getattr(h, name)
        assert values is not None, name
        assert np.all(np.isfinite(values)), name
        assert np.all(values >= 0), name
    # After round 0 the q come from the clients' update norms: optimal beats MD with the same budget here.
    assert np.all(h.aggregate_variance[1:] < h.aggregate_variance_md[1:])
    # The other run records none of it, and its metrics rows are -1 / NaN in a table holding both.
    assert md.history.computed_clients is None
    assert md.history.aggregate_variance is None
    assert "computed_clients" not in md.history.to_dict()["rounds"]
    table = metrics_table([optimal.history, md.history])
    rows = table["sampler"] == "md"
    assert np.all(table["computed_clients"][rows] == -1)
    assert np.all(np.isnan(table["aggregate_variance"][rows]))
    assert "computed_clients" not in metrics_table([md.history])
    assert not set(TWO_PHASE_COLUMNS) & set(FAILURE_COLUMNS)


def test_optimal_distribution_draws_from_the_reported_gradient_norms() -> None:
    (result,) = _run([fedsample.make_sampler("optimal-distribution")])
    state = result.sampler_state
    assert state.round == ROUNDS  # one report per round
    assert not np.all(state.norms == 1.0)  # every client's norm replaced the initial 1
    assert result.history.aggregate_variance is not None
    assert np.all(np.isfinite(result.history.aggregate_variance))


def test_closed_forms_match_the_designs_exact_covariance() -> None:
    rng = np.random.default_rng(0)
    sizes = np.array([5, 1, 9, 3, 3, 7])
    federation = fedsample.Federation.from_sizes(sizes)
    p = np.asarray(federation.importances)
    updates = rng.normal(size=(sizes.size, 4))
    md_sampler, uniform_sampler = fedsample.make_sampler("md"), fedsample.make_sampler("uniform")
    md_design = md_sampler.design(md_sampler.init(federation, M))
    uniform_design = uniform_sampler.design(uniform_sampler.init(federation, M))
    md, uniform = aggregate_variances(p, updates, M)
    assert md == pytest.approx(design_variance(md_design, p, updates), rel=1e-12)
    assert uniform == pytest.approx(design_variance(uniform_design, p, updates), rel=1e-12)
    # The uniform design by enumeration of its C(6, 3) equally likely sets.
    aggregates = []
    for subset in itertools.combinations(range(sizes.size), M):
        s = list(subset)
        aggregates.append(((sizes.size / M) * p[s]) @ updates[s])
    a = np.array(aggregates)
    assert uniform == pytest.approx(np.mean(np.sum((a - a.mean(0)) ** 2, axis=1)), rel=1e-12)


def test_optimal_inclusions_minimise_the_variance_among_independent_designs_of_budget_m() -> None:
    rng = np.random.default_rng(1)
    sizes = np.array([4, 2, 8, 1, 6, 3, 5])
    federation = fedsample.Federation.from_sizes(sizes)
    p = np.asarray(federation.importances)
    updates = rng.normal(size=(sizes.size, 3)) * rng.uniform(0.1, 3.0, size=(sizes.size, 1))
    sampler = fedsample.make_sampler("optimal")
    n = sizes.size
    state = sampler.update(
        sampler.init(federation, M),
        Feedback(
            round=0,
            selection=fedsample.Selection(clients=np.arange(n), weights=p),
            clients=np.arange(n),
            update_norms=np.linalg.norm(updates, axis=1),
        ),
    )
    best = design_variance(sampler.design(state), p, updates)
    q = sampler.inclusion(state)
    squared = np.sum(updates**2, axis=1)
    assert best == pytest.approx(float(np.sum((1 - q) / q * p**2 * squared)), rel=1e-12)
    proportional = fedsample.make_sampler("bernoulli")
    assert best < design_variance(proportional.design(proportional.init(federation, M)), p, updates)


def test_the_two_phase_columns_go_through_the_metrics_files(tmp_path: Path) -> None:
    optimal, md = _run([fedsample.make_sampler("optimal"), fedsample.make_sampler("md")], rounds=2)
    table = metrics_table([optimal.history, md.history])
    write_metrics(table, tmp_path)
    back = read_metrics(tmp_path)
    for name in TWO_PHASE_COLUMNS:
        np.testing.assert_array_equal(back[name], table[name], err_msg=name)
