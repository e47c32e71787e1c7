"""The summary of a comparison as tables people read, with one set of column names and one number format.

The same columns (:func:`summary_columns`) make ``summary.md`` and the report's table
(:func:`summary_markdown`), ``summary.tex`` for a paper (:func:`summary_latex`, a booktabs
``tabular``) and the console's digest after ``fedsample run`` (:func:`summary_console`, a subset).
Numbers follow one rule: a mean with its spread shows the standard deviation to two significant
digits and the mean to the same decimal place (:func:`format_mean_sd`: ``0.603 ± 0.018``); a
number alone shows three significant digits (:func:`format_number`: ``5.72``).

>>> format_mean_sd(0.6025, 0.0181), format_mean_sd(0.6409, 0.03849), format_number(0.04863)
('0.603 ± 0.018', '0.641 ± 0.038', '0.0486')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedsample.experiments.results.summary import SummaryRow

__all__ = [
    "MISSING",
    "Column",
    "bias_cell",
    "format_mean_sd",
    "format_number",
    "latex_text",
    "summary_columns",
    "summary_console",
    "summary_latex",
    "summary_markdown",
    "summary_notes",
]

# A value that does not apply (accuracy of a regression) or was not measured.
MISSING = "n/a"
SIGNIFICANT = 3  # digits of a number shown alone
SPREAD_DIGITS = 2  # significant digits of a standard deviation
# Plain decimals between these magnitudes; beyond them, scientific notation.
_PLAIN_LOW, _PLAIN_HIGH = 1e-4, 1e6
_MAX_DECIMALS = 6


def format_number(value: float | None) -> str:
    """``value`` to three significant digits, trailing zeros dropped; scientific below 1e-4 and from 1e6;
    :data:`MISSING` for ``None`` and NaN.

    >>> [format_number(v) for v in (5.7167, 6.0, 43.33, 123456.0, 1.234e-5, 0.0, float("nan"))]
    ['5.72', '6', '43.3', '123456', '1.23e-05', '0', 'n/a']
    """
    if value is None or math.isnan(value):
        return MISSING
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    if not _PLAIN_LOW <= abs(value) < _PLAIN_HIGH:
        return f"{value:.{SIGNIFICANT - 1}e}"
    decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    return _plain(value, decimals, strip=True)


def format_mean_sd(mean: float | None, sd: float | None) -> str:
    """``mean ± sd`` with ``sd`` to two significant digits and ``mean`` to the same decimal place.

    The mean alone (:func:`format_number`) where ``sd`` is undefined (one seed: NaN); ``± 0`` where the
    seeds agree; scientific notation where plain decimals would need more than six places or the
    mean reaches 1e6.

    >>> format_mean_sd(0.7, 0.2), format_mean_sd(43.33, 2.517), format_mean_sd(1234.5, 123.4)
    ('0.70 ± 0.20', '43.3 ± 2.5', '1230 ± 120')
    >>> format_mean_sd(0.5, 0.0996), format_mean_sd(0.7, float("nan")), format_mean_sd(0.7, 0.0)
    ('0.50 ± 0.10', '0.7', '0.7 ± 0')
    >>> format_mean_sd(0.15, 3e-13)  # a spread of float rounding: the mean to six digits at most
    '0.15 ± 3.0e-13'
    """
    if mean is None or math.isnan(mean) or not math.isfinite(mean) or sd is None or math.isnan(sd):
        return format_number(mean)
    if math.isinf(sd):
        return f"{format_number(mean)} ± inf"
    if sd == 0:
        return f"{format_number(mean)} ± 0"
    place = _leading_place(abs(sd), SPREAD_DIGITS)  # the exponent of sd's first digit, after rounding
    decimals = SPREAD_DIGITS - 1 - place
    if decimals <= _MAX_DECIMALS and abs(mean) < _PLAIN_HIGH:
        return f"{_plain(mean, decimals)} ± {_plain(abs(sd), decimals)}"
    top = math.floor(math.log10(abs(mean))) if mean != 0 else place
    if top - place > _MAX_DECIMALS:  # a spread far below the mean's precision (a float rounding's)
        return f"{mean:.6g} ± {abs(sd):.{SPREAD_DIGITS - 1}e}"
    digits = min(max(top - place + 1, 0), 8)
    return f"{mean:.{digits}e} ± {abs(sd):.{SPREAD_DIGITS - 1}e}"


def _leading_place(value: float, digits: int) -> int:
    """The power of ten of ``value``'s first digit once rounded to ``digits`` significant digits
    (0.0996 to two digits is 0.10: place -1)."""
    place = math.floor(math.log10(value))
    if round(value, digits - 1 - place) >= 10.0 ** (place + 1):
        place += 1
    return place


def _plain(value: float, decimals: int, *, strip: bool = False) -> str:
    """``value`` rounded at ``decimals`` places after the point (a negative count rounds to tens, ...)."""
    rounded = round(value, decimals)
    text = f"{rounded:.{max(decimals, 0)}f}"
    if strip and "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text  # no "-0.00"


@dataclass(frozen=True)
class Column:
    """One column of the summary: its title and how a row's cell reads; ``text`` columns align left."""

    title: str
    cell: Callable[[SummaryRow], str]
    text: bool = False


