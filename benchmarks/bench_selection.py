"""Client-selection systems (issue 15): the cost of a round of Oort and of DivFL.

1. **Oort**, ``n = 10^6`` clients, all explored (random utilities and round times), ``K = 100``,
   exploration at its floor: one ``OortSampler.sample`` (scores of every explored available
   client, the cut-off, the draw) against numpy sorting ``10^6`` floats, measured in the same run.
   Targets: at most 50 ms a round, and at most 20x the sort. ``update`` is timed too (not a target).
2. **DivFL**, ``n = 1000`` clients with ``d = 10^5`` parameters through a count sketch to ``d'``
   dimensions, ``m = 10``: a round is ``update`` with the ``m`` returned clients' update vectors
   (their sketches and distance rows, ``O(m d + n m d')``) plus ``sample`` (the lazy greedy over the
   ``n x n`` distances). Target: at most 1 s a round.

Figures are medians over the rounds. Run: ``python benchmarks/bench_selection.py`` (``--quick``
for a smoke run).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import replace

import numpy as np

import fedsample
from _timing import median_seconds
from fedsample import Federation, Feedback, Selection
from fedsample.samplers import DivFLSampler, OortSampler


def bench_oort(num_clients: int, num_sampled: int, rounds: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    federation = Federation.from_sizes(rng.integers(10, 1000, size=num_clients))
    sampler = OortSampler()
    state = sampler.init(federation, num_sampled)
    # A population explored long ago: a utility and a round time for every client, epsilon at its floor.
    state = replace(
        state,
        utility=rng.lognormal(0.0, 1.0, size=num_clients),
        explored=np.ones(num_clients, dtype=bool),
        last_round=rng.integers(1, 200, size=num_clients),
        durations=rng.lognormal(3.0, 0.7, size=num_clients),
        epsilon=sampler.exploration_min,
        preferred_duration=float(np.exp(3.0)),
        round=200,
    )
    draw_rng = np.random.default_rng(1)
    sample_s = median_seconds(lambda: sampler.sample(state, draw_rng), rounds)
    values = rng.random(num_clients)
    sort_s = median_seconds(lambda: np.sort(values), rounds)
    selection = sampler.sample(state, draw_rng)
    ids = np.unique(selection.clients)
    feedback = Feedback(
        round=200,
        selection=selection,
        clients=ids,
        losses=np.ones(ids.size),
        loss_squares=np.full(ids.size, 1.5),
        round_times=np.full(ids.size, 20.0),
    )
    update_s = median_seconds(lambda: sampler.update(state, feedback), rounds)
    return {"sample": sample_s, "sort": sort_s, "update": update_s}


def bench_divfl(num_clients: int, dim: int, sketch_dim: int, num_sampled: int, rounds: int) -> dict[str, float]:
    rng = np.random.default_rng(2)
    federation = Federation.from_sizes(np.full(num_clients, 100))
    sampler = DivFLSampler(projection_dim=sketch_dim, representative="update")  # the vectors fed below
    state = sampler.init(federation, num_sampled)
    centres = rng.standard_normal((10, dim), dtype=np.float32)

    def updates(clients: np.ndarray) -> np.ndarray:
        noise = rng.standard_normal((clients.size, dim), dtype=np.float32)
        return (centres[clients % 10] + 2.0 * noise).astype(np.float64)

    block = 100  # every client reports once first (in blocks, so no n x d float64 matrix is held)
    for t, start in enumerate(range(0, num_clients, block)):
        ids = np.arange(start, min(num_clients, start + block))
        selection = Selection(clients=ids, weights=np.full(ids.size, 1.0 / ids.size))
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids, updates=updates(ids)))
    draw_rng = np.random.default_rng(3)
    update_times, sample_times = [], []
    for t in range(rounds):
        selection = sampler.sample(state, draw_rng)
        ids = np.unique(selection.clients)
        feedback = Feedback(round=t, selection=selection, clients=ids, updates=updates(ids))
        start = time.perf_counter()
        state = sampler.update(state, feedback)
        middle = time.perf_counter()
        sampler.sample(state, draw_rng)
        update_times.append(middle - start)
        sample_times.append(time.perf_counter() - middle)
    update_s, sample_s = statistics.median(update_times), statistics.median(sample_times)
    return {"update": update_s, "sample": sample_s, "round": update_s + sample_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    args = parser.parse_args()
    n_oort, dim, rounds = (10**5, 10**4, 3) if args.quick else (10**6, 10**5, 15)
    print(f"fedsample {fedsample.__version__}, numpy {np.__version__}, {platform.machine()}")

    oort = bench_oort(n_oort, 100, rounds)
    ratio = oort["sample"] / oort["sort"]
    print(f"\nOort, n = {n_oort}, K = 100 (medians over {rounds} rounds)")
    print(f"  sample: {1e3 * oort['sample']:.1f} ms (target <= 50 ms)")
    print(f"  numpy sort of {n_oort} floats: {1e3 * oort['sort']:.1f} ms; sample / sort = {ratio:.2f}x (target <= 20x)")
    print(f"  update: {1e3 * oort['update']:.1f} ms")

    divfl = bench_divfl(1000, dim, 256, 10, rounds)
    print(f"\nDivFL, n = 1000, d = {dim}, sketch d' = 256, m = 10 (medians over {rounds} rounds)")
    print(f"  update (sketch + distance rows): {1e3 * divfl['update']:.1f} ms")
    print(f"  sample (lazy greedy): {1e3 * divfl['sample']:.1f} ms")
    print(f"  round: {1e3 * divfl['round']:.1f} ms = {divfl['round']:.3f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
