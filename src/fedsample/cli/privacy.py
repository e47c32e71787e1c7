"""``fedsample privacy``: each client's user-level epsilon under several samplers on one federation."""

from __future__ import annotations

import argparse
from typing import Any

from fedsample._validation import Interval, Options, check_param, restate
from fedsample.cli._app import CommandError, add_command
from fedsample.cli._inputs import (
    add_federation_arguments,
    add_sampler_arguments,
    build_samplers,
    federation_from_args,
    flag_options,
    parse_sampler_params,
)
from fedsample.cli.stats import DEFAULT_SAMPLERS  # accounted by default: every one has a fixed design
from fedsample.errors import FedsampleError
from fedsample.privacy import ACCOUNTANTS, exposure_of, noise_for_budget, privacy_cost, rounds_for_budget
from fedsample.privacy.accountant import DELTA, EPSILON, NOISE_MULTIPLIER, ROUNDS
from fedsample.privacy.exposure import ADD_REMOVE, DEFAULT_MAX_GROUPS
from fedsample.privacy.report import cost_to_json, format_cost
from fedsample.serialization import dump_json

DEFAULT_DELTA = 1e-5
MAX_GROUPS = Interval(int, 1, 4096, closed="both")


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "privacy")
    add_federation_arguments(parser)
    add_sampler_arguments(parser, "account", DEFAULT_SAMPLERS)
    parser.add_argument("--seed", type=int, default=0, help="seed of random federations")
    parser.add_argument(
        "--noise-multiplier",
        metavar="Z",
        help="z: the server adds N(0, (z C s)^2 I) once a round (s: the design's largest weight of one inclusion)",
        **flag_options(NOISE_MULTIPLIER),
    )
    parser.add_argument("--rounds", metavar="T", help="rounds of training", **flag_options(ROUNDS))
    parser.add_argument(
        "--delta", metavar="D", default=DEFAULT_DELTA, help=f"delta (default {DEFAULT_DELTA:g})", **flag_options(DELTA)
    )
    parser.add_argument(
        "--epsilon",
        metavar="E",
        help="a budget: with --noise-multiplier, solve for the most rounds; with --rounds, for the least noise",
        **flag_options(EPSILON),
    )
    parser.add_argument(
        "--accountant",
        default="pld",
        help="dp-accounting's pld (default, tight) or rdp",
        **flag_options(Options(ACCOUNTANTS)),
    )
    parser.add_argument(
        "--max-groups",
        type=int,
        default=DEFAULT_MAX_GROUPS,
        metavar="G",
        help=f"accountant computations per sampler; beyond, rates are rounded up (default {DEFAULT_MAX_GROUPS})",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per sampler")
    return "privacy", run


def _checked(args: argparse.Namespace) -> str:
    """Check the flags where they enter; the mode: ``"epsilon"``, ``"rounds"`` or ``"noise"`` (what is solved)."""
    for flag, value, constraint in (
        ("--noise-multiplier", args.noise_multiplier, NOISE_MULTIPLIER),
        ("--rounds", args.rounds, ROUNDS),
        ("--epsilon", args.epsilon, EPSILON),
    ):
        if value is not None:
            check_param(flag, "", value, constraint)
    check_param("--delta", "", args.delta, DELTA)
    check_param("--max-groups", "", args.max_groups, MAX_GROUPS)
    if args.seed < 0:
        raise CommandError(
            f"The '--seed' parameter must be a non-negative int. Got {args.seed} instead.", parameter="--seed"
        )
    given = {"--noise-multiplier": args.noise_multiplier, "--rounds": args.rounds, "--epsilon": args.epsilon}
    if all(value is not None for value in given.values()):
        raise CommandError(
            "The '--epsilon' parameter must be left out when both --noise-multiplier and --rounds are given (it "
            f"solves for one of them). Got {args.epsilon!r} instead.",
            parameter="--epsilon",
        )
    missing = [flag for flag in ("--noise-multiplier", "--rounds") if given[flag] is None]
    if args.epsilon is None and missing:
        raise CommandError(
            f"The {missing[0]!r} parameter must be given: --noise-multiplier and --rounds, or one of them with "
            "--epsilon to solve for the other. Got nothing instead.",
            parameter=missing[0],
        )
    if args.epsilon is not None and len(missing) == 2:
        raise CommandError(
            "The '--epsilon' parameter must come with --noise-multiplier (to solve for the rounds) or --rounds "
            f"(to solve for the noise). Got {args.epsilon!r} alone instead.",
            parameter="--epsilon",
        )
    if args.epsilon is None:
        return "epsilon"
    return "rounds" if args.rounds is None else "noise"


def _samplers(args: argparse.Namespace) -> tuple[list[Any], bool]:
    explicit = args.samplers is not None
    names = [s.strip() for s in args.samplers.split(",")] if explicit else list(DEFAULT_SAMPLERS)
    if explicit and (not names or any(not n for n in names)):
        raise CommandError(
            "The '--samplers' parameter must be a comma-separated list of sampler names. "
            f"Got {args.samplers!r} instead.",
            parameter="--samplers",
        )
    return build_samplers(names, parse_sampler_params(args.param), flag="--samplers"), explicit


def run(args: argparse.Namespace) -> int:
    mode = _checked(args)
    federation, label = federation_from_args(args, seed=args.seed)
    samplers, explicit = _samplers(args)
    exposures, skipped = [], {}
    for sampler in samplers:
        try:
            state = sampler.init(federation, args.num_sampled)
        except FedsampleError as exc:
            if explicit:
                raise
            skipped[sampler.name] = " ".join(str(exc).split())
            continue
        exposures.append((sampler.name, exposure_of(sampler, state, max_groups=args.max_groups)))
    costs = [(name, _cost(exposure, args, mode)) for name, exposure in exposures]
    if args.json:
        print(dump_json([cost_to_json(name, cost) for name, cost in costs]))
        return 0
    print(
        f"federation: {label} ({federation.num_clients} clients), m = {args.num_sampled}, delta = {args.delta:g}, "
        f"accountant {args.accountant}"
    )
    print(f"adjacency: {ADD_REMOVE}; the server adds N(0, (z C s)^2 I) once a round (docs/privacy.md)")
    if mode != "epsilon":
        solved = "the most rounds" if mode == "rounds" else "the least noise multiplier"
        print(f"solved: {solved} with every client's epsilon at most {args.epsilon:g}")
    for name, cost in costs:
        print()
        print(format_cost(name, cost))
    for name, reason in skipped.items():
        print(f"\nskipped {name}: {reason}")
    return 0


def _cost(exposure: Any, args: argparse.Namespace, mode: str) -> Any:
    common = {"delta": args.delta, "accountant": args.accountant}
    z, rounds = args.noise_multiplier, args.rounds
    if mode == "rounds":
        rounds = rounds_for_budget(exposure, noise_multiplier=z, epsilon=args.epsilon, **common)
    elif mode == "noise":
        try:
            z = noise_for_budget(exposure, rounds=rounds, epsilon=args.epsilon, **common)
        except FedsampleError as exc:
            raise restate(exc, "--epsilon", "", noun="parameter") from None
    return privacy_cost(exposure, noise_multiplier=z, rounds=rounds, **common)
