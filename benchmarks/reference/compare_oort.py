"""fedsample's Oort against FedScale 1.0's on the same made-up populations and seeds (issue 25, item 5).

Runs in fedsample's environment::

    .venv/bin/python benchmarks/reference/compare_oort.py                      # oort, defaults
    .venv/bin/python benchmarks/reference/compare_oort.py --sampler oort --param exploration_min=0.3
    .venv/bin/python benchmarks/reference/compare_oort.py --variant released --quick

The reference side comes from ``oort_fedscale.py`` in the side environment of ``make_env.sh``: given
``--reference FILE`` it reads that file, otherwise it runs the driver (cached under
``$FEDSAMPLE_REFERENCE_DIR``, default ``/tmp/fedsample-reference``). fedsample's side replays each
seed on the population and the round times the driver recorded, through the same round mechanics:
the sampler is asked for ``int(K * overcommitment)`` clients (FedScale's over-commitment), the ``K``
fastest run and report ``losses``, ``loss_squares`` and ``round_times``, the others are
``timed_out`` after their full round time. The draw of round ``r`` uses
``stream_rng(seed, Stream.SAMPLING, r)``. If the sampler's ``init`` takes a ``durations`` keyword
it gets every client's round time up front, as FedScale's selector has them from registration
(``--no-durations`` withholds them).

Every statistic is computed per seed by one function for both sides, and compared by the paired
difference over the seeds (same population, independent draws). A statistic passes when

    |mean(fedsample - FedScale)| <= z * SE + relative * |mean(FedScale)| + floor

with ``SE`` the standard error of the paired differences, ``z = 4`` and ``relative = 0.05`` by
default and a per-statistic ``floor`` (half a client for counts, half a percentage point for
shares...). For two samplers equal in distribution the mean difference over 30 seeds divided by
its SE follows a t distribution with 29 degrees of freedom: ``P(|t| > 4) = 4e-4`` per statistic,
about 1% over the 21 statistics together. The relative term applies to the continuous statistics
only (shares, round times, T): it keeps a difference of a few percent that is in no single rule from
failing. Counts that FedScale's rules fix round by round (explored clients, distinct clients, pacer
levels) get none: one client more is a different rule. The floors keep statistics that are equal on
almost every seed (SE near 0) from failing on a rounding. ``--self-check OFFSET`` compares FedScale
with itself under other draws on the same populations, the check that the tolerance does not fail
an identical selector. A departure of the size issue 25 found (2.7x, 35%) is tens of tolerances
away. The exit status is 1 when any statistic is outside its tolerance, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsample import Federation, Feedback, make_sampler
from fedsample._keyvalue import parse_key_value
from fedsample.errors import FedsampleError
from fedsample.rng import Stream, stream_rng

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from population import keep_fastest, training_loss

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
# Where a sampler's state keeps the pacer's level, and the factor that turns it into a percentage.
LEVEL_FIELDS = {"round_threshold": 1.0, "percentile": 1.0, "quantile": 100.0}

Rounds = list[dict[str, Any]]


def reference_run(options: argparse.Namespace, draw_offset: int = 0) -> dict[str, Any]:
    """The driver's output: ``--reference``, a cached run with the same settings and code, or a new run."""
    if options.reference is not None and draw_offset == 0:
        return dict(json.loads(options.reference.read_text()))
    code = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in ("oort_fedscale.py", "population.py")))
    name = (
        f"oort_fedscale_{options.variant}_n{options.clients}_K{options.sampled}_R{options.rounds}"
        f"_s{options.first_seed}-{options.first_seed + options.seeds - 1}_d{draw_offset}_{code.hexdigest()[:10]}.json"
    )
    cached = REFERENCE_DIR / "results" / name
    if not cached.is_file():
        python = REFERENCE_DIR / "venv-fedscale" / "bin" / "python"
        if not python.is_file():
            sys.exit(f"compare_oort.py: no side environment at {REFERENCE_DIR}: run benchmarks/reference/make_env.sh")
        command = [
            str(python),
            str(HERE / "oort_fedscale.py"),
            *("--fedscale-src", str(REFERENCE_DIR / "fedscale-src")),
            *("--clients", str(options.clients), "--sampled", str(options.sampled)),
            *("--rounds", str(options.rounds), "--seeds", str(options.seeds)),
            *("--first-seed", str(options.first_seed), "--variant", options.variant),
            *("--draw-offset", str(draw_offset), "--out", str(cached)),
        ]
        subprocess.run(command, check=True)
    return dict(json.loads(cached.read_text()))


