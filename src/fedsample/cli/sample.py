"""``fedsample sample``: print the selections a sampler draws, round by round, from a seed."""

from __future__ import annotations

import argparse
from typing import Any

from fedsample.cli._app import CommandError, add_command
from fedsample.cli._inputs import add_federation_arguments, build_samplers, federation_from_args, parse_sampler_params
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import sampler_names
from fedsample.serialization import dump_json


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "sample")
    parser.add_argument("sampler", metavar="NAME", help=f"the sampler ({', '.join(sampler_names())})")
    add_federation_arguments(parser)
    parser.add_argument("--param", action="append", metavar="SAMPLER.NAME=VALUE", help="a sampler hyperparameter")
    parser.add_argument("--rounds", type=int, default=1, help="number of rounds to draw (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--json", action="store_true", help='print {"rounds": [{"clients": [...], "weights": [...]}, ...]}'
    )
    return "sample", run


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.rounds <= 2**63 - 1:
        raise CommandError(
            f"The '--rounds' parameter must be an int in the range [1, 2**63 - 1]. Got {args.rounds} instead.",
            parameter="--rounds",
        )
    if args.seed < 0:
        raise CommandError(
            f"The '--seed' parameter must be a non-negative int. Got {args.seed} instead.", parameter="--seed"
        )
    federation, _ = federation_from_args(args, seed=args.seed)
    (sampler,) = build_samplers([args.sampler], parse_sampler_params(args.param))
    state = sampler.init(federation, args.num_sampled)
    rounds = []
    for t in range(args.rounds):
        clients, weights = sampler.sample(state, stream_rng(args.seed, Stream.SAMPLING, t)).distinct()
        rounds.append({"clients": clients.tolist(), "weights": weights.tolist()})
    if args.json:
        print(
            dump_json({"sampler": sampler.name, "num_sampled": args.num_sampled, "seed": args.seed, "rounds": rounds})
        )
    else:
        for t, r in enumerate(rounds):
            picks = " ".join(f"{c}:{w:.4g}" for c, w in zip(r["clients"], r["weights"], strict=True))
            print(f"round {t}: {picks}  (sum of weights {sum(r['weights']):.6g})")
    return 0
