"""simulate's ``on_round``: after every round (and for the initial model) each run's whole metrics record,
the row its history gives that round in the metrics table, field for field."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, spec_for
from torch import nn

import fedsample
from fedsample.engine import Model, RoundReport, RunResult, RunSpec, TrainingConfig, simulate, simulate_centralized
from fedsample.engine.history import ROUND_METRICS, RoundRecord
from fedsample.errors import FedsampleError
from fedsample.experiments.results.metrics import metrics_table
from fedsample.participation.availability import BernoulliAvailability, Dropout
from fedsample.participation.setting import Participation
from fedsample.participation.system import SystemModel

ROUNDS = 5


def _config(**changes: Any) -> TrainingConfig:
    settings: dict[str, Any] = {
        "rounds": ROUNDS,
        "num_sampled": 3,
        "local_steps": 2,
        "batch_size": 4,
        "local_lr": 0.1,
        "eval_every": 2,
    }
    return TrainingConfig(**{**settings, **changes})


def _runs() -> list[RunSpec]:
    return [
        RunSpec(fedsample.make_sampler("md"), seed=1),
        RunSpec(fedsample.make_sampler("uniform"), seed=2, label="plain uniform"),
        RunSpec(fedsample.make_sampler("optimal"), seed=3),
    ]


def _top2(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    best = outputs.topk(2, dim=1).indices
    return (best == targets[:, None]).any(dim=1).float()


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _check_rows_match_the_table(
    reports: list[RoundReport], results: list[RunResult], *, timed_apart: bool = False
) -> None:
    """Every report row equals the metrics table's row of its run and round, and holds every column of the
    run's own table (the run's whole record); ``timed_apart``: the reports come from another simulation of
    the same runs, whose wall times differ."""
    for result in results:
        own = metrics_table([result.history])
        rows = [row for report in reports for row in report.rows if row["label"] == result.history.label]
        assert [row["round"] for row in rows] == own["round"].tolist()
        for index, row in enumerate(rows):
            assert list(row) == list(own), "the row's fields are the table's columns, in order"
            for column, values in own.items():
                expected = values[index].item() if isinstance(values[index], np.generic) else values[index]
                if timed_apart and column == "round_seconds":
                    continue
                assert _same(row[column], expected), (result.history.label, row["round"], column)
                assert type(row[column]) is type(expected), column  # plain Python numbers


def test_every_rounds_report_is_the_runs_metrics_table_row() -> None:
    data = classification_data(5)
    model = Model(lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4)), metrics={"top2": _top2})
    participation = Participation(
        availability=BernoulliAvailability(0.8, seed=4), dropout=Dropout(0.2, seed=1), over_selection=0.5
    )
    reports: list[RoundReport] = []
    results = simulate(
        data, model, _runs(), _config(), init_seed=2, participation=participation, on_round=reports.append
    )
    assert [r.round for r in reports] == list(range(ROUNDS + 1))
    assert [r.evaluated for r in reports] == [True, False, True, False, True, True]  # eval_every 2, and the last
    assert all(r.total == ROUNDS for r in reports)
    _check_rows_match_the_table(reports, results)
    optimal = reports[1].rows[2]
    assert "aggregate_variance" in optimal
    assert "aggregate_variance" not in reports[1].rows[0]
    assert "test_top2" in optimal
    assert "unavailable" in optimal
    assert math.isnan(reports[1].rows[0]["train_loss"])
    assert not math.isnan(reports[2].rows[0]["train_loss"])


def test_a_system_model_adds_its_clock_to_every_row() -> None:
    data = classification_data(6)
    reports: list[RoundReport] = []
    participation = Participation(system=SystemModel(compute=0.05, deadline=0.5), over_selection=0.5)
    results = simulate(
        data, spec_for("softmax", data), _runs()[:2], _config(), participation=participation, on_round=reports.append
    )
    _check_rows_match_the_table(reports, results)
    assert reports[-1].rows[0]["simulated_seconds"] > 0


def test_runs_one_after_another_report_the_same_rows() -> None:
    data = classification_data(5)
    batched: list[RoundReport] = []
    one_by_one: list[RoundReport] = []
    simulate(data, spec_for("softmax", data), _runs(), _config(), on_round=batched.append)
    results = simulate(
        data, spec_for("softmax", data), _runs(), _config(), batch_runs=False, on_round=one_by_one.append
    )
    assert len(one_by_one) == 3 * (ROUNDS + 1)  # each run's rounds, one run after another
    _check_rows_match_the_table(one_by_one, results)
    rows = sorted((row for r in one_by_one for row in r.rows), key=lambda row: (row["round"], row["seed"]))
    assert [row["seed"] for row in rows][:3] == [1, 2, 3]
    assert sum(len(r.rows) for r in batched) == len(rows)


def test_a_resumed_simulation_reports_the_rounds_it_runs_and_they_complete_the_record() -> None:
    data = classification_data(5)
    saved: list[Any] = []
    before: list[RoundReport] = []
    model = spec_for("softmax", data)
    full = simulate(
        data, model, _runs(), _config(), checkpoint=saved.append, checkpoint_every=2, on_round=before.append
    )
    after: list[RoundReport] = []
    simulate(data, model, _runs(), _config(), resume=saved[0], on_round=after.append)
    assert [r.round for r in after] == [3, 4, 5]
    _check_rows_match_the_table([*before[:3], *after], full, timed_apart=True)


def test_the_centralized_baseline_reports_under_its_own_name() -> None:
    data = classification_data(5)
    reports: list[RoundReport] = []
    result = simulate_centralized(
        data, spec_for("softmax", data), _config(), samples_per_round=8, on_round=reports.append
    )
    assert {row["sampler"] for r in reports for row in r.rows} == {"centralized"}
    _check_rows_match_the_table(reports, [result])


def test_an_exception_in_the_callback_ends_the_simulation() -> None:
    data = classification_data(5)

    def stop(report: RoundReport) -> None:
        if report.round == 2:
            raise RuntimeError("tracker down")

    with pytest.raises(RuntimeError, match="tracker down"):
        simulate(data, spec_for("softmax", data), _runs()[:1], _config(), on_round=stop)


def test_a_callback_that_is_not_callable_is_refused_in_one_line() -> None:
    data = classification_data(5)
    with pytest.raises(FedsampleError, match="'on_round' parameter of simulate must be a callable or None"):
        simulate(data, spec_for("softmax", data), _runs()[:1], _config(), on_round="tensorboard")  # type: ignore[arg-type]


def test_the_record_gives_one_rounds_values_with_the_files_missing_marks_at_round_zero() -> None:
    record = RoundRecord(num_runs=2, rounds=3)
    record["weight_sum"][1, 2] = 0.5
    record["local_lr"][2] = 0.1
    record["dropped"][1, 2] = 4
    at = record.at(1, 3, two_phase=True, system=True)
    assert list(at) == [m.name for m in sorted(ROUND_METRICS, key=lambda m: (m.optional, m.two_phase, m.system))]
    assert (at["weight_sum"], at["local_lr"], at["dropped"]) == (0.5, 0.1, 4)
    initial = record.at(0, 0)
    assert initial["dropped"] == -1
    assert math.isnan(initial["weight_sum"])
    assert "simulated_seconds" not in initial
    assert "aggregate_variance" not in initial


def test_a_user_module_reports_like_a_spec() -> None:
    data = classification_data(5)
    reports: list[RoundReport] = []
    results = simulate(data, nn.Linear(6, 4), _runs()[:1], _config(rounds=2), on_round=reports.append)
    _check_rows_match_the_table(reports, results)