def fedsample_run(
    sampler: Any,
    run: dict[str, Any],
    config: dict[str, Any],
    level_fields: dict[str, float],
    *,
    durations_up_front: bool,
) -> Rounds:
    """The sampler through the rounds of one reference ``run``, recorded as the driver records them
    (``durations_up_front``: hand every client's round time to ``init`` when it takes them)."""
    population, seed = run["population"], int(run["seed"])
    durations = population["durations"]
    num_kept = int(config["sampled"])
    init_extra = {}
    if durations_up_front and "durations" in inspect.signature(sampler.init).parameters:
        init_extra["durations"] = np.asarray(durations)
    state = sampler.init(Federation.from_sizes(population["sizes"]), int(config["num_selected"]), **init_extra)
    trained = [0] * len(durations)
    seen: set[int] = set()
    rounds: Rounds = []
    for round_ in range(1, int(config["rounds"]) + 1):
        preferred = getattr(state, "preferred_duration", None)
        level = next((getattr(state, f) * scale for f, scale in level_fields.items() if hasattr(state, f)), None)
        selection = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, round_))
        picks = [int(c) for c in selection.clients]
        ran, stragglers, _ = keep_fastest(sorted(picks), durations, num_kept)
        losses: dict[int, float] = {}
        for client in ran:
            losses[client] = training_loss(population["base_loss"][client], seed, client, round_, trained[client])
            trained[client] += 1
        returned = sorted(losses)
        late = sorted(set(stragglers) - set(losses))
        feedback = Feedback(
            round=round_ - 1,
            selection=selection,
            clients=np.asarray(returned, dtype=np.int64),
            losses=np.asarray([losses[c] for c in returned]),
            loss_squares=np.asarray([losses[c] ** 2 for c in returned]),
            round_times=np.asarray([durations[c] for c in returned]),
            timed_out=np.asarray(late, dtype=np.int64),
            timed_out_seconds=np.asarray([durations[c] for c in late]),
        )
        state = sampler.update(state, feedback)
        rounds.append(
            {
                "picks": picks,
                "new": len(set(picks) - seen),
                "level": None if level is None else float(level),
                "preferred_duration": None if preferred is None or math.isinf(preferred) else float(preferred),
                "missing_duration": preferred is None,
            }
        )
        seen.update(picks)
    return rounds


