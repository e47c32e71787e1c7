"""The summary's tables: one number format, the same names and cells on the console, in Markdown and in
LaTeX; cost columns that measure a sampler; a bias column for every registered sampler."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from fedsample.engine.history import History
from fedsample.experiments.results.metrics import metrics_table
from fedsample.experiments.results.summary import SummaryRow, summarize
from fedsample.experiments.results.tables import (
    format_mean_sd,
    format_number,
    latex_text,
    summary_columns,
    summary_console,
    summary_latex,
    summary_markdown,
    summary_notes,
)

NAN = math.nan


@pytest.mark.parametrize(
    ("mean", "sd", "text"),
    [
        (0.6025, 0.0181, "0.603 ± 0.018"),  # the pair: one precision for both
        (0.6409, 0.03849, "0.641 ± 0.038"),
        (0.7922, 0.00509, "0.7922 ± 0.0051"),
        (0.7, 0.2, "0.70 ± 0.20"),
        (43.33, 2.517, "43.3 ± 2.5"),
        (1234.5, 123.4, "1230 ± 120"),  # sd to 2 digits is 120: the mean to the tens
        (0.5, 0.0996, "0.50 ± 0.10"),  # 0.0996 rounds up to 0.10: one place fewer
        (-0.0001, 0.018, "0.000 ± 0.018"),  # no "-0.000"
        (0.7, NAN, "0.7"),  # one seed: no deviation
        (0.7, 0.0, "0.7 ± 0"),
        (NAN, NAN, "n/a"),
        (math.inf, NAN, "inf"),
        (2.5, math.inf, "2.5 ± inf"),
        (1.5e-7, 2.3e-8, "1.50e-07 ± 2.3e-08"),  # more than six places: scientific, the same rule
        (3.2e7, 4.1e5, "3.200e+07 ± 4.1e+05"),  # the mean's last digit is the sd's: 10^4
        (0.123456, 1.2e-9, "0.123456 ± 1.2e-09"),  # a spread below the mean's sixth digit: the mean to six
    ],
)
def test_mean_and_sd_share_the_sd_s_two_significant_digits(mean: float, sd: float, text: str) -> None:
    assert format_mean_sd(mean, sd) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (5.7167, "5.72"),
        (6.0, "6"),
        (1.0, "1"),
        (0.04863, "0.0486"),
        (43.333, "43.3"),
        (123456.0, "123456"),
        (1.234e-5, "1.23e-05"),
        (2.5e7, "2.50e+07"),
        (0.0, "0"),
        (-0.5, "-0.5"),
        (NAN, "n/a"),
        (None, "n/a"),
        (-math.inf, "-inf"),
    ],
)
def test_a_number_alone_has_three_significant_digits(value: float | None, text: str) -> None:
    assert format_number(value) == text


def _history(label: str, sampler: str, seed: int, seconds: float = 0.05) -> History:
    eval_rounds = np.array([0, 2, 4])
    loss = np.array([2.0, 1.0, 0.6]) + 0.0181 * seed
    return History(
        label=label,
        sampler=sampler,
        seed=seed,
        eval_rounds=eval_rounds,
        train_loss=loss,
        test_loss=loss + 0.1,
        test_accuracy=np.array([0.1, 0.5, 0.6 + 0.03849 * seed]),
        distinct_clients=np.array([6, 5, 6, 6]),
        distinct_labels=np.array([8, 9, 10, 10]),
        weight_sum=np.ones(4),
        round_seconds=np.full(4, seconds),
        local_lr=np.full(4, 0.1),
    )


SAMPLERS = {"md": "md", "oort_1%": "oort", "centralized": "centralized"}


def _rows(*, seconds: dict[str, float] | None = None) -> list[SummaryRow]:
    times = seconds or {}
    histories = [
        _history(label, sampler, seed, times.get(label, 0.05))
        for label, sampler in SAMPLERS.items()
        for seed in range(3)
    ]
    return summarize(metrics_table(histories), target_accuracy=0.55)


def _cells(markdown_line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", markdown_line)[1:-1]]


def test_console_and_markdown_share_names_and_cells() -> None:
    rows = _rows()
    header, _, *lines = summary_markdown(rows).splitlines()
    titles = _cells(header)
    assert "final train loss" in titles
    assert not any("objective" in title for title in titles)
    console = summary_console(rows).splitlines()
    assert console[0].split() == ["label", "final", "train", "loss", "final", "test", "accuracy", "bias"]
    for row, line, text in zip(rows, lines, console[1:], strict=True):
        cells = dict(zip(titles, _cells(line), strict=True))
        for title in ("final train loss", "final test accuracy", "bias"):
            assert cells[title] in text  # the very cell the report shows
        assert text.strip().startswith(row.label)
    assert "0.6181 ± 0.0181" not in summary_console(rows)
    md = dict(zip(titles, _cells(lines[0]), strict=True))
    assert md["final train loss"] == "0.618 ± 0.018"
    assert md["final test accuracy"] == "0.638 ± 0.038"


def test_bias_column_flags_every_biased_sampler_with_or_without_a_measurement() -> None:
    rows = _rows()
    by_label = {row.label: row for row in rows}
    column = next(c for c in summary_columns(rows) if c.title == "bias")
    assert column.cell(by_label["md"]) == "0 (unbiased)"
    assert column.cell(by_label["oort_1%"]) == "biased (not measured)"  # Oort flagged without measure_bias
    assert column.cell(by_label["centralized"]) == "n/a"  # no client sampling
    measured = {"samplers": [{"label": "oort_1%", "max_bias": 0.01234, "stderr": 0.00071, "declared_biased": True}]}
    column = next(c for c in summary_columns(rows, bias=measured) if c.title == "bias")
    assert column.cell(by_label["oort_1%"]) == "0.01234 ± 0.00071"
    assert column.cell(by_label["md"]) == "0 (unbiased)"
    assert "measured ± SE in section Bias" in " ".join(summary_notes(rows, bias=measured))
    assert "biased (not measured)" in summary_console(rows)


def test_wall_time_is_a_note_not_a_sampler_cost_column() -> None:
    shared = _rows()
    titles = [c.title for c in summary_columns(shared)]
    assert not any("wall" in title or "seconds" in title for title in titles)
    assert any(note.startswith("Wall time: 0.05 s per round for every sampler.") for note in summary_notes(shared))
    apart = _rows(seconds={"centralized": 0.01})
    assert [c.title for c in summary_columns(apart)] == titles
    assert any("md 0.05, oort_1% 0.05, centralized 0.01" in note for note in summary_notes(apart))
    clock = [dataclasses.replace(row, simulated_seconds_final=12.5 * (k + 1)) for k, row in enumerate(shared)]
    column = next(c for c in summary_columns(clock) if c.title == "simulated time (s)")  # differs per sampler
    assert [column.cell(row) for row in clock] == ["12.5", "25", "37.5"]


def test_latex_table_is_booktabs_with_escaped_labels() -> None:
    rows = _rows()
    text = summary_latex(rows)
    lines = text.splitlines()
    begin = next(line for line in lines if line.startswith("\\begin{tabular}"))
    spec = re.fullmatch(r"\\begin\{tabular\}\{([lr]+)\}", begin)
    assert spec is not None
    columns = len(spec.group(1))
    start = lines.index(begin)
    assert lines[start + 1] == "\\toprule"
    assert lines[start + 3] == "\\midrule"
    assert lines[-2:] == ["\\bottomrule", "\\end{tabular}"]
    body = [lines[start + 2], *lines[start + 4 : -2]]
    assert len(body) == 1 + len(rows)
    for line in body:
        assert line.endswith(" \\\\")
        assert len(re.split(r"(?<!\\)&", line)) == columns  # every row has every column
        assert line.count("$") % 2 == 0  # math mode closed
    assert "oort\\_1\\%" in text  # the label's LaTeX characters escaped
    assert "oort_1%" not in text  # no raw label anywhere
    assert "$\\pm$" in text
    assert "±" not in "\n".join(body)
    assert "rounds to accuracy $\\geq$ 0.55" in body[0]
    assert all(line.startswith("%") for line in lines[:start])


@pytest.mark.parametrize(
    ("text", "latex"),
    [
        ("a_b & c", "a\\_b \\& c"),
        ("50% #1 $x$", "50\\% \\#1 \\$x\\$"),
        ("{x} ~ y^2", "\\{x\\} \\textasciitilde{} y\\textasciicircum{}2"),
        ("a\\b <c> |d|", "a\\textbackslash{}b \\textless{}c\\textgreater{} \\textbar{}d\\textbar{}"),
        ("≥ 0.8 ± ∞", "$\\geq$ 0.8 $\\pm$ $\\infty$"),
    ],
)
def test_latex_special_characters_are_escaped(text: str, latex: str) -> None:
    assert latex_text(text) == latex
