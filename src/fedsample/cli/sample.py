"""``fedsample sample``: print the selections a sampler draws, round by round, from a seed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fedsample.cli._app import CommandError, add_command
from fedsample.cli._inputs import add_federation_arguments, build_samplers, federation_from_args, parse_sampler_params
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import sampler_names
from fedsample.serialization import dump_json
from fedsample.stats.montecarlo import MAX_MONTE_CARLO_ROUNDS


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "sample")
    parser.add_argument("sampler", metavar="NAME", nargs="?", help=f"the sampler ({', '.join(sampler_names())})")
    parser.add_argument("--sampler", dest="sampler_flag", metavar="NAME", help="the sampler, as other commands name it")
    add_federation_arguments(parser)
    parser.add_argument("--param", action="append", metavar="SAMPLER.NAME=VALUE", help="a sampler hyperparameter")
    parser.add_argument("--rounds", type=int, default=1, help="number of rounds to draw (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--json", action="store_true", help='print {"rounds": [{"clients": [...], "weights": [...]}, ...]}'
    )
    return "sample", run


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.rounds <= MAX_MONTE_CARLO_ROUNDS:
        raise CommandError(
            f"The '--rounds' parameter must be an int in the range [1, {MAX_MONTE_CARLO_ROUNDS}] (the bound of "
            f"the rounds drawn at one state, as for Monte Carlo). Got {args.rounds} instead.",
            parameter="--rounds",
        )
    if args.seed < 0:
        raise CommandError(
            f"The '--seed' parameter must be a non-negative int. Got {args.seed} instead.", parameter="--seed"
        )
    if (args.sampler is None) == (args.sampler_flag is None):
        given = "both" if args.sampler is not None else "neither"
        rule = "given once, as NAME or as --sampler NAME"
        raise CommandError(f"The '--sampler' parameter must be {rule}. Got {given} instead.", parameter="--sampler")
    federation, _ = federation_from_args(args, seed=args.seed)
    flag = "NAME" if args.sampler is not None else "--sampler"
    (sampler,) = build_samplers([args.sampler or args.sampler_flag], parse_sampler_params(args.param), flag=flag)
    state = sampler.init(federation, args.num_sampled)
    # Each round is printed as it is drawn, nothing buffered: the JSON object is written in pieces
    # (the same text as one dump_json of it), so a long draw shows its first rounds at once.
    if args.json:
        head = dump_json({"sampler": sampler.name, "num_sampled": args.num_sampled, "seed": args.seed, "rounds": []})
        sys.stdout.write(head.removesuffix("]}"))
    for t in range(args.rounds):
        clients, weights = sampler.sample(state, stream_rng(args.seed, Stream.SAMPLING, t)).distinct()
        if args.json:
            separator = ", " if t else ""
            sys.stdout.write(separator + dump_json({"clients": clients.tolist(), "weights": weights.tolist()}))
        else:
            picks = " ".join(f"{c}:{w:.4g}" for c, w in zip(clients.tolist(), weights.tolist(), strict=True))
            print(f"round {t}: {picks}  (sum of weights {sum(weights.tolist()):.6g})")
    if args.json:
        sys.stdout.write("]}\n")
    return 0