def top_decile(values: list[float]) -> set[int]:
    order = sorted(range(len(values)), key=lambda i: -values[i])
    return set(order[: max(1, len(values) // 10)])


# Each statistic: its label, its absolute slack (the tolerance's floor) and whether the slack relative
# to FedScale's mean applies. Counts that FedScale's rules fix round by round (explored clients,
# distinct clients, pacer levels in steps of 5) get no relative slack: one client more is a different
# rule. A key "name@r" is the statistic "name" at round r.
STATISTICS = {
    "picks": ("picks per round (rounds 2..R)", 0.5, False),
    "top_stat": ("share of picks in top decile by statistical utility", 0.005, True),
    "top_stat_late": ("  same, rounds R/2+1..R", 0.005, True),
    "top_system": ("share of picks in top decile by utility x penalty", 0.005, True),
    "duration": ("mean duration of the picks (s)", 0.0, True),
    "duration_late": ("  same, rounds R/2+1..R", 0.0, True),
    "distinct": ("distinct clients picked by round {r}", 0.5, False),
    "window": ("distinct clients in the 20 rounds up to round {r}", 0.5, False),
    "new": ("explored (never picked before) in round {r}", 0.5, False),
    "all_explored": ("round by which every client was picked", 0.5, False),
    "pacer_steps": ("pacer steps (changes of the level)", 0.25, False),
    "first_step": ("round of the first pacer step", 1.0, False),
    "level": ("pacer level at round R (percent)", 0.5, False),
    "preferred": ("preferred duration T at round {r} (s)", 0.0, True),
}


def label(key: str) -> str:
    name, _, round_ = key.partition("@")
    return STATISTICS[name][0].format(r=round_)


def run_statistics(
    rounds: Rounds, population: dict[str, Any], config: dict[str, Any], defaults: dict[str, Any]
) -> dict[str, float]:
    """Every compared statistic of one run (one seed), from its per-round records."""
    n, total = len(population["sizes"]), len(rounds)
    durations = population["durations"]
    cap = int(config["samples_per_round"])
    # True utilities: the statistical utility under the initial model (before any training), and
    # that times Oort's system penalty at FedScale's starting preferred duration.
    statistical = [min(s, cap) * b for s, b in zip(population["sizes"], population["base_loss"], strict=True)]
    ordered = sorted(durations)
    start = ordered[min(int(n * float(defaults["round_threshold"]) / 100.0), n - 1)]
    penalty = float(defaults["round_penalty"])
    system = [u * min(1.0, start / d) ** penalty for u, d in zip(statistical, durations, strict=True)]
    top_statistical, top_system = top_decile(statistical), top_decile(system)
    late = total // 2

    def share(top: set[int], first: int = 0) -> float:
        entries = [c for r in rounds[first:] for c in r["picks"]]
        return sum(c in top for c in entries) / max(1, len(entries))

    def mean_duration(first: int = 0) -> float:
        entries = [durations[c] for r in rounds[first:] for c in r["picks"]]
        return sum(entries) / max(1, len(entries))

    stats: dict[str, float] = {
        "picks": sum(len(r["picks"]) for r in rounds[1:]) / max(1, total - 1),
        "top_stat": share(top_statistical),
        "top_stat_late": share(top_statistical, late),
        "top_system": share(top_system),
        "duration": mean_duration(),
        "duration_late": mean_duration(late),
    }
    checkpoints = sorted({r for r in (10, 50, 100) if r <= total} | {total})
    seen: set[int] = set()
    all_explored = total + 1
    for index, record in enumerate(rounds, start=1):
        seen.update(record["picks"])
        if index == min(10, total):
            stats[f"distinct@{index}"] = float(len(seen))
        if index in checkpoints and index >= 20:  # how concentrated the picks are once exploration is done
            stats[f"window@{index}"] = float(len({c for r in rounds[index - 20 : index] for c in r["picks"]}))
        if len(seen) == n and all_explored > total:
            all_explored = index
    for index in (2, 5, 10):
        if index <= total:
            stats[f"new@{index}"] = float(rounds[index - 1]["new"])
    stats["all_explored"] = float(all_explored)
    levels = [r["level"] for r in rounds[1:]]  # round 1 is FedScale's random round
    if levels and all(level is not None for level in levels):
        steps = [i + 2 for i in range(1, len(levels)) if levels[i] != levels[i - 1]]
        stats["pacer_steps"] = float(len(steps))
        stats["first_step"] = float(steps[0] if steps else total + 1)
        stats["level"] = float(levels[-1])
    else:  # the sampler's state has no level this script knows (see --level-field)
        stats["pacer_steps"] = stats["first_step"] = stats["level"] = math.nan
    for index in checkpoints:
        record = rounds[index - 1]
        value = record["preferred_duration"]
        if record.get("missing_duration", False):
            stats[f"preferred@{index}"] = math.nan
        else:
            stats[f"preferred@{index}"] = math.inf if value is None else float(value)
    return stats


def compare(
    reference: list[dict[str, float]], ours: list[dict[str, float]], z: float, relative: float
) -> list[dict[str, Any]]:
    """Per statistic: both means and SEs, the paired difference, its tolerance and the verdict."""
    rows = []
    for name in reference[0]:
        left = np.asarray([r[name] for r in reference], dtype=float)
        right = np.asarray([o.get(name, math.nan) for o in ours], dtype=float)
        row: dict[str, Any] = {"statistic": label(name), "key": name}
        row.update(fedscale=_mean_se(left), fedsample=_mean_se(right))
        if np.isnan(right).any() or np.isnan(left).any():
            row.update(difference=None, tolerance=None, ok=False, note="not observable in the sampler's state")
        elif np.isinf(left).any() or np.isinf(right).any():
            same = bool(np.array_equal(np.isinf(left), np.isinf(right)))
            row.update(difference=None, tolerance=None, ok=same, note="infinite on some seeds")
        else:
            diff = right - left
            se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0
            _, floor, proportional = STATISTICS[name.partition("@")[0]]
            tolerance = z * se + (relative * abs(float(left.mean())) if proportional else 0.0) + floor
            mean = float(diff.mean())
            row.update(difference=(mean, se), tolerance=tolerance, ok=abs(mean) <= tolerance)
        rows.append(row)
    return rows


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size != values.size:
        return (math.inf if np.isinf(values).any() else math.nan, math.nan)
    se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
    return float(values.mean()), se


def print_table(rows: list[dict[str, Any]], header: str, out: Callable[[str], None] = print) -> None:
    out(header)
    out(f"{'statistic':52} {'FedScale':>18} {'candidate':>18} {'difference':>18} {'tolerance':>9}  verdict")
    for row in rows:
        left, right = (f"{m:9.3f} ±{s:6.3f}" for m, s in (row["fedscale"], row["fedsample"]))
        if row["difference"] is None:
            diff, tol = "-", "-"
        else:
            diff, tol = f"{row['difference'][0]:+9.3f} ±{row['difference'][1]:6.3f}", f"{row['tolerance']:9.3f}"
        verdict = "ok" if row["ok"] else "OUTSIDE"
        note = f"  ({row['note']})" if "note" in row else ""
        out(f"{row['statistic']:52} {left:>18} {right:>18} {diff:>18} {tol:>9}  {verdict}{note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sampler", default="oort", help="the fedsample sampler's registered name")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a hyperparameter")
    parser.add_argument("--reference", type=pathlib.Path, help="oort_fedscale.py's output (else run or reuse one)")
    parser.add_argument("--variant", choices=("refill", "reset", "released"), default="refill")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--sampled", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="10 seeds of 60 rounds (a smoke run)")
    parser.add_argument("--z", type=float, default=4.0, help="standard errors of the paired difference allowed")
    parser.add_argument("--relative", type=float, default=0.05, help="slack relative to FedScale's mean")
    parser.add_argument(
        "--level-field", action="append", default=[], metavar="NAME=SCALE", help="a state field with the pacer's level"
    )
    parser.add_argument(
        "--self-check",
        type=int,
        default=0,
        metavar="OFFSET",
        help="compare FedScale with itself under other random draws (the tolerance's false-failure check)",
    )
    parser.add_argument(
        "--no-durations",
        action="store_true",
        help="do not hand the round times to the sampler's init (it learns them from feedback only)",
    )
    parser.add_argument("--json-out", type=pathlib.Path, help="write the table as JSON too")
    options = parser.parse_args(argv)
    if options.quick:
        options.seeds, options.rounds = 10, 60

    reference = reference_run(options)
    config, defaults = reference["config"], reference["defaults"]
    # The runs' settings are the reference's (it may come from --reference): a second set of draws
    # for --self-check must match them.
    options.variant = reference["variant"]
    for name in ("clients", "sampled", "rounds", "seeds", "first_seed"):
        setattr(options, name, int(config[name]))
    left = [run_statistics(run["rounds"], run["population"], config, defaults) for run in reference["runs"]]
    start = time.perf_counter()
    if options.self_check:
        candidate = f"FedScale with other draws (--draw-offset {options.self_check})"
        other = reference_run(options, draw_offset=options.self_check)
        ours = [run["rounds"] for run in other["runs"]]
    else:
        params = dict(parse_key_value(item, flag="--param") for item in options.param)
        sampler = make_sampler(options.sampler, **params)
        candidate = f"fedsample {sampler!r}" + (", round times from feedback only" if options.no_durations else "")
        level_fields = dict(LEVEL_FIELDS)
        for item in options.level_field:
            name, value = parse_key_value(item, flag="--level-field")
            level_fields = {name: float(str(value)), **{k: v for k, v in level_fields.items() if k != name}}
        ours = [
            fedsample_run(sampler, run, config, level_fields, durations_up_front=not options.no_durations)
            for run in reference["runs"]
        ]
    seconds = time.perf_counter() - start
    right = [
        run_statistics(rounds, run["population"], config, defaults)
        for rounds, run in zip(ours, reference["runs"], strict=True)
    ]
    rows = compare(left, right, options.z, options.relative)
    header = (
        f"FedScale {reference['fedscale_commit'][:7]} Oort ({reference['variant']}) vs {candidate}: "
        f"n={config['clients']}, K={config['sampled']} kept of {config['num_selected']} selected, "
        f"{config['rounds']} rounds, {len(reference['runs'])} seeds; tolerance {options.z:g} SE + "
        f"{options.relative:g} x |FedScale| + floor (candidate side {seconds:.1f} s)"
    )
    print_table(rows, header)
    failed = [row["key"] for row in rows if not row["ok"]]
    outside = " (outside: " + ", ".join(failed) + ")" if failed else ""
    print(f"{len(rows) - len(failed)} of {len(rows)} statistics within tolerance{outside}")
    if options.json_out is not None:
        options.json_out.write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except FedsampleError as error:  # a bad --sampler or --param: one line, as fedsample's CLI does
        print(f"compare_oort.py: {error}", file=sys.stderr)
        raise SystemExit(2) from None
