"""The samplers of issue 28 (DELTA, AFL, Fed-CBS): the cost of one round at ``n = 10^5`` clients.

A round is the sampler's ``update`` with the feedback of the clients it drew last, then ``sample``:

* **DELTA** (``delta``): ``m = 100`` returned clients with update vectors of ``d = 1000`` floats
  (their scores, the mass-preserving update of ``p``), then ``K = 100`` draws from ``p``.
* **AFL** (``afl``): the returned clients' losses, then the valuation softmax over every available
  client, the lowest fraction zeroed, and the draw (active share plus uniform share).
* **Fed-CBS** (``fedcbs``): the selected clients' counts, then ``m`` sequential steps, each scoring
  the QCID of every remaining client added to the selection (``O(m n C)``, ``C = 10`` classes); at
  ``m = 100`` and at ``m = 10``.

Each is reported as a ratio to numpy sorting ``n`` floats, measured in the same run, with the
machine's load average (the reference machine is 2 cores shared with other jobs). Figures are
medians over the rounds. Run: ``python benchmarks/bench_rivals.py`` (``--quick`` for a smoke run,
``--sampler delta`` for one).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

import numpy as np

import fedsample
from _timing import median_seconds
from fedsample import Federation, Feedback
from fedsample.samplers import Sampler, make_sampler

NUM_SAMPLED = 100
DIMENSION = 1000
NUM_CLASSES = 10


def _sampler(name: str, federation: Federation, rng: np.random.Generator) -> Sampler[Any]:
    if name == "fedcbs":  # label histograms of Dirichlet(0.3) class mixtures, summing to the sizes
        mixtures = rng.dirichlet(np.full(NUM_CLASSES, 0.3), size=federation.num_clients)
        counts = np.array([rng.multinomial(n, q) for n, q in zip(federation.sizes, mixtures, strict=True)])
        counts[counts.sum(axis=1) == 0, 0] = 1
        return make_sampler(name, label_counts=counts)
    return make_sampler(name)


def bench(name: str, num_clients: int, rounds: int, num_sampled: int = NUM_SAMPLED) -> dict[str, float]:
    """Median seconds of a round (``update`` then ``sample``) of ``name`` and of numpy's sort."""
    rng = np.random.default_rng(0)
    federation = Federation.from_sizes(rng.integers(10, 1000, size=num_clients))
    sampler = _sampler(name, federation, rng)
    state = sampler.init(federation, num_sampled)
    losses = rng.lognormal(0.0, 0.5, size=num_clients)
    draw_rng = np.random.default_rng(1)
    selection = sampler.sample(state, draw_rng)
    update_times, sample_times = [], []
    for t in range(rounds):
        ids = np.unique(selection.clients)
        updates = rng.standard_normal((ids.size, DIMENSION)) if "updates" in sampler.reads else None
        feedback = Feedback(
            round=t, selection=selection, clients=ids, losses=losses[ids], updates=updates, local_lr=0.1, local_steps=5
        )
        start = time.perf_counter()
        state = sampler.update(state, feedback)
        middle = time.perf_counter()
        selection = sampler.sample(state, draw_rng)
        update_times.append(middle - start)
        sample_times.append(time.perf_counter() - middle)
    values = rng.random(num_clients)
    sort_s = median_seconds(lambda: np.sort(values), rounds)
    update_s, sample_s = statistics.median(update_times), statistics.median(sample_times)
    return {"update": update_s, "sample": sample_s, "round": update_s + sample_s, "sort": sort_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^4 and 3 rounds, a smoke run")
    parser.add_argument("--sampler", action="append", help="delta, afl or fedcbs (repeat; default: all three)")
    args = parser.parse_args()
    num_clients, rounds = (10**4, 3) if args.quick else (10**5, 15)
    names = args.sampler or ["delta", "afl", "fedcbs"]
    print(f"fedsample {fedsample.__version__}, numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} cores")
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    # Fed-CBS's round is m sequential steps over every client: shown at m = 10 (the paper's scale) too.
    cases = [(name, m) for name in names for m in ((NUM_SAMPLED, 10) if name == "fedcbs" else (NUM_SAMPLED,))]
    for name, m in cases:
        result = bench(name, num_clients, rounds, m)
        ratio = result["round"] / result["sort"]
        print(f"\n{name}, n = {num_clients}, m = {m} (medians over {rounds} rounds)")
        print(f"  update: {1e3 * result['update']:.2f} ms, sample: {1e3 * result['sample']:.2f} ms")
        print(
            f"  round: {1e3 * result['round']:.2f} ms; numpy sort of {num_clients} floats: "
            f"{1e3 * result['sort']:.2f} ms; round / sort = {ratio:.2f}x"
        )
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
