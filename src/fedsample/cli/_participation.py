"""Command-line options of availability and failures (``fedsample stats --dropout 0.3 ...``)."""

from __future__ import annotations

import argparse
import math
from typing import Any, cast

import numpy as np

from fedsample.cli._app import CommandError
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.participation.availability import (
    AlwaysAvailable,
    Availability,
    BernoulliAvailability,
    Dropout,
    load_availability_trace,
)
from fedsample.participation.policies import AGGREGATION_POLICIES
from fedsample.participation.rounds import Participation
from fedsample.samplers import Sampler
from fedsample.stats.participation import ParticipationStatistics, format_participation, participation_statistics

__all__ = ["add_participation_arguments", "participation_from_args", "participation_report"]

DEFAULT_ROUNDS = 2000


def add_participation_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "availability and failures",
        "any of these adds a Monte-Carlo report of each aggregation policy's bias (docs/failures.md)",
    )
    group.add_argument("--availability", type=float, metavar="A", help="each client available with probability A")
    group.add_argument("--availability-trace", metavar="FILE", help="a CSV trace of availability windows")
    group.add_argument("--dropout", type=float, metavar="D", help="a selected client fails with probability D")
    group.add_argument("--over-selection", type=float, metavar="O", help="ask ceil(m (1 + O)), keep the first m")
    group.add_argument(
        "--policy", metavar="NAME", help=f"report one policy ({', '.join(AGGREGATION_POLICIES)}; default: all)"
    )
    group.add_argument("--return-rates", metavar="KIND", help="known (default) or estimated")
    group.add_argument("--redraws", type=int, metavar="K", help="tries to replace an unavailable draw (default 10)")


def _bad(option: str, constraint: str, value: Any) -> CommandError:
    return CommandError(f"The {option!r} parameter must be {constraint}. Got {value!r} instead.", parameter=option)


def participation_from_args(args: argparse.Namespace) -> Participation | None:
    """The setting the options describe, or ``None`` when none of them is given."""
    names = ("availability", "availability_trace", "dropout", "over_selection", "policy", "return_rates", "redraws")
    if all(getattr(args, name) is None for name in names):
        return None
    availability: Availability = AlwaysAvailable()
    if args.availability is not None:
        if not (0 < args.availability <= 1) or not math.isfinite(args.availability):
            raise _bad("--availability", "a probability in (0, 1]", args.availability)
        if args.availability_trace is not None:
            raise _bad("--availability", "left out when --availability-trace is given", args.availability)
        availability = BernoulliAvailability(args.availability) if args.availability < 1 else availability
    if args.availability_trace is not None:
        try:
            availability = load_availability_trace(args.availability_trace)
        except FedsampleError as exc:
            raise CommandError(
                f"The '--availability-trace' parameter must name a valid trace: {exc}", parameter="--availability-trace"
            ) from None
    dropout = None
    if args.dropout is not None:
        if not (0 <= args.dropout < 1):
            raise _bad("--dropout", "a probability in [0, 1)", args.dropout)
        dropout = Dropout(args.dropout) if args.dropout > 0 else None
    over = 0.0 if args.over_selection is None else args.over_selection
    if not (0 <= over <= 10):
        raise _bad("--over-selection", "a float in [0, 10]", over)
    if args.policy is not None and args.policy not in AGGREGATION_POLICIES:
        raise _bad("--policy", "one of " + ", ".join(map(repr, AGGREGATION_POLICIES)), args.policy)
    rates = "known" if args.return_rates is None else args.return_rates
    if rates not in ("known", "estimated"):
        raise _bad("--return-rates", "'known' or 'estimated'", rates)
    redraws = 10 if args.redraws is None else args.redraws
    if not (0 <= redraws <= 1000):
        raise _bad("--redraws", "an int in [0, 1000]", redraws)
    if args.policy in (None, "inverse-probability") and rates == "known" and args.availability_trace is not None:
        raise _bad("--return-rates", "'estimated' with --availability-trace (a trace has no a_i)", rates)
    return Participation(
        availability=availability,
        dropout=dropout,
        over_selection=over,
        return_rates=cast(Any, rates),
        redraws=redraws,
    )


def participation_report(
    args: argparse.Namespace,
    participation: Participation,
    federation: Federation,
    samplers: list[Sampler[Any]],
    *,
    skip_infeasible: bool,
) -> tuple[str, dict[str, Any]]:
    """The text table and the JSON object of every sampler's statistics under ``participation``."""
    rounds = args.monte_carlo or DEFAULT_ROUNDS
    policies = AGGREGATION_POLICIES if args.policy is None else (args.policy,)
    rows: list[tuple[str, ParticipationStatistics]] = []
    skipped: dict[str, str] = {}
    for sampler in samplers:
        try:
            state = sampler.init(federation, participation.num_asked(args.num_sampled))
        except FedsampleError as exc:
            if not skip_infeasible:
                raise
            skipped[sampler.name] = " ".join(str(exc).split())
            continue
        stats = participation_statistics(
            sampler,
            state,
            participation,
            num_sampled=args.num_sampled,
            num_rounds=rounds,
            seed=args.seed,
            policies=policies,
        )
        rows.append((sampler.name, stats))
    text = f"availability and failures ({rounds} Monte-Carlo rounds; z: bias in standard errors)\n"
    text += format_participation(rows)
    payload = {
        "num_rounds": rounds,
        "samplers": {name: _to_json(stats) for name, stats in rows},
        "skipped": skipped,
    }
    return text, payload


def _to_json(stats: ParticipationStatistics) -> dict[str, Any]:
    def floats(values: Any) -> Any:
        return np.asarray(values, dtype=float).tolist()

    return {
        "failures_per_round": stats.failures,
        "kept": stats.kept.value,
        "policies": {
            policy: {
                "mean_weights": floats(s.mean_weights.value),
                "mean_weights_stderr": floats(s.mean_weights.stderr),
                "bias": floats(s.bias.value),
                "max_abs_z": s.max_abs_z,
                "var_weights": floats(s.var_weights.value),
                "weight_sum": s.weight_sum.value,
                "weight_sum_stderr": s.weight_sum.stderr,
                "var_weight_sum": s.var_weight_sum.value,
            }
            for policy, s in stats.policies.items()
        },
    }