def bias_cell(row: SummaryRow, measured: Mapping[str, Any] | None = None) -> str:
    """What is known of the bias ``max_i |E[w_i] - p_i|`` of ``row``'s sampler.

    ``0 (unbiased)`` for a sampler the registry declares unbiased (``E[w_i] = p_i`` by construction),
    the measured value ± its standard error for a biased one that ``measured`` (``bias.json``'s
    rows by label) holds, ``biased (not measured)`` otherwise, and :data:`MISSING` for a run without
    a registered sampler (the centralized baseline).
    """
    from fedsample.samplers import sampler_class, sampler_names

    if row.sampler not in sampler_names():
        return MISSING
    if not sampler_class(row.sampler).biased:
        return "0 (unbiased)"
    found = (measured or {}).get(row.label)
    value = found.get("max_bias") if isinstance(found, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "biased (not measured)"
    stderr = found.get("stderr") if isinstance(found, dict) else None
    spread = float(stderr) if isinstance(stderr, int | float) and not isinstance(stderr, bool) else math.nan
    return format_mean_sd(float(value), spread)


def _measured(bias: Any) -> dict[str, Any]:
    """``bias.json``'s rows by label (empty for a payload that holds none)."""
    rows = bias.get("samplers") if isinstance(bias, dict) else None
    if not isinstance(rows, list):
        return {}
    return {str(r["label"]): r for r in rows if isinstance(r, dict) and "label" in r}


def _shared_wall_time(rows: Sequence[SummaryRow]) -> bool:
    """Whether every label has the very same mean wall time per round: their runs were trained together
    (one batch a round), so the time is the batch's and says nothing of a sampler's cost. The tables
    never show it as a column (it depends on how the runs were batched, not on the sampler); the
    notes state it, once when shared."""
    times = {row.round_seconds_mean for row in rows}
    return len(rows) > 1 and len(times) == 1 and not math.isnan(rows[0].round_seconds_mean)


def summary_columns(rows: Sequence[SummaryRow], *, bias: Any = None) -> list[Column]:
    """The summary's columns for ``rows``: accuracy only for classification, targets only when given,
    the simulated clock's costs only when recorded, and the bias (``bias``: ``bias.json``'s payload, if
    measured). Costs are those that differ per sampler; the wall time is in :func:`summary_notes`."""
    measured = _measured(bias)
    classification = any(not math.isnan(row.final_test_accuracy_mean) for row in rows)
    columns = [
        Column("label", lambda r: r.label, text=True),
        Column("sampler", lambda r: r.sampler, text=True),
        Column("seeds", lambda r: str(r.num_seeds)),
        Column("rounds", lambda r: str(r.num_rounds)),
        Column("final train loss", lambda r: format_mean_sd(r.final_train_loss_mean, r.final_train_loss_std)),
        Column("best train loss", lambda r: format_mean_sd(r.best_train_loss_mean, r.best_train_loss_std)),
    ]
    if classification:
        columns += [
            Column(
                "final test accuracy", lambda r: format_mean_sd(r.final_test_accuracy_mean, r.final_test_accuracy_std)
            ),
            Column("best test accuracy", lambda r: format_mean_sd(r.best_test_accuracy_mean, r.best_test_accuracy_std)),
        ]
    accuracy = next((r.target_accuracy for r in rows if r.target_accuracy is not None), None)
    loss = next((r.target_loss for r in rows if r.target_loss is not None), None)
    if accuracy is not None:
        columns.append(
            Column(
                f"rounds to accuracy ≥ {format_number(accuracy)}",
                lambda r: _reached(r.rounds_to_target_accuracy, r.seeds_reached_target_accuracy, r.num_seeds),
            )
        )
    if loss is not None:
        columns.append(
            Column(
                f"rounds to train loss ≤ {format_number(loss)}",
                lambda r: _reached(r.rounds_to_target_loss, r.seeds_reached_target_loss, r.num_seeds),
            )
        )
    if any(r.simulated_seconds_final is not None for r in rows):
        if accuracy is not None:
            title = f"simulated s to accuracy ≥ {format_number(accuracy)}"
            columns.append(Column(title, lambda r: format_number(r.time_to_target_accuracy)))
        if loss is not None:
            title = f"simulated s to train loss ≤ {format_number(loss)}"
            columns.append(Column(title, lambda r: format_number(r.time_to_target_loss)))
        columns.append(Column("simulated time (s)", lambda r: format_number(r.simulated_seconds_final)))
    columns.append(Column("distinct clients / round", lambda r: format_number(r.distinct_clients_mean)))
    columns.append(Column("weight sum / round", lambda r: format_number(r.weight_sum_mean)))
    columns.append(Column("bias", lambda r: bias_cell(r, measured), text=True))
    return columns


def summary_notes(rows: Sequence[SummaryRow], *, bias: Any = None) -> list[str]:
    """What the columns of :func:`summary_columns` measure, one paragraph each (Markdown)."""
    titles = {column.title for column in summary_columns(rows, bias=bias)}
    notes = [
        "Means ± sample standard deviations over seeds: the deviation to 2 significant digits, the mean to the "
        "same decimal place (no deviation is shown for one seed). Train loss: the federated objective "
        "sum_i p_i L_i over all training data. Final: the last evaluation; best: the lowest loss / highest "
        "accuracy over evaluations. Rounds to a target: the first evaluated round that reaches it, averaged over "
        "the seeds that do (reached / seeds in brackets).",
        "Per round, averaged over rounds and seeds: distinct clients / round, the clients in a round's selection, "
        "whom the server asks to train and to send an update (the sampler's cost in computation and "
        "communication); weight sum / round, sum_i w_i(S_t).",
    ]
    if "simulated time (s)" in titles:
        notes.append("Simulated time (s): the simulated clock after the last round (docs/system.md).")
    if rows and _shared_wall_time(rows):
        notes.append(
            f"Wall time: {format_number(rows[0].round_seconds_mean)} s per round for every sampler. Their runs "
            "were trained together, one batch a round, so this is the batch's time, not a sampler's cost."
        )
    elif rows:
        times = ", ".join(f"{row.label} {format_number(row.round_seconds_mean)}" for row in rows)
        notes.append(
            f"Wall time per round (s): {times}. Each is the time of a round of the runs trained together with the "
            "label's (one batch: sampling, local training, aggregation), not the cost of its sampler alone."
        )
    measured = "measured ± SE in section Bias" if _measured(bias) else "measured with [report] measure_bias = true"
    notes.append(
        "Bias: max_i abs(E[w_i] - p_i) of the aggregation weights. 0 for the samplers unbiased by construction "
        f"(E[w_i] = p_i); for the biased ones (declared so in the sampler registry) {measured}, else "
        '"biased (not measured)".'
    )
    return notes


def summary_markdown(rows: Sequence[SummaryRow], *, bias: Any = None) -> str:
    """The summary as a Markdown table (``summary.md`` and the report)."""
    columns = summary_columns(rows, bias=bias)
    lines = [
        "| " + " | ".join(column.title for column in columns) + " |",
        "|" + "|".join("---" if column.text else "---:" for column in columns) + "|",
    ]
    lines += ["| " + " | ".join(column.cell(row).replace("|", "\\|") for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def summary_latex(rows: Sequence[SummaryRow], *, bias: Any = None) -> str:
    """The summary as a LaTeX ``tabular`` with booktabs rules (``summary.tex``), labels escaped.

    ``\\input{summary.tex}`` inside a ``table`` environment of a document that loads ``booktabs``.
    """
    columns = summary_columns(rows, bias=bias)
    spec = "".join("l" if column.text else "r" for column in columns)
    lines = [
        "% fedsample summary: mean ± sample standard deviation over seeds (see report.md for the columns).",
        "% Needs \\usepackage{booktabs}; \\input{summary.tex} inside a table environment.",
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
        " & ".join(latex_text(column.title) for column in columns) + " \\\\",
        "\\midrule",
    ]
    lines += [" & ".join(latex_text(column.cell(row)) for column in columns) + " \\\\" for row in rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines)


def summary_console(rows: Sequence[SummaryRow], *, bias: Any = None) -> str:
    """The console's digest: the label, final train loss, final test accuracy and bias columns of
    :func:`summary_columns`, their titles and cells unchanged, aligned in plain text."""
    keep = ("label", "final train loss", "final test accuracy", "bias")
    columns = [column for column in summary_columns(rows, bias=bias) if column.title in keep]
    cells = [[column.cell(row) for column in columns] for row in rows]
    widths = [max([len(column.title), *(len(line[k]) for line in cells)]) for k, column in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.ljust(width) if column.text else value.rjust(width)
            for value, width, column in zip(values, widths, columns, strict=True)
        ]
        return "  " + "  ".join(parts).rstrip()

    return "\n".join([line([column.title for column in columns]), *(line(values) for values in cells)])


# LaTeX's special characters in text, and the few symbols the tables use, as text-mode commands.
_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "∞": r"$\infty$",
}


def latex_text(text: str) -> str:
    """``text`` as LaTeX text: its special characters escaped, ± ≥ ≤ ∞ in math mode.

    >>> latex_text("50% of a_b & {c} ± 1")
    '50\\\\% of a\\\\_b \\\\& \\\\{c\\\\} $\\\\pm$ 1'
    """
    return "".join(_LATEX.get(character, character) for character in text)


def _reached(mean: float, reached: int, seeds: int) -> str:
    return f"{'never' if reached == 0 else format_number(mean)} ({reached}/{seeds})"
