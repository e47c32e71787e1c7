"""``fedsample stats``: compare samplers' aggregation-weight statistics on one federation."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from fedsample._validation import restate
from fedsample.cli._app import CommandError, add_command
from fedsample.cli._inputs import (
    add_federation_arguments,
    add_sampler_arguments,
    build_samplers,
    federation_from_args,
    parse_sampler_params,
)
from fedsample.cli._participation import add_participation_arguments, participation_from_args, participation_report
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.participation.availability import TraceAvailability
from fedsample.rng import Stream, stream_rng
from fedsample.samplers.persistence import load_sampler
from fedsample.serialization import dump_json
from fedsample.stats import compare_samplers, comparison_to_json, format_comparison
from fedsample.stats.compare import compare_states
from fedsample.stats.montecarlo import MONTE_CARLO_ROUNDS

# The comparison shown by default: every registered sampler that needs nothing but the federation.
DEFAULT_SAMPLERS = ("full", "md", "uniform", "fedavg-uniform", "poisson", "binomial", "clustered-size")


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "stats")
    add_federation_arguments(parser)
    add_sampler_arguments(parser, "compare", DEFAULT_SAMPLERS)
    parser.add_argument(
        "--monte-carlo", type=int, default=0, metavar="ROUNDS", help="also estimate every statistic from ROUNDS draws"
    )
    parser.add_argument(
        "--sampler-state",
        metavar="FILE",
        action="append",
        help="a saved sampler and state (a file in the states/ of a fedsample run directory, or written by "
        "fedsample.samplers.persistence.save_sampler); its statistics are those of the distribution it learned. "
        "Repeatable; replaces --samplers.",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of random federations and Monte-Carlo draws")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_participation_arguments(parser)
    return "stats", run


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise CommandError(
            f"The '--seed' parameter must be a non-negative int. Got {args.seed} instead.", parameter="--seed"
        )
    if args.monte_carlo != 0 and not MONTE_CARLO_ROUNDS.is_satisfied_by(args.monte_carlo):
        raise CommandError(
            f"The '--monte-carlo' parameter must be 0 or {MONTE_CARLO_ROUNDS} (the rounds one estimate draws). "
            f"Got {args.monte_carlo} instead.",
            parameter="--monte-carlo",
        )
    rng = stream_rng(args.seed, Stream.MONTE_CARLO)
    participation = participation_from_args(args)
    failures: tuple[str, dict[str, Any]] | None = None
    if participation is not None and args.sampler_state:
        raise CommandError(
            "The '--sampler-state' parameter must be left out with the availability and failure options "
            f"(the states were drawn for a fixed m). Got {args.sampler_state[0]!r} instead.",
            parameter="--sampler-state",
        )
    if args.sampler_state:
        comparison, label = _saved_states(args, rng)
    else:
        federation, label = federation_from_args(args, seed=args.seed)
        explicit = args.samplers is not None
        names = [s.strip() for s in args.samplers.split(",")] if explicit else list(DEFAULT_SAMPLERS)
        if explicit and (not names or any(not n for n in names)):
            raise CommandError(
                f"The '--samplers' parameter must be a comma-separated list of sampler names. "
                f"Got {args.samplers!r} instead.",
                parameter="--samplers",
            )
        samplers = build_samplers(names, parse_sampler_params(args.param), flag="--samplers")
        comparison = compare_samplers(
            federation,
            args.num_sampled,
            samplers,
            skip_infeasible=not explicit,
            monte_carlo_rounds=args.monte_carlo,
            rng=rng,
        )
        if participation is not None:
            if isinstance(participation.availability, TraceAvailability):  # as the system trace, within n
                try:
                    participation.availability.check_clients(federation.num_clients, "")
                except FedsampleError as exc:
                    raise restate(exc, "--availability-trace", "", noun="parameter") from None
            failures = participation_report(args, participation, federation, samplers, skip_infeasible=not explicit)
    if args.json:
        # Saved states carry their own importances, whatever --importance says.
        out = comparison_to_json(comparison, importance="saved" if args.sampler_state else args.importance)
        out["federation"] = label
        if failures is not None:
            out["participation"] = failures[1]
        print(dump_json(out))
    else:
        importance = (
            "saved states" if args.sampler_state else ("p_i = n_i/M" if args.importance == "size" else "p_i = 1/n")
        )
        print(f"federation: {label}")
        print(format_comparison(comparison, importance_label=importance))
        if failures is not None:
            print()
            print(failures[0])
    return 0


def _saved_states(args: argparse.Namespace, rng: Any) -> tuple[Any, str]:
    """The comparison of saved sampler states (all on the same federation)."""
    entries = []
    names = [Path(path).name for path in args.sampler_state]
    for path, name in zip(args.sampler_state, names, strict=True):
        sampler, state = load_sampler(path)
        # Files of the same name in different folders keep their whole path, so no row is lost.
        entries.append((f"{sampler.name} ({name if names.count(name) == 1 else path})", sampler, state))
    first = entries[0][1].importances(entries[0][2])
    for label, sampler, state in entries[1:]:
        if not np.array_equal(sampler.importances(state), first):
            raise CommandError(
                f"The '--sampler-state' parameter must name states of one federation. Got {label!r}, whose "
                "importances differ from the first file's, instead.",
                parameter="--sampler-state",
            )
    federation = Federation.from_importances(first)
    num_sampled = int(getattr(entries[0][2], "num_sampled", 0))
    comparison = compare_states(federation, num_sampled, entries, monte_carlo_rounds=args.monte_carlo, rng=rng)
    return comparison, ", ".join(args.sampler_state)
