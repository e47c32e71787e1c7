"""The one per-round metrics schema: the loop's record, the checkpoint, the History and the metrics files read it."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsample.engine.history import ROUND_METRICS, History, RoundRecord, round_metric
from fedsample.experiments.results import metrics
from fedsample.participation.procedure import FAILURE_COUNTS


def test_every_schema_entry_is_a_history_field_and_a_metrics_column() -> None:
    fields = {f.name: f for f in dataclasses.fields(History)}
    for metric in ROUND_METRICS:
        assert metric.name in fields, metric.name
        assert (fields[metric.name].default is None) == metric.optional, metric.name
    columns = (*metrics.COLUMNS, *metrics.FAILURE_COLUMNS, *metrics.TWO_PHASE_COLUMNS, *metrics.SYSTEM_COLUMNS)
    assert [c for c in columns if c in {m.name for m in ROUND_METRICS}] == [m.name for m in ROUND_METRICS]
    assert metrics.FAILURE_COLUMNS == FAILURE_COUNTS


def test_the_schema_is_declared_once_on_the_history_fields() -> None:
    # Each metric's type, shape and initial value ride in its History field's metadata, so a new
    # per-round metric is one field declaration; ROUND_METRICS follows the fields, in their order.
    declared = [f for f in dataclasses.fields(History) if f.metadata]
    assert [m.name for m in ROUND_METRICS] == [f.name for f in declared]
    for metric, f in zip(ROUND_METRICS, declared, strict=True):
        assert metric.optional == (f.default is None), metric.name
    spec = {f.name: f.metadata for f in declared}
    assert spec["weight_sum"] == round_metric(integer=False)
    assert spec["rejected"] == round_metric(integer=True)
    assert spec["distinct_labels"] == round_metric(integer=True, initial=-1)
    assert spec["simulated_seconds"] == round_metric(integer=False, system=True)


def test_the_record_allocates_snapshots_and_restores_every_metric() -> None:
    record = RoundRecord(num_runs=2, rounds=3)
    for metric in ROUND_METRICS:
        values = record[metric.name]
        assert values.shape == ((2, 3) if metric.per_run else (3,)), metric.name
        assert values.dtype == metric.dtype, metric.name
        np.testing.assert_array_equal(values, np.full(values.shape, metric.initial), err_msg=metric.name)
    record["weight_sum"][1, 2] = 0.5
    record["rejected"][0, 1] = 4
    record["local_lr"][0] = 0.1
    saved = record.snapshot()
    record["weight_sum"][1, 2] = 9.0  # a snapshot is a copy
    assert saved["weight_sum"][1, 2] == 0.5
    older = {name: values for name, values in saved.items() if name not in FAILURE_COUNTS}
    fresh = RoundRecord(num_runs=2, rounds=3)
    fresh.restore(older)  # a checkpoint without failure counts keeps them at their initial value
    assert fresh["weight_sum"][1, 2] == 0.5
    assert fresh["rejected"][0, 1] == 0
    fresh.restore(saved)
    run = fresh.of_run(0)
    assert run["rejected"].tolist() == [0, 4, 0]
    assert run["local_lr"].tolist() == [0.1, 0.0, 0.0]
    assert set(run) == {m.name for m in ROUND_METRICS if not m.two_phase and not m.system}  # one phase, no clock
    assert set(fresh.of_run(0, two_phase=True, system=True)) == {m.name for m in ROUND_METRICS}
    assert set(fresh.of_run(0, system=True)) == {m.name for m in ROUND_METRICS if not m.two_phase}


def test_history_exports_every_recorded_metric() -> None:
    record = RoundRecord(num_runs=1, rounds=2)
    record["distinct_clients"][0] = [3, 4]
    history = History(
        label="a",
        sampler="md",
        seed=0,
        eval_rounds=np.array([0, 2]),
        train_loss=np.ones(2),
        test_loss=np.ones(2),
        test_accuracy=np.ones(2),
        **record.of_run(0, two_phase=True, system=True),
    )
    rounds = history.to_dict()["rounds"]
    assert list(rounds) == [m.name for m in ROUND_METRICS]
    assert rounds["aggregate_variance"] == [None, None]  # NaN until recorded
    assert rounds["distinct_clients"] == [3, 4]
    assert rounds["distinct_labels"] == [-1, -1]
    table = metrics.metrics_table([history])
    assert table["distinct_clients"].tolist() == [-1, 3, 4]
    assert table["rejected"].tolist() == [-1, 0, 0]
    assert table["computed_clients"].tolist() == [-1, 0, 0]
    assert table["missed_deadline"].tolist() == [-1, 0, 0]
