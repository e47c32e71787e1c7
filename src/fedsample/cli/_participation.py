"""Command-line options of availability and failures (``fedsample stats --dropout 0.3 ...``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsample._validation import invalid
from fedsample.cli._app import CommandError
from fedsample.cli._inputs import flag_options
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.participation.availability import load_availability_trace
from fedsample.participation.parameters import (
    PARTICIPATION,
    build_availability,
    check_one_availability_model,
    check_rates_beside_a_trace,
    participation_from_values,
)
from fedsample.participation.policies import AGGREGATION_POLICIES
from fedsample.participation.setting import Participation
from fedsample.samplers import Sampler
from fedsample.stats.participation import ParticipationStatistics, format_participation, participation_statistics

__all__ = ["add_participation_arguments", "participation_from_args", "participation_report"]

DEFAULT_ROUNDS = 2000


# The flags set the keys of a config's [participation] table, declared once in its table.
_HELP = {
    "availability": ("A", "each client available with probability A"),
    "availability_trace": ("FILE", "a CSV trace of availability windows"),
    "availability_process": ("KIND", "bernoulli (default), markov or cyclic, of long-run rate A"),
    "availability_label_alpha": ("ALPHA", "rates tied to the labels (needs a data set's labels)"),
    "availability_minimum": ("P", "the floor of the label-tied rates (default 0.02)"),
    "markov_off_to_on": ("Q", "the Markov chain's switch-on probability (default 0.05)"),
    "cyclic_period": ("C", "rounds of a cycle (default 100)"),
    "dropout": ("D", "a selected client fails with probability D"),
    "over_selection": ("O", "ask ceil(m (1 + O)), keep the first m"),
    "policy": ("NAME", "report one policy (default: all)"),
    "return_rates": ("KIND", "known (default) or estimated"),
    "redraws": ("K", "tries to replace an unavailable draw (default 10)"),
    "fedau_cutoff": ("K", "FedAU's interval cutoff (default 100000)"),
    "mifa_variant": ("NAME", "MIFA's memory: zeros (default) or released (its authors' warm-up)"),
}


def add_participation_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "availability and failures",
        "any of these adds a Monte-Carlo report of each aggregation policy's bias (docs/failures.md)",
    )
    for name, parameter in PARTICIPATION.parameters.items():
        metavar, text = _HELP[name]
        options = {k: v for k, v in flag_options(parameter.constraint).items() if k == "type"}
        group.add_argument(f"--{name.replace('_', '-')}", metavar=metavar, help=text, **options)


def participation_from_args(args: argparse.Namespace) -> Participation | None:
    """The setting the options describe, or ``None`` when none of them is given.

    Each value is checked against its declared constraint; ``--policy`` chooses the policy reported.
    """
    given = {name: getattr(args, name) for name in PARTICIPATION.parameters if getattr(args, name) is not None}
    if not given:
        return None
    for name, value in given.items():
        constraint = PARTICIPATION.parameters[name].constraint
        if not constraint.is_satisfied_by(value):
            raise _bad(name, constraint, value)
    values = {**PARTICIPATION.defaults, **given}
    trace = values["availability_trace"]
    flag = lambda key: f"--{key.replace('_', '-')}"  # noqa: E731
    # The rules across the keys, as a config's [participation] table has them (the rates' once the trace is read).
    _restated(check_one_availability_model, values, name=flag, owner="")
    if values["availability_label_alpha"] is not None:
        raise _bad(
            "availability_label_alpha", "left out: fedsample stats has no labels", values["availability_label_alpha"]
        )
    if trace is None:
        return participation_from_values(values, build_availability(values))
    try:
        availability = load_availability_trace(trace)
    except FedsampleError as exc:
        raise CommandError(
            f"The '--availability-trace' parameter must name a valid trace: {exc}", parameter="--availability-trace"
        ) from None
    _restated(check_rates_beside_a_trace, values, policies=_reported(args), name=flag, owner="")
    return participation_from_values(values, availability)


def _restated(check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """``check(*args, **kwargs)``, its error a :class:`CommandError` (one line, exit code 2)."""
    try:
        check(*args, **kwargs)
    except FedsampleError as exc:
        raise CommandError(str(exc), parameter=exc.parameter, constraint=exc.constraint, value=exc.value) from None


def _reported(args: argparse.Namespace) -> tuple[str, ...]:
    """The policies ``fedsample stats`` reports: ``--policy``, or every one that corrects one round."""
    return AGGREGATION_POLICIES if args.policy is None else (args.policy,)


def _bad(name: str, constraint: object, value: Any) -> CommandError:
    error = invalid(f"--{name.replace('_', '-')}", "", constraint, value)
    return CommandError(str(error), parameter=error.parameter, constraint=constraint, value=value)


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
    policies = _reported(args)
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
