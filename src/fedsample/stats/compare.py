"""Side-by-side comparison of samplers on one federation (paper 003's Table 1, extended)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample._validation import Text, check_param, invalid
from fedsample.designs.exact import ExactStatistics, exact_statistics
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.rng import check_generator
from fedsample.samplers._base import Sampler
from fedsample.stats.montecarlo import (
    MONTE_CARLO_ROUNDS,
    MonteCarloStatistics,
    check_sampler_and_state,
    monte_carlo_bias,
    monte_carlo_statistics,
)

__all__ = ["Comparison", "compare_samplers", "comparison_to_json", "format_comparison"]


@dataclass(frozen=True, eq=False)
class Comparison:
    """Exact (and optionally Monte-Carlo) statistics of several samplers on one federation.

    ``exact`` lacks the samplers whose design has no closed form (``monte_carlo_only``); those
    always have Monte-Carlo estimates.
    """

    federation: Federation
    num_sampled: int
    exact: dict[str, ExactStatistics]
    skipped: dict[str, str] = field(default_factory=dict)
    monte_carlo: dict[str, MonteCarloStatistics] = field(default_factory=dict)
    monte_carlo_only: tuple[str, ...] = ()


# Rounds drawn for a sampler without closed-form statistics when none were asked for.
DEFAULT_MONTE_CARLO_ROUNDS = 20_000


def compare_samplers(
    federation: Federation,
    num_sampled: int,
    samplers: Sequence[Sampler[Any]],
    *,
    skip_infeasible: bool = False,
    monte_carlo_rounds: int = 0,
    rng: np.random.Generator | None = None,
) -> Comparison:
    """Compute every sampler's exact statistics; with ``monte_carlo_rounds`` also estimate them.

    With ``skip_infeasible`` a sampler whose ``init`` rejects the federation (Poisson sampling when
    some ``m p_i > 1``) is listed in ``skipped`` with the reason instead of raising.
    """
    owner = "compare_samplers"
    if not isinstance(federation, Federation):
        raise invalid("federation", owner, "a Federation", federation)
    given: object = samplers  # checked as what it is, whatever the annotation says
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given:
        raise invalid("samplers", owner, "a non-empty sequence of samplers", given)
    for sampler in samplers:
        if not isinstance(sampler, Sampler):
            raise invalid("samplers", owner, "a sequence of fedsample Samplers", sampler)
    _check_monte_carlo(monte_carlo_rounds, rng, owner)
    entries: list[tuple[str, Sampler[Any], Any]] = []
    skipped: dict[str, str] = {}
    errors: list[FedsampleError] = []
    for sampler in samplers:
        try:
            entries.append((sampler.name, sampler, sampler.init(federation, num_sampled)))
        except FedsampleError as exc:
            if not skip_infeasible:
                raise
            errors.append(exc)
            skipped[sampler.name] = str(exc)
    if not entries and errors:
        raise errors[0]
    comparison = compare_states(federation, num_sampled, entries, monte_carlo_rounds=monte_carlo_rounds, rng=rng)
    return Comparison(
        federation=federation,
        num_sampled=num_sampled,
        exact=comparison.exact,
        skipped=skipped,
        monte_carlo=comparison.monte_carlo,
        monte_carlo_only=comparison.monte_carlo_only,
    )


def compare_states(
    federation: Federation,
    num_sampled: int,
    entries: Sequence[tuple[str, Sampler[Any], Any]],
    *,
    monte_carlo_rounds: int = 0,
    rng: np.random.Generator | None = None,
) -> Comparison:
    """Statistics of ``(label, sampler, state)`` entries, for example learned states loaded from files.

    A design without closed-form statistics (successive sampling without replacement) gets
    Monte-Carlo estimates even when ``monte_carlo_rounds`` is 0
    (:data:`DEFAULT_MONTE_CARLO_ROUNDS` draws).
    """
    owner = "compare_states"
    _check_monte_carlo(monte_carlo_rounds, rng, owner)
    for entry in entries:
        if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[0], str)):
            raise invalid("entries", owner, "a sequence of (label, sampler, state) triples", entry)
        check_sampler_and_state(entry[1], entry[2], owner)
    exact: dict[str, ExactStatistics] = {}
    mc: dict[str, MonteCarloStatistics] = {}
    only: list[str] = []
    generator = rng if rng is not None else np.random.default_rng(0)
    for label, sampler, state in entries:
        try:
            exact[label] = exact_statistics(sampler.design(state), sampler.importances(state))
        except TypeError:  # no closed form for this design
            only.append(label)
        rounds = monte_carlo_rounds or (DEFAULT_MONTE_CARLO_ROUNDS if label in only else 0)
        if rounds:
            mc[label] = monte_carlo_statistics(sampler, state, generator, num_rounds=rounds)
    return Comparison(
        federation=federation, num_sampled=num_sampled, exact=exact, monte_carlo=mc, monte_carlo_only=tuple(only)
    )


def _check_monte_carlo(rounds: object, rng: object, owner: str) -> None:
    """``monte_carlo_rounds``: 0 (none) or a count of rounds; ``rng``: None or a Generator."""
    if not (rounds == 0 and type(rounds) is int) and not MONTE_CARLO_ROUNDS.is_satisfied_by(rounds):
        raise invalid("monte_carlo_rounds", owner, f"0 or {MONTE_CARLO_ROUNDS}", rounds)
    if rng is not None:
        check_generator(rng, owner)


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    return f"{x:.4g}"


_COLUMNS = (
    ("sampler", lambda name, s: name),
    ("unbiased", lambda name, s: "no" if s.biased else "yes"),
    ("sum Var[w_i]", lambda name, s: _num(s.sigma)),
    ("alpha", lambda name, s: _num(s.alpha) if s.alpha is not None else f"({_num(s.alpha_effective)})"),
    ("Var[sum w_i]", lambda name, s: _num(s.var_sum_weights)),
    ("gamma", lambda name, s: _num(s.gamma)),
    ("min P(i in S)", lambda name, s: _num(float(s.p_included.min()))),
    ("mean P(i in S)", lambda name, s: _num(float(s.p_included.mean()))),
    ("E[distinct]", lambda name, s: _num(s.expected_distinct)),
    ("Var[distinct]", lambda name, s: _num(s.var_distinct)),
    ("P(no repeat)", lambda name, s: _num(s.p_all_distinct)),
)


def _render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return out


def _check_comparison(comparison: object, name: str, label: object, owner: str) -> None:
    """A Comparison and a label to print with it (anything else raised AttributeError or TypeError)."""
    if not isinstance(comparison, Comparison):
        raise invalid("comparison", owner, "a Comparison (as compare_samplers makes)", comparison)
    check_param(name, owner, label, Text("a string"))


def format_comparison(comparison: Comparison, *, importance_label: str = "") -> str:
    """A plain-text table, one row per sampler, followed by notes."""
    _check_comparison(comparison, "importance_label", importance_label, "format_comparison")
    fed = comparison.federation
    sizes = fed.sizes
    # Federations rebuilt from importances alone (saved states) have no meaningful sizes.
    size_text = (
        f", M = {fed.total_size} samples (sizes {int(sizes.min())}..{int(sizes.max())})"
        if fed.importance_masses is not None
        else ""
    )
    lines = [
        f"{fed.num_clients} clients{size_text}, m = {comparison.num_sampled}"
        f"{', ' + importance_label if importance_label else ''}",
        "",
    ]
    header = [c[0] for c in _COLUMNS]
    rows = [[fn(name, s) for _, fn in _COLUMNS] for name, s in comparison.exact.items()]
    lines += _render(header, rows)
    notes = []
    if any(s.alpha is None for s in comparison.exact.values()):
        notes.append(
            "alpha in parentheses: the covariance is not of the form -alpha p_i p_j; the value shown is "
            "003's eq. 24, (sum Var[w_i] - Var[sum w_i]) / (1 - sum p_i^2)."
        )
    for name, s in comparison.exact.items():
        if s.biased:
            notes.append(f"{name} is biased: max_i |E[w_i] - p_i| = {_num(s.max_bias)}.")
    for name, reason in comparison.skipped.items():
        notes.append(f"{name} skipped: {reason}")
    for name in comparison.monte_carlo_only:
        notes.append(f"{name} has no closed-form statistics (its weights are not a fixed design): Monte Carlo only.")
        bias = monte_carlo_bias(comparison.monte_carlo[name], fed.importances)
        notes.append(
            f"{name}, Monte Carlo: max_i |E[w_i] - p_i| = {_num(bias.max_bias)} +- {_num(bias.stderr)} "
            f"(client {bias.client}); largest deviation {_num(bias.max_z)} standard errors"
            f"{' (biased)' if bias.max_z > 5 else ''}."
        )
    if comparison.monte_carlo:
        lines += ["", "Monte Carlo check (estimate +- standard error; worst |z| against the exact values):", ""]
        mc_rows = []
        for name, mc in comparison.monte_carlo.items():
            ex = comparison.exact.get(name)
            z = _worst_z(mc, ex) if ex is not None else float("nan")
            mc_rows.append(
                [
                    name,
                    str(mc.num_rounds),
                    f"{_num(float(np.sum(mc.var_weights.value)))}",
                    f"{_num(mc.var_sum_weights.value)} +- {_num(mc.var_sum_weights.stderr)}",
                    f"{_num(mc.expected_distinct.value)} +- {_num(mc.expected_distinct.stderr)}",
                    f"{_num(mc.p_all_distinct.value)} +- {_num(mc.p_all_distinct.stderr)}",
                    "n/a (no closed form)" if z != z else f"{z:.2f}",
                ]
            )
        lines += _render(
            ["sampler", "rounds", "sum Var[w_i]", "Var[sum w_i]", "E[distinct]", "P(no repeat)", "worst |z|"], mc_rows
        )
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _worst_z(mc: MonteCarloStatistics, ex: ExactStatistics) -> float:
    pairs = [
        (mc.mean_weights, ex.mean_weights),
        (mc.var_weights, ex.var_weights),
        (mc.p_included, ex.p_included),
        (mc.var_sum_weights, ex.var_sum_weights),
        (mc.offdiag_cov_sum, ex.offdiag_cov_sum),
        (mc.expected_distinct, ex.expected_distinct),
    ]
    if ex.var_distinct is not None:
        pairs.append((mc.var_distinct, ex.var_distinct))
    if ex.p_all_distinct is not None:
        pairs.append((mc.p_all_distinct, ex.p_all_distinct))
    return float(max(np.max(est.deviation(val)) for est, val in pairs))


def _estimate_json(est: Any) -> dict[str, Any]:
    value, se = est.value, est.stderr
    if isinstance(value, np.ndarray):
        return {"value": value.tolist(), "stderr": np.asarray(se).tolist()}
    return {"value": float(value), "stderr": float(se)}


def _mc_json(mc: MonteCarloStatistics) -> dict[str, Any]:
    return {
        "num_rounds": mc.num_rounds,
        "mean_weights": _estimate_json(mc.mean_weights),
        "var_weights": _estimate_json(mc.var_weights),
        "p_included": _estimate_json(mc.p_included),
        "var_sum_weights": _estimate_json(mc.var_sum_weights),
        "offdiag_cov_sum": _estimate_json(mc.offdiag_cov_sum),
        "expected_distinct": _estimate_json(mc.expected_distinct),
        "var_distinct": _estimate_json(mc.var_distinct),
        "p_all_distinct": _estimate_json(mc.p_all_distinct),
    }


def comparison_to_json(comparison: Comparison, *, importance: str = "size") -> dict[str, Any]:
    """The comparison as one JSON-ready object (the format of ``fedsample stats --json``)."""
    _check_comparison(comparison, "importance", importance, "comparison_to_json")
    out: dict[str, Any] = {
        "num_clients": comparison.federation.num_clients,
        "total_size": comparison.federation.total_size,
        "num_sampled": comparison.num_sampled,
        "importance": importance,
        "samplers": {},
    }
    for name in [*comparison.exact, *comparison.monte_carlo_only]:
        s = comparison.exact.get(name)
        if s is None:
            mc = comparison.monte_carlo[name]
            bias = monte_carlo_bias(mc, comparison.federation.importances)
            out["samplers"][name] = {"exact": False, "monte_carlo": {**_mc_json(mc), "bias": bias._asdict()}}
            continue
        entry: dict[str, Any] = {
            "mean_weights": s.mean_weights.tolist(),
            "var_weights": s.var_weights.tolist(),
            "p_included": s.p_included.tolist(),
            "sum_var": s.sigma,
            "var_sum_weights": s.var_sum_weights,
            "alpha": s.alpha,
            "alpha_effective": s.alpha_effective,
            "offdiag_cov_sum": s.offdiag_cov_sum,
            "gamma": s.gamma,
            "expected_distinct": s.expected_distinct,
            "var_distinct": s.var_distinct,
            "p_all_distinct": s.p_all_distinct,
            "biased": s.biased,
            "max_bias": s.max_bias,
        }
        if name in comparison.monte_carlo:
            entry["monte_carlo"] = _mc_json(comparison.monte_carlo[name])
        out["samplers"][name] = entry
    if comparison.skipped:
        out["skipped"] = dict(comparison.skipped)
    return out
