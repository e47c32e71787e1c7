"""Summary rows against hand computations; the CSV, Markdown and LaTeX files."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from fedsample.engine.history import History
from fedsample.errors import FedsampleError
from fedsample.experiments.config.sections import REPORT
from fedsample.experiments.results.metrics import metrics_table
from fedsample.experiments.results.summary import SummaryRow, summarize, summary_latex, summary_markdown, write_summary

EVAL_ROUNDS = np.array([0, 2, 4])
# label "a", seeds 0..2: training loss and test accuracy at rounds 0, 2, 4
LOSS = {0: [2.0, 1.0, 0.5], 1: [2.0, 1.2, 0.7], 2: [2.0, 0.8, 0.9]}
ACCURACY = {0: [0.1, 0.5, 0.8], 1: [0.1, 0.6, 0.7], 2: [0.1, 0.65, 0.6]}
DISTINCT = {0: [5, 4, 5, 2], 1: [5, 5, 5, 5], 2: [3, 3, 3, 3]}


def _history(label: str, seed: int, *, regression: bool = False) -> History:
    return History(
        label=label,
        sampler="md",
        seed=seed,
        eval_rounds=EVAL_ROUNDS,
        train_loss=np.array(LOSS[seed]),
        test_loss=np.array(LOSS[seed]) + 0.1,
        test_accuracy=np.full(3, np.nan) if regression else np.array(ACCURACY[seed]),
        distinct_clients=np.array(DISTINCT[seed]),
        distinct_labels=np.full(4, -1) if regression else np.array([9, 9, 8, 7]),
        weight_sum=np.array([1.0, 0.5, 1.5, 1.0]) * (seed + 1),
        round_seconds=np.array([0.1, 0.2, 0.3, 0.4]),
        local_lr=np.full(4, 0.1),
    )


def _table() -> dict[str, np.ndarray]:
    return metrics_table([*(_history("a", seed) for seed in range(3)), _history("b", 1)])


def test_final_and_best_over_seeds() -> None:
    a, b = summarize(_table())
    assert (a.label, a.sampler, a.num_seeds, a.num_rounds) == ("a", "md", 3, 4)
    assert a.final_train_loss_mean == pytest.approx(0.7)
    assert a.final_train_loss_std == pytest.approx(0.2)
    assert a.best_train_loss_mean == pytest.approx((0.5 + 0.7 + 0.8) / 3)
    assert a.best_train_loss_std == pytest.approx(np.std([0.5, 0.7, 0.8], ddof=1))
    assert a.final_test_accuracy_mean == pytest.approx(0.7)
    assert a.final_test_accuracy_std == pytest.approx(0.1)
    assert a.best_test_accuracy_mean == pytest.approx((0.8 + 0.7 + 0.65) / 3)
    assert a.best_test_accuracy_std == pytest.approx(np.std([0.8, 0.7, 0.65], ddof=1))
    # per-round means over rounds 1..4 of each seed, then over seeds
    assert a.distinct_clients_mean == pytest.approx((4.0 + 5.0 + 3.0) / 3)
    assert a.weight_sum_mean == pytest.approx((1.0 + 2.0 + 3.0) / 3)
    assert a.round_seconds_mean == pytest.approx(0.25)
    # one seed: the sample standard deviation is undefined
    assert b.num_seeds == 1
    assert b.final_train_loss_mean == 0.7
    assert math.isnan(b.final_train_loss_std)
    assert math.isnan(b.best_test_accuracy_std)


@pytest.mark.parametrize(
    ("target", "rounds", "reached"),
    [
        (0.65, (4 + 4 + 2) / 3, 3),  # reaching the target exactly counts (>=)
        (0.75, 4.0, 1),
        (0.95, math.nan, 0),
        (0.0, 0.0, 3),  # the initial model already reaches it
    ],
)
def test_rounds_to_target_accuracy(target: float, rounds: float, reached: int) -> None:
    a = summarize(_table(), target_accuracy=target)[0]
    assert a.target_accuracy == target
    assert a.seeds_reached_target_accuracy == reached
    assert a.rounds_to_target_accuracy == pytest.approx(rounds, nan_ok=True)


def test_rounds_to_target_loss() -> None:
    a, b = summarize(_table(), target_loss=0.75)
    assert (a.rounds_to_target_loss, a.seeds_reached_target_loss) == (4.0, 2)  # seed 2 never goes below 0.8
    assert (b.rounds_to_target_loss, b.seeds_reached_target_loss) == (4.0, 1)
    assert a.target_accuracy is None
    assert math.isnan(a.rounds_to_target_accuracy)
    assert a.seeds_reached_target_accuracy == 0


def test_regression_has_nan_accuracy() -> None:
    (row,) = summarize(metrics_table([_history("r", seed, regression=True) for seed in range(2)]), target_accuracy=0.5)
    assert math.isnan(row.final_test_accuracy_mean)
    assert math.isnan(row.best_test_accuracy_mean)
    assert (row.seeds_reached_target_accuracy, math.isnan(row.rounds_to_target_accuracy)) == (0, True)
    assert row.final_train_loss_mean == pytest.approx(0.6)


def test_rows_follow_first_appearance_and_are_frozen() -> None:
    rows = summarize(metrics_table([_history("z", 0), _history("a", 0), _history("z", 1)]))
    assert [row.label for row in rows] == ["z", "a"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows[0].label = "y"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("target_accuracy", 1.5), ("target_accuracy", math.nan), ("target_accuracy", True), ("target_loss", math.inf)],
)
def test_bad_targets_are_rejected(keyword: str, value: float) -> None:
    with pytest.raises(FedsampleError, match=f"The '{keyword}' parameter of summarize") as info:
        summarize(_table(), **{keyword: value})
    # Structured, with the [report] table's constraint, so a config reader re-keys it without parsing text.
    assert (info.value.parameter, info.value.owner) == (keyword, "summarize")
    assert info.value.constraint is REPORT.constraints[keyword]


def test_csv_holds_every_field_exactly(tmp_path: Path) -> None:
    rows = summarize(_table(), target_accuracy=0.75)
    names = ["summary.csv", "summary.md", "summary.tex"]
    assert write_summary(rows, tmp_path) == [tmp_path / name for name in names]
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no temporary left
    with (tmp_path / "summary.csv").open(newline="") as handle:
        records = list(csv.DictReader(handle))
    fields = {field.name: field for field in dataclasses.fields(SummaryRow)}
    # The simulated clock's fields are written only for a run with a clock (docs/system.md).
    clock = ("time_to_target_accuracy", "time_to_target_loss", "simulated_seconds_final")
    assert list(records[0]) == [name for name in fields if name not in clock]
    for row, record in zip(rows, records, strict=True):
        for name, text in record.items():
            value = getattr(row, name)
            if value is None:
                assert text == ""
            elif isinstance(value, float):
                assert float(text) == pytest.approx(value, rel=0, abs=0, nan_ok=True)
            else:
                assert text == str(value)


def test_markdown_table_is_readable(tmp_path: Path) -> None:
    rows = summarize(_table(), target_accuracy=0.75, target_loss=0.75)
    write_summary(rows, tmp_path)
    text = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert text == summary_markdown(rows) + "\n"
    header, rule, first, second = text.splitlines()
    assert "final test accuracy" in header
    assert "rounds to accuracy ≥ 0.75" in header
    assert "rounds to train loss ≤ 0.75" in header
    assert rule.count("|") == header.count("|")
    assert "| a | md | 3 | 4 | 0.70 ± 0.20 | 0.67 ± 0.15 | 0.70 ± 0.10 |" in first  # sd to 2 digits, mean alike
    assert first.endswith("| 4 (1/3) | 4 (2/3) | 4 | 2 | 0 (unbiased) |")  # no wall time: shared by a and b
    assert "| b | md | 1 | 4 | 0.7 | 0.7 | 0.7 |" in second  # no ± for one seed
    assert "seconds" not in header
    assert (tmp_path / "summary.tex").read_text(encoding="utf-8") == summary_latex(rows) + "\n"


def test_markdown_leaves_out_accuracy_for_regression_and_targets_not_asked() -> None:
    rows = summarize(metrics_table([_history("r|1", seed, regression=True) for seed in range(2)]))
    header, _, row = summary_markdown(rows).splitlines()
    assert "accuracy" not in header
    assert "rounds to" not in header
    assert row.startswith("| r\\|1 | md | 2 |")  # a pipe in a label does not break the table
