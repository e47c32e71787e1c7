"""The metrics table: layout of rows and columns, exact Parquet and CSV round trips, one-line errors
for bad files, atomic writes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fedsample.engine.history import ROUND_METRICS, History
from fedsample.errors import FedsampleError
from fedsample.experiments.results import metrics
from fedsample.experiments.results.metrics import (
    COLUMNS,
    column_range,
    label_series,
    metrics_table,
    read_metrics,
    write_metrics,
)

ROUNDS = 4
EVAL_ROUNDS = np.array([0, 2, 4])
# Floats whose shortest repr matters: an inexact sum, a long fraction, a subnormal-adjacent value, -0.0.
AWKWARD = np.array([0.1 + 0.2, 1 / 3, 1e-300])


def _history(label: str, sampler: str, seed: int, *, regression: bool = False) -> History:
    evals, shift = EVAL_ROUNDS.size, 0.01 * seed
    return History(
        label=label,
        sampler=sampler,
        seed=seed,
        eval_rounds=EVAL_ROUNDS,
        train_loss=AWKWARD + shift,
        test_loss=np.linspace(2.0, 1.0, evals) + shift,
        test_accuracy=np.full(evals, np.nan) if regression else np.array([0.1, 0.5, 0.7]) + shift,
        distinct_clients=np.array([5, 4, 5, 3]) + seed,
        distinct_labels=np.full(ROUNDS, -1) if regression else np.array([7, 6, 8, 5]),
        weight_sum=np.array([1.0, 0.9, -0.0, 1.1]),
        round_seconds=np.full(ROUNDS, 0.25),
        local_lr=0.1 * 0.99 ** np.arange(ROUNDS),
    )


def _histories() -> list[History]:
    return [
        _history(label, sampler, seed)
        for label, sampler in (("md", "md"), ("poisson-2", "poisson"))
        for seed in (0, 1, 2)
    ]


def _assert_identical(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want) == list(COLUMNS)
    for name in COLUMNS:
        assert got[name].dtype == want[name].dtype, name
        if got[name].dtype == np.float64:  # bit for bit: NaN, -0.0 and the last digit included
            np.testing.assert_array_equal(got[name].view(np.uint64), want[name].view(np.uint64), err_msg=name)
        else:
            assert got[name].tolist() == want[name].tolist(), name


def test_table_has_one_row_per_label_seed_and_round() -> None:
    table = metrics_table(_histories())
    assert list(table) == list(COLUMNS)
    assert all(column.shape == (2 * 3 * (ROUNDS + 1),) for column in table.values())
    assert table["label"].dtype == object
    assert table["seed"].dtype == table["round"].dtype == table["distinct_clients"].dtype == np.int64
    assert table["train_loss"].dtype == table["round_seconds"].dtype == np.float64
    assert table["round"][:5].tolist() == [0, 1, 2, 3, 4]
    assert table["label"].tolist()[:5] == ["md"] * 5
    assert table["label"].tolist()[15] == "poisson-2"
    assert table["sampler"].tolist()[15] == "poisson"
    assert table["seed"].tolist()[5:10] == [1] * 5


def test_table_places_evaluations_and_round_metrics() -> None:
    table = metrics_table([_history("md", "md", 1)])
    np.testing.assert_array_equal(table["train_loss"][EVAL_ROUNDS], AWKWARD + 0.01)
    assert np.isnan(table["train_loss"][[1, 3]]).all()
    assert np.isnan(table["test_accuracy"][[1, 3]]).all()
    # round 0 is the initial model: no selection yet
    assert table["distinct_clients"].tolist() == [-1, 6, 5, 6, 4]
    assert table["distinct_labels"].tolist() == [-1, 7, 6, 8, 5]
    assert np.isnan([table[name][0] for name in ("weight_sum", "round_seconds", "local_lr")]).all()
    assert table["weight_sum"][1:].tolist() == [1.0, 0.9, -0.0, 1.1]


def test_regression_table_has_nan_accuracy_and_no_labels() -> None:
    table = metrics_table([_history("md", "md", 0, regression=True)])
    assert np.isnan(table["test_accuracy"]).all()
    assert (table["distinct_labels"] == -1).all()


def test_label_series_is_a_seeds_by_rounds_matrix() -> None:
    series = label_series(metrics_table(_histories()), "poisson-2", "distinct_clients")
    assert series.seeds.tolist() == [0, 1, 2]
    assert series.rounds.tolist() == [0, 1, 2, 3, 4]
    assert np.isnan(series.values[:, 0]).all()  # the -1 marker of round 0 reads as missing
    assert series.values[2, 1:].tolist() == [7, 6, 7, 5]


@pytest.mark.parametrize(
    ("histories", "match"),
    [
        ([], "at least one History"),
        ([_history("md", "md", 0), _history("md", "md", 0)], r"one row per \(label, seed, round\)"),
        ([_history("md", "md", 0), _history("md", "poisson", 1)], "one sampler per label"),
    ],
)
def test_table_rejects_bad_histories(histories: list[History], match: str) -> None:
    with pytest.raises(FedsampleError, match=match):
        metrics_table(histories)


def test_table_rejects_evaluations_beyond_the_last_round() -> None:
    bad = dataclasses.replace(_history("md", "md", 0), eval_rounds=np.array([0, 2, 5]))
    with pytest.raises(FedsampleError, match=r"evaluation rounds in \[0, 4\]"):
        metrics_table([bad])


def test_parquet_and_csv_round_trip_exactly(tmp_path: Path) -> None:
    histories = [*_histories(), _history('regression, "quoted"', "md", 0, regression=True)]
    table = metrics_table(histories)
    written = write_metrics(table, tmp_path)
    assert [p.name for p in written] == ["metrics.parquet", "metrics.csv"]
    _assert_identical(read_metrics(tmp_path), table)  # from Parquet
    (tmp_path / "metrics.parquet").unlink()
    _assert_identical(read_metrics(tmp_path), table)  # from CSV
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]


def test_without_pyarrow_only_csv_is_written_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = metrics_table([_history("old", "md", 0)])
    write_metrics(old, tmp_path / "stale")
    write_metrics(old, tmp_path / "parquet-only")
    (tmp_path / "parquet-only" / "metrics.csv").unlink()
    table = metrics_table(_histories())
    monkeypatch.setattr(metrics, "_has_pyarrow", lambda: False)
    assert write_metrics(table, tmp_path / "stale") == [tmp_path / "stale" / "metrics.csv"]
    assert sorted(p.name for p in (tmp_path / "stale").iterdir()) == ["metrics.csv"]  # the old Parquet file is gone
    _assert_identical(read_metrics(tmp_path / "stale"), table)
    with pytest.raises(FedsampleError, match=r"has no metrics\.parquet or metrics\.csv"):
        read_metrics(tmp_path / "parquet-only")  # unreadable without pyarrow


def _written(tmp_path: Path) -> Path:
    write_metrics(metrics_table(_histories()), tmp_path)
    (tmp_path / "metrics.parquet").unlink()
    return tmp_path / "metrics.csv"


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda text: text.replace("seed,", "seeds,", 1), "must have the column 'seed'"),
        (
            lambda text: text.replace("\nmd,md,0,1,", "\nmd,md,zero,1,", 1),
            "an int in the column 'seed'. Got 'zero' on line 3",
        ),
        (lambda text: text.replace(",0.25\n", ",fast\n", 1), "a float in the column 'round_seconds'. Got 'fast'"),
        (lambda text: text.replace(",0.25\n", "\n", 1), "12 fields per line. Got 11 on line 3"),
        (lambda text: text.split("\n", 1)[0] + "\n", "at least one row"),
        (lambda text: "", "must start with a header line"),
        (lambda text: text + text.split("\n", 2)[1] + "\n", r"one row per \(label, seed, round\)"),
    ],
)
def test_malformed_csv_is_one_line_naming_the_file(tmp_path: Path, edit: Callable[[str], str], match: str) -> None:
    path = _written(tmp_path)
    path.write_text(edit(path.read_text()))
    with pytest.raises(FedsampleError, match=match) as caught:
        read_metrics(tmp_path)
    assert "\n" not in str(caught.value)
    assert str(path) in str(caught.value)


def test_malformed_parquet_is_an_error_naming_the_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_metrics(metrics_table(_histories()), tmp_path)
    path = tmp_path / "metrics.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(FedsampleError, match="could not be read as Parquet") as caught:
        read_metrics(tmp_path)
    assert str(path) in str(caught.value)
    pq.write_table(pa.table({"label": ["md"], "seed": [0]}), path)
    with pytest.raises(FedsampleError, match="must have the column 'sampler'"):
        read_metrics(tmp_path)
    table = {name: values.tolist() for name, values in metrics_table(_histories()).items()}
    pq.write_table(pa.table({**table, "seed": [str(s) for s in table["seed"]]}), path)
    with pytest.raises(FedsampleError, match="column 'seed' with the wrong type string"):
        read_metrics(tmp_path)


def test_missing_run_directory_or_metrics(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError, match="does not exist"):
        read_metrics(tmp_path / "absent")
    with pytest.raises(FedsampleError, match=r"has no metrics\.parquet or metrics\.csv"):
        read_metrics(tmp_path)


def test_a_failed_write_keeps_the_previous_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    write_metrics(metrics_table([_history("md", "md", 0)]), tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def crash_mid_write(table: object, where: Path) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(pq, "write_table", crash_mid_write)
        with pytest.raises(FedsampleError, match="disk full"):  # one line naming the file
            write_metrics(metrics_table(_histories()), tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # and no temporary file

    def broken_csv(table: object) -> str:
        raise RuntimeError("formatting failed")

    monkeypatch.setattr(metrics, "_to_csv", broken_csv)
    with pytest.raises(RuntimeError, match="formatting failed"):
        write_metrics(metrics_table(_histories()), tmp_path)
    assert (tmp_path / "metrics.csv").read_bytes() == before["metrics.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv", "metrics.parquet"]


def test_check_rejects_bad_in_memory_tables() -> None:
    table = dict(metrics_table(_histories()))
    with pytest.raises(FedsampleError, match="must have the column 'round'"):
        metrics.check_metrics_table({k: v for k, v in table.items() if k != "round"})
    with pytest.raises(FedsampleError, match="integers in the column 'seed'"):
        metrics.check_metrics_table({**table, "seed": table["seed"].astype(float)})
    with pytest.raises(FedsampleError, match="columns of one length"):
        metrics.check_metrics_table({**table, "round": table["round"][:-1]})
    with pytest.raises(FedsampleError, match="strings in the column 'label'"):
        metrics.check_metrics_table({**table, "label": np.arange(table["label"].size)})


def test_extra_metrics_are_float_columns_that_round_trip(tmp_path: Path) -> None:
    """A model's extra metrics become test_<name> columns (NaN off the evaluation rounds and in the runs
    without them), written and read back exactly through Parquet and CSV."""
    with_metric = dataclasses.replace(_history("a", "md", 0), test_metrics={"top2": np.array([0.3, 0.6, 0.9])})
    without = _history("b", "md", 1)
    table = metrics_table([with_metric, without])
    assert list(table)[-1] == "test_top2"
    column = table["test_top2"]
    np.testing.assert_array_equal(column[: ROUNDS + 1], [0.3, np.nan, 0.6, np.nan, 0.9])
    assert np.isnan(column[ROUNDS + 1 :]).all()
    write_metrics(table, tmp_path)
    for reader in (metrics._read_parquet, metrics._read_csv):
        name = metrics.PARQUET_NAME if reader is metrics._read_parquet else metrics.CSV_NAME
        back = reader(tmp_path / name)
        np.testing.assert_array_equal(back["test_top2"], column)
    assert "test_top2" in (tmp_path / metrics.CSV_NAME).read_text().splitlines()[0]


def test_every_column_declares_the_range_it_can_take() -> None:
    """Read by the figures to keep bands inside it: accuracy in [0, 1], losses and counts at least 0."""
    assert column_range("test_accuracy") == (0.0, 1.0)
    assert column_range("train_loss") == (0.0, math.inf)
    assert column_range("test_loss") == (0.0, math.inf)
    for metric in ROUND_METRICS:
        low, high = column_range(metric.name)
        assert low < high
        if metric.integer:  # every integer metric is a count
            assert low == 0.0
    assert column_range("test_f1") == (-math.inf, math.inf)  # a model's extra metric: not known here
