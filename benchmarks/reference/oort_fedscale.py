"""FedScale 1.0's Oort selector on made-up populations: the reference side of ``compare_oort.py``.

Runs in the side environment that ``make_env.sh`` builds (numpy 1.x, FedScale's files unmodified),
never in fedsample's::

    /tmp/fedsample-reference/venv-fedscale/bin/python benchmarks/reference/oort_fedscale.py \\
        --clients 200 --sampled 10 --rounds 200 --seeds 30 --out /tmp/fedsample-reference/oort.json

For each seed it builds the population of ``population.py``, registers it with FedScale's
``ClientManager`` in ``oort`` mode (which creates ``thirdparty.oort``'s ``_training_selector``), and
plays FedScale's simulated aggregator round by round as ``fedscale/cloud/aggregation/aggregator.py``
does: ask for ``int(K * overcommitment)`` clients, keep the ``K`` fastest, report each kept
client's utility and round time, and at the start of the next round give the stragglers the
round's mean utility. The hyperparameters are FedScale's argparse defaults, read from the extracted
``config_parser.py`` (``--set NAME=VALUE`` overrides one). It writes, per seed, the population with
the round times FedScale computed, and per round the picks, who ran, the stragglers, the explored
and exploited counts, the pacer's level (``round_threshold``, percent) and the preferred duration.

``--variant`` says what happens to FedScale's exploration list once no unexplored client remains:

* ``released``: as shipped; the last list of explored-for-the-first-time clients is returned again
  every round, alongside the exploited ones (the defect of issue 25);
* ``reset``: the list is emptied before every selection, nothing else changes (the round then has
  ``num - int(eps num)`` picks once everyone is explored);
* ``refill`` (default): emptied too, and exploration slots that no unexplored client can take go to
  exploitation, so every round has ``num`` picks (done by lowering the selector's exploration rate
  for that one call, so that FedScale's own code computes the counts; restored afterwards).
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import pathlib
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from population import UPDATE_KBITS, keep_fastest, make_population, statistical_utility, training_loss

FEDSCALE_COMMIT = "7ec441c2afa99510535adebe155d89fa8bb2c637"
VARIANTS = ("refill", "reset", "released")
DEFAULT_SOURCE = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference")) / "fedscale-src"
# The parser's defaults this harness reads (and reports); the others exist but do not reach the selector.
OORT_KNOBS = (
    "exploration_factor",
    "exploration_decay",
    "exploration_min",
    "exploration_alpha",
    "round_penalty",
    "cut_off_util",
    "clip_bound",
    "pacer_step",
    "pacer_delta",
    "round_threshold",
    "sample_window",
    "blacklist_rounds",
    "blacklist_max_len",
    "overcommitment",
    "local_steps",
    "batch_size",
    "filter_less",
    "filter_more",
    "sample_seed",
)


def parser_defaults(config_parser: pathlib.Path) -> dict[str, object]:
    """Every ``parser.add_argument("--name", ..., default=<literal>)`` of FedScale's ``config_parser.py``,
    read from its syntax tree (importing it would parse this script's command line)."""
    defaults: dict[str, object] = {}
    for node in ast.walk(ast.parse(config_parser.read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
            continue
        if not node.args or not isinstance(node.args[0], ast.Constant):
            continue
        name = str(node.args[0].value).lstrip("-")
        keywords = {k.arg: k.value for k in node.keywords}
        if "default" not in keywords:
            continue
        try:
            value = ast.literal_eval(keywords["default"])
        except ValueError:  # a name such as commons.SIMULATION_MODE: not a knob of the selector
            continue
        kind = keywords.get("type")
        # argparse passes a default through ``type`` only when it is a string, as here.
        if isinstance(kind, ast.Name) and kind.id in ("int", "float") and isinstance(value, str):
            value = {"int": int, "float": float}[kind.id](value)
        defaults[name] = value
    return defaults


def run_seed(seed: int, args: argparse.Namespace, options: argparse.Namespace) -> dict[str, object]:
    """One run of ``options.rounds`` rounds on the population of ``seed``."""
    from fedscale.cloud.client_manager import ClientManager

    population = make_population(seed, options.clients)
    n, k = options.clients, options.sampled
    # The population depends on the seed only; the draws on seed and --draw-offset (a second set of
    # draws on the same populations is how compare_oort.py --self-check measures the noise).
    draw_seed = seed + 1_000_003 * options.draw_offset
    manager = ClientManager("oort", args, sample_seed=draw_seed)  # its first, random, round
    # FedScale's selector seeds numpy's global legacy stream with a constant (233) when it is built;
    # the harness seeds it per run so that runs differ. Its draws are np.random.choice on that stream.
    np.random.seed(draw_seed)  # noqa: NPY002
    selector = manager.ucb_sampler
    task = {"batch_size": args.batch_size, "local_steps": args.local_steps}
    task.update(upload_size=UPDATE_KBITS, download_size=UPDATE_KBITS)
    for i in range(n):  # FedScale's ids start at 1 (Aggregator.client_register_handler)
        speed = {"computation": population["compute_ms"][i], "communication": population["bandwidth_kbps"][i]}
        manager.register_client(1, i + 1, size=population["sizes"][i], speed=speed)
        manager.registerDuration(i + 1, **task)
    durations = []
    for i in range(n):
        cost = manager.get_completion_time(i + 1, **task)
        durations.append(cost["computation"] + cost["communication"])
    by_id = [0.0, *durations]  # indexed by FedScale's id
    samples_per_round = args.local_steps * args.batch_size
    num = int(k * args.overcommitment)
    trained = [0] * n
    stragglers: list[int] = []
    utilities: list[float] = []
    rounds = []
    for round_ in range(1, options.rounds + 1):
        # Aggregator.round_completion_handler: last round's stragglers get its mean utility, stamped now.
        mean_utility = sum(utilities) / max(1, len(utilities))
        for client in stragglers:
            manager.register_feedback(client, mean_utility, time_stamp=round_, duration=by_id[client], success=False)
        unexplored = set(selector.unexplored)
        oort_call = manager.count >= 1 and n > num  # ClientManager.select_participants: Oort from its 2nd call
        restore = _apply_variant(selector, options.variant, num) if oort_call else None
        picks = [int(c) for c in manager.select_participants(num, cur_time=0.0)]  # numpy ints from its draws
        if restore is not None:
            selector.exploration, selector.exploration_min = restore
        ran, stragglers, _ = keep_fastest(sorted(picks), by_id, k)
        utilities = []
        for client in ran:
            loss = training_loss(population["base_loss"][client - 1], seed, client - 1, round_, trained[client - 1])
            trained[client - 1] += 1
            utility = statistical_utility(population["sizes"][client - 1], loss, samples_per_round)
            manager.register_feedback(client, utility, auxi=loss, time_stamp=round_, duration=by_id[client])
            utilities.append(utility)
        preferred = selector.round_prefer_duration if oort_call else float("inf")
        rounds.append(
            {
                "picks": [c - 1 for c in picks],
                "ran": [c - 1 for c in ran],
                "stragglers": [c - 1 for c in stragglers],
                "explore": len(selector.exploreClients) if oort_call else len(picks),
                "exploit": len(selector.exploitClients) if oort_call else 0,
                "new": sum(1 for c in set(picks) if c in unexplored),
                "level": float(selector.round_threshold),
                "preferred_duration": None if preferred == float("inf") else float(preferred),
                "epsilon": float(selector.exploration) if oort_call else None,
            }
        )
    return {"seed": seed, "population": {**population, "durations": durations}, "rounds": rounds}


def _apply_variant(selector: Any, variant: str, num: int) -> tuple[float, float] | None:
    """Prepare the selector's next ``getTopK`` call for ``variant``; what to restore afterwards."""
    if variant == "released":
        return None
    selector.exploreClients = []  # the fix: no stale exploration list
    if variant == "reset":
        return None
    # refill: getTopK decays epsilon first, then explores int(num * epsilon); with fewer unexplored
    # clients than that, make int(num * epsilon) exactly their number for this call.
    upcoming = max(selector.exploration * selector.decay_factor, selector.exploration_min)
    available = len(selector.unexplored)
    if available >= int(num * upcoming):
        return None
    saved_min = selector.exploration_min
    selector.exploration, selector.exploration_min = 0.0, (available + 0.5) / num
    return upcoming, saved_min


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fedscale-src", type=pathlib.Path, default=DEFAULT_SOURCE, help="make_env.sh's fedscale-src")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--sampled", type=int, default=10, help="K, FedScale's num_participants")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--variant", choices=VARIANTS, default="refill")
    parser.add_argument("--draw-offset", type=int, default=0, help="other random draws on the same populations")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a FedScale default")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    options = parser.parse_args(argv)

    source = options.fedscale_src.resolve()
    if not (source / "thirdparty" / "oort" / "oort.py").is_file():
        parser.error(f"no FedScale sources at {source}: run benchmarks/reference/make_env.sh first")
    sys.path.insert(0, str(source))
    logging.basicConfig(level=logging.WARNING)  # the selector logs every round at INFO
    defaults = parser_defaults(source / "fedscale" / "cloud" / "config_parser.py")
    for item in options.set:
        name, _, raw = item.partition("=")
        if name not in defaults:
            parser.error(f"--set {item!r}: FedScale's parser has no default named {name!r}")
        defaults[name] = type(defaults[name])(raw) if defaults[name] is not None else raw
    args = argparse.Namespace(**defaults)
    args.num_participants = options.sampled
    if options.clients <= int(options.sampled * args.overcommitment):
        parser.error("--clients must exceed int(sampled * overcommitment), or FedScale returns everyone")

    start = time.perf_counter()
    runs = [run_seed(seed, args, options) for seed in range(options.first_seed, options.first_seed + options.seeds)]
    result = {
        "reference": "FedScale Oort (ClientManager + thirdparty.oort._training_selector)",
        "fedscale_commit": FEDSCALE_COMMIT,
        "source": (source / "SOURCE.txt").read_text().strip() if (source / "SOURCE.txt").is_file() else str(source),
        "numpy": np.__version__,
        "variant": options.variant,
        "config": {
            "clients": options.clients,
            "sampled": options.sampled,
            "rounds": options.rounds,
            "seeds": options.seeds,
            "first_seed": options.first_seed,
            "draw_offset": options.draw_offset,
            "num_selected": int(options.sampled * args.overcommitment),
            "samples_per_round": args.local_steps * args.batch_size,
        },
        "defaults": {name: getattr(args, name) for name in OORT_KNOBS},
        "runs": runs,
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result))
    seconds = time.perf_counter() - start
    print(f"{options.seeds} seeds x {options.rounds} rounds ({options.variant}) in {seconds:.1f} s -> {options.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
