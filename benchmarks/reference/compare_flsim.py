"""fedsample's high-loss, number-of-samples and sequential against FLSim's selectors as released (issue 25).

Runs in fedsample's environment::

    .venv/bin/python benchmarks/reference/compare_flsim.py           # n = 100, m = 10, 50 rounds, 30 seeds
    .venv/bin/python benchmarks/reference/compare_flsim.py --quick   # 10 seeds x 20 rounds

The reference side is ``flsim_selectors.py`` in the side environment of ``make_env_selectors.sh flsim``
(FLSim commit ``82b7fb3``; run here and cached under ``$FEDSAMPLE_REFERENCE_DIR/results``, or read from
``--reference``). fedsample's side replays the same users (``flsim_population.py``) through the
contract, each draw with the stream ``(seed, SAMPLING, t)``:

* **high-loss** with ``inverse_temperature = beta`` (FLSim's ``softmax_temperature``): when a first
  phase is due (:func:`fedsample.samplers.two_phase.phase_due`) every user reports its loss; after
  each round the selected users report their loss at the round's model (what FLSim re-evaluates),
  and then train. Per seed: the share of picks among the top tenth of users by base loss, over the
  first 5 rounds and over all, the mean base loss of the picks, and the distinct users picked. Each
  passes when the paired mean difference over the seeds is within ``4 SE + 5% + floor`` (the same
  populations, independent draws; ``P(|t_29| > 4) = 4e-4`` per statistic when equal in distribution).
* **number-of-samples**: ``DRAWS`` draws on one population; per user, the inclusion frequency against
  FLSim's (two independent samples: ``|z| <= 4.5`` for every user, a false alarm below ``7e-4``
  over 100 users), and the users repeated within a draw (none: both draw without replacement).
  ``md``, which the docs once equated with NumberOfSamples, is shown beside it.
* **sequential**: the users of 12 rounds with ``n = 23``, ``m = 5``, equal to FLSim's.

The exit status is 1 when a default setting is outside its tolerance, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np

from fedsample import Federation, Feedback, Selection
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import HighLossSampler, make_sampler
from fedsample.samplers.two_phase import phase_due

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cached_reference  # noqa: E402
import flsim_population as population  # noqa: E402

Z, RELATIVE, Z_INCLUSION = 4.0, 0.05, 4.5
FLOORS = {
    "top tenth, first 5 rounds": 0.01,
    "top tenth, all rounds": 0.005,
    "base loss of picks": 0.01,
    "distinct users": 0.5,
}


def reference_run(options: argparse.Namespace) -> dict[str, Any]:
    """The released side: ``--reference``, a cached run with the same settings and code, or a new run."""
    return cached_reference.reference_run(
        "flsim", "flsim_selectors.py", "flsim_population.py", options, "compare_flsim.py"
    )


def high_loss_run(params: dict[str, Any], seed: int, n: int, m: int, rounds: int) -> list[list[int]]:
    base = np.array(population.losses(seed, n))
    federation = Federation.from_sizes(population.sizes(seed, n))
    sampler = HighLossSampler(**params)
    state = sampler.init(federation, m)
    trained = np.zeros(n, dtype=np.int64)
    everyone = np.arange(n, dtype=np.int64)
    picks = []
    for t in range(rounds):
        current = base * population.DECAY**trained
        if phase_due(sampler, state) is not None:  # FLSim's first call: every user's loss
            candidates = Selection(clients=everyone, weights=federation.importances)
            state = sampler.update(state, Feedback(round=t, selection=candidates, clients=everyone, losses=current))
        selection = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t))
        clients = np.unique(selection.clients)
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=clients, losses=current[clients]))
        trained[clients] += 1
        picks.append(clients.tolist())
    return picks


def high_loss_statistics(picks: list[list[int]], seed: int, n: int) -> dict[str, float]:
    base = np.array(population.losses(seed, n))
    top = set(np.argsort(-base)[: max(n // 10, 1)].tolist())
    share = [np.mean([c in top for c in round_picks]) for round_picks in picks]
    every = np.concatenate([np.asarray(p) for p in picks])
    return {
        "top tenth, first 5 rounds": float(np.mean(share[:5])),
        "top tenth, all rounds": float(np.mean(share)),
        "base loss of picks": float(base[every].mean()),
        "distinct users": float(np.unique(every).size),
    }


def draw_counts(name: str, sizes: list[int], m: int, draws: int) -> tuple[np.ndarray, int]:
    sampler = make_sampler(name)
    state = sampler.init(Federation.from_sizes(sizes), m)
    counts, repeats = np.zeros(len(sizes), dtype=np.int64), 0
    for t in range(draws):
        clients = sampler.sample(state, stream_rng(0, Stream.SAMPLING, t)).clients
        repeats += clients.size - np.unique(clients).size
        np.add.at(counts, clients, 1)
    return counts, repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--sampled", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="10 seeds x 20 rounds")
    parser.add_argument("--reference", type=pathlib.Path, help="the output of flsim_selectors.py to compare with")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results as JSON")
    options = parser.parse_args(argv)
    if options.quick:
        options.seeds, options.rounds = 10, 20
    start = time.perf_counter()
    reference = reference_run(options)
    settings = reference["settings"]
    n, m, rounds, beta = settings["clients"], settings["sampled"], settings["rounds"], settings["beta"]
    status, out = 0, {"settings": settings}
    print(f"FLSim {reference['source'].split(',')[0]}, torch {reference['torch']}")

    # HighLoss
    print(
        f"\nhigh-loss vs HighLossActiveUserSelector (softmax_temperature = {beta:g}, count_normalization_exponent = 1):"
        f" n = {n}, m = {m}, {rounds} rounds, {len(reference['high_loss'])} seeds;"
        f" tolerance {Z:g} SE + {RELATIVE:.0%} + floor"
    )
    ref_stats = [high_loss_statistics(p, s, n) for s, p in enumerate(reference["high_loss"])]
    names = list(ref_stats[0])
    print(f"{'':52}" + "".join(f"{k:>30}" for k in names))
    print(f"{'FLSim':52}" + "".join(f"{np.mean([r[k] for r in ref_stats]):>30.4f}" for k in names))
    variants = {
        f"inverse_temperature={beta:g} (default: initial evaluation)": {"inverse_temperature": beta},
        f"inverse_temperature={beta:g}, initial_evaluation=False": {
            "inverse_temperature": beta,
            "initial_evaluation": False,
        },
        f"inverse_temperature={1 / beta:g} (FLSim's value inverted)": {"inverse_temperature": 1 / beta},
    }
    out["high_loss"] = {"FLSim": {k: float(np.mean([r[k] for r in ref_stats])) for k in names}}
    for index, (label, params) in enumerate(variants.items()):
        ours = [high_loss_statistics(high_loss_run(params, s, n, m, rounds), s, n) for s in range(len(ref_stats))]
        cells, verdicts = [], {}
        for k in names:
            diff = np.array([o[k] - r[k] for o, r in zip(ours, ref_stats, strict=True)])
            mean, se = float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(diff.size))
            ref = float(np.mean([r[k] for r in ref_stats]))
            within = abs(mean) <= Z * se + RELATIVE * abs(ref) + FLOORS[k]
            verdicts[k] = {
                "fedsample": float(np.mean([o[k] for o in ours])),
                "difference": mean,
                "se": se,
                "within": within,
            }
            cells.append(f"{verdicts[k]['fedsample']:.4f} ({mean:+.4f}{'' if within else ' !'})")
        print(f"{label:52}" + "".join(f"{c:>30}" for c in cells))
        out["high_loss"][label] = verdicts
        if index == 0 and not all(v["within"] for v in verdicts.values()):
            status = 1

    # NumberOfSamples
    nos = reference["number_of_samples"]
    draws, sizes = nos["draws"], nos["sizes"]
    reference_rate = np.asarray(nos["counts"]) / draws
    print(f"\nnumber-of-samples vs NumberOfSamplesActiveUserSelector: {draws} draws of m = {m} from {n} users")
    print(f"{'':22}{'repeated users / 100 draws':>28}{'max |z| inclusion vs FLSim':>30}")
    print(f"{'FLSim':22}{100 * nos['repeats'] / draws:>28.2f}{'':>30}")
    out["number_of_samples"] = {"FLSim repeats per 100 draws": 100 * nos["repeats"] / draws}
    for name in ("number-of-samples", "md"):
        counts, repeats = draw_counts(name, sizes, m, draws)
        rate = counts / draws
        var = (reference_rate * (1 - reference_rate) + np.clip(rate, 0, 1) * (1 - np.clip(rate, 0, 1))) / draws
        z = float(np.max(np.abs(rate - reference_rate) / np.sqrt(np.maximum(var, 1e-300))))
        within = repeats == 0 and z <= Z_INCLUSION
        print(f"{name:22}{100 * repeats / draws:>28.2f}{z:>29.2f}{'' if within else ' !'}")
        out["number_of_samples"][name] = {"repeats per 100 draws": 100 * repeats / draws, "max z": z, "within": within}
        if name == "number-of-samples" and not within:
            status = 1

    # Sequential
    seq = reference["sequential"]
    sampler = make_sampler("sequential")
    state = sampler.init(Federation.from_sizes([1] * seq["clients"]), seq["sampled"])
    ours_seq = []
    for t in range(seq["rounds"]):
        selection = sampler.sample(state, stream_rng(0, Stream.SAMPLING, t))
        ours_seq.append(selection.clients.tolist())
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=np.unique(selection.clients)))
    same = ours_seq == seq["picks"]
    print(
        f"\nsequential vs SequentialActiveUserSelector, n = {seq['clients']}, m = {seq['sampled']}, "
        f"{seq['rounds']} rounds: {'identical' if same else 'DIFFERENT'}"
    )
    out["sequential"] = {"identical": same}
    if not same:
        status = 1
    print(f"('!': outside the tolerance; {time.perf_counter() - start:.1f} s)")
    if options.json is not None:
        options.json.write_text(json.dumps(out, indent=1))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
