"""The simulated clock's overhead on a round of the engine benchmark, measured in one run.

The round of ``bench_engine.py``'s settings (``mnist-mlp``: paper 000's MNIST round; ``digits-softmax``:
a small model, where a fixed per-round cost weighs the most) is timed by fedsample's batched
backend twice, alternating in the same process: without a system model, and with one
(``SystemModel()``: log-normal speeds and links, no deadline, over-selection ``o = 0.3`` in both, so
the clock orders the replies by simulated time where the plain run hashes them). Both train the
same number of clients, so the difference is the clock's work: the round times of the asked
clients, the reply order and three metrics. Reported: the median seconds per round of each, the
median over the alternations of each pair's ratio ``with / without - 1`` (the end-to-end overhead;
noisy on a shared machine), and the clock's own work per round timed alone (round times and
settling with them, less settling without them), as a fraction of the round. Target (issue 15
item 7): under 5%. A deadline is not part of the comparison: late clients are not kept, so a run
with one trains fewer clients and is faster; ``--deadline`` adds that run as a third line.

Run: ``python benchmarks/bench_clock.py`` (``--rounds``, ``--scenario``, ``--repeats``).
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import LR, SCENARIOS


def _rounds(scenario: str, rounds: int, clock: bool, deadline: bool = False) -> np.ndarray:
    """Seconds of each round of one ``simulate`` call (after a one-round warm-up)."""
    from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate
    from fedsample.participation import Participation
    from fedsample.participation.system import SystemModel
    from fedsample.samplers import MDSampler

    sc = SCENARIOS[scenario]
    data = sc["data"]()
    spec = ModelSpec("mlp" if sc["hidden"] else "softmax", (sc["features"],), sc["classes"], hidden=sc["hidden"] or 50)
    system = SystemModel(compute=1e-3, compute_sigma=1.0) if clock else None
    if deadline:  # a deadline at the median client's round time: some clients are late every round
        model = SystemModel(compute=1e-3, compute_sigma=1.0)
        num_parameters = sc["features"] * (sc["hidden"] or sc["classes"]) + (
            sc["hidden"] * sc["classes"] if sc["hidden"] else 0
        )
        times = model.clients(data.num_clients, 0).round_times(
            np.arange(data.num_clients), sc["steps"] * sc["batch"], num_parameters, model.reference_parameters
        )
        system = SystemModel(compute=1e-3, compute_sigma=1.0, deadline=float(np.median(times)))
    participation = Participation(over_selection=0.3, system=system)
    config: dict[str, Any] = {
        "num_sampled": sc["m"],
        "local_steps": sc["steps"],
        "batch_size": sc["batch"],
        "local_lr": LR,
        "eval_every": 10**6,
    }
    runs = [RunSpec(MDSampler(), seed=0)]
    simulate(data, spec, runs, TrainingConfig(rounds=1, **config), participation=participation)
    results = simulate(data, spec, runs, TrainingConfig(rounds=rounds, **config), participation=participation)
    history = results[0].history
    if clock:
        missed = history.missed_deadline
        assert missed is not None, "no clock"
        assert (missed.sum() > 0) == deadline, "a deadline must make clients late, and only a deadline"
    return np.asarray(history.round_seconds)


def clock_work(scenario: str) -> float:
    """Seconds of the clock's own work in one round: round times plus settling with them, less settling without."""
    from fedsample.participation.procedure import Selected, settle_participants
    from fedsample.participation.setting import Participation
    from fedsample.participation.system import SystemModel
    from fedsample.samplers import Selection

    sc = SCENARIOS[scenario]
    model = SystemModel(deadline=1.0)
    systems = model.clients(100, 0)
    asked = Participation(over_selection=0.3).num_asked(sc["m"])
    ids = np.sort(np.random.default_rng(0).choice(100, asked, replace=False))
    selection = Selection(clients=ids, weights=np.full(asked, 1.0 / asked))
    ones = np.ones(asked, dtype=bool)
    selected = Selected(selection, ids, selection.weights, ones, ones, None, 0)
    plain, clocked = Participation(over_selection=0.3), Participation(over_selection=0.3, system=model)
    samples = sc["steps"] * sc["batch"]

    def without() -> object:
        return settle_participants(selected, ones, plain, seed=0, round=1, num_kept=sc["m"], estimator=None)

    def with_clock() -> object:
        times = systems.round_times(ids, samples, 10**5, model.reference_parameters)
        return settle_participants(
            selected, ones, clocked, seed=0, round=1, num_kept=sc["m"], estimator=None, round_times=times
        )

    def best(call: Any) -> float:
        return min(timeit.repeat(call, number=2000, repeat=5)) / 2000

    return best(with_clock) - best(without)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per call (default 15)")
    parser.add_argument("--repeats", type=int, default=7, help="alternating calls of each (default 7)")
    parser.add_argument("--deadline", action="store_true", help="also time a run with a deadline (fewer clients train)")
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    args = parser.parse_args()
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for name in names:
        without: list[np.ndarray] = []
        with_clock: list[np.ndarray] = []
        for _ in range(args.repeats):  # alternate, so that drift in the machine's speed hits both alike
            without.append(_rounds(name, args.rounds, clock=False))
            with_clock.append(_rounds(name, args.rounds, clock=True))
        plain, timed = float(np.median(np.concatenate(without))), float(np.median(np.concatenate(with_clock)))
        paired = float(np.median([np.median(c) / np.median(w) - 1 for w, c in zip(without, with_clock, strict=True)]))
        print(f"{SCENARIOS[name]['title']}")
        work = clock_work(name)
        print(
            f"  without clock {plain * 1e3:9.3f} ms/round   with clock {timed * 1e3:9.3f} ms/round   "
            f"overhead {paired:+.1%} (target < 5%; median of {args.repeats} alternating pairs of {args.rounds} rounds)"
        )
        if args.deadline:
            late = float(np.median(_rounds(name, args.rounds, clock=True, deadline=True)))
            print(f"  with a deadline at the median round time {late * 1e3:9.3f} ms/round (late clients are not kept)")
        print(
            f"  the clock's own work: {work * 1e6:+.1f} us/round = {work / plain:+.2%} of a round without it "
            "(round times and settling, less settling with the hashed order; best of 5 x 2000)"
        )


if __name__ == "__main__":
    main()
