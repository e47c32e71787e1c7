"""``fedsample stats``: compare samplers' aggregation-weight statistics on one federation."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedsample.cli._app import CommandError
from fedsample.cli._inputs import add_federation_arguments, build_samplers, federation_from_args, parse_sampler_params
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import sampler_names
from fedsample.stats import compare_samplers, comparison_to_json, format_comparison

# The comparison shown by default: every registered sampler that needs nothing but the federation.
DEFAULT_SAMPLERS = ("full", "md", "uniform", "fedavg-uniform", "poisson", "binomial", "clustered-size")


def register(sub: Any) -> tuple[str, Any]:
    parser = sub.add_parser(
        "stats",
        help="exact statistics of the aggregation weights of several samplers on one federation",
        description="Compare samplers on one federation: paper 003's Table 1 (variance, alpha, variance of "
        "the weight sum) extended with gamma, inclusion probabilities and the number of distinct clients.",
    )
    add_federation_arguments(parser)
    parser.add_argument(
        "--samplers",
        metavar="NAME,...",
        help=f"samplers to compare (default: {','.join(DEFAULT_SAMPLERS)}; known: {', '.join(sampler_names())})",
    )
    parser.add_argument("--param", action="append", metavar="SAMPLER.NAME=VALUE", help="a sampler hyperparameter")
    parser.add_argument(
        "--monte-carlo", type=int, default=0, metavar="ROUNDS", help="also estimate every statistic from ROUNDS draws"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of random federations and Monte-Carlo draws")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return "stats", run


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise CommandError(
            f"The '--seed' parameter must be a non-negative int. Got {args.seed} instead.", parameter="--seed"
        )
    if args.monte_carlo < 0 or args.monte_carlo == 1:
        raise CommandError(
            f"The '--monte-carlo' parameter must be 0 or an int of at least 2. Got {args.monte_carlo} instead.",
            parameter="--monte-carlo",
        )
    federation, label = federation_from_args(args, seed=args.seed)
    explicit = args.samplers is not None
    names = [s.strip() for s in args.samplers.split(",")] if explicit else list(DEFAULT_SAMPLERS)
    if explicit and (not names or any(not n for n in names)):
        raise CommandError(
            f"The '--samplers' parameter must be a comma-separated list of sampler names. "
            f"Got {args.samplers!r} instead.",
            parameter="--samplers",
        )
    samplers = build_samplers(names, parse_sampler_params(args.param))
    comparison = compare_samplers(
        federation,
        args.num_sampled,
        samplers,
        skip_infeasible=not explicit,
        monte_carlo_rounds=args.monte_carlo,
        rng=stream_rng(args.seed, Stream.MONTE_CARLO),
    )
    if args.json:
        out = comparison_to_json(comparison, importance=args.importance)
        out["federation"] = label
        print(json.dumps(out))
    else:
        importance = "p_i = n_i/M" if args.importance == "size" else "p_i = 1/n"
        print(f"federation: {label}")
        print(format_comparison(comparison, importance_label=importance))
    return 0
