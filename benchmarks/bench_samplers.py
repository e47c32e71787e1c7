"""Sampler set-up and per-draw cost, as ratios measured in one run.

1. Algorithm 1 of paper 000 (clustered sampling by size) for n = 10^6 clients and m = 100 rows,
   against the time numpy takes to sort 10^6 floats (the O(n log n) floor). Target: <= 20x.
2. 1000 rounds of draws for n = 10^4 ... 10^7 clients, m = 100: no per-draw work may be
   proportional to n. Reported for every fixed sampler, next to numpy's ``rng.choice(n, m, p=p)``,
   which is O(n) per draw: a 100x larger population makes it ~100x slower, while the samplers'
   draws stay within a small factor (the log n of a binary search and cache misses).

Run: ``python benchmarks/bench_samplers.py`` (add ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

import fedsample
from fedsample.samplers import size_clustered_design


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Smallest wall time of ``repeats`` calls (the least disturbed measurement)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def random_sizes(n: int, rng: np.random.Generator) -> np.ndarray:
    # Unbalanced integer sizes between 1 and ~10^4 (log-uniform), like real federations.
    return np.maximum(1, np.exp(rng.uniform(0, 9.2, size=n))).astype(np.int64)


def bench_algorithm_1(n: int, m: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    sizes = random_sizes(n, rng)
    floats = rng.random(n)
    t_sort = best_of(lambda: np.sort(floats), repeats)
    t_alg1 = best_of(lambda: size_clustered_design(sizes, m), repeats)
    fed = fedsample.Federation.from_sizes(sizes)
    t_init = best_of(lambda: fedsample.SizeClusteredSampler().init(fed, m), repeats)
    return {"sort": t_sort, "alg1": t_alg1, "init": t_init}


def bench_draws(names: list[str], ns: list[int], m: int, rounds: int) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {name: {} for name in names}
    for n in ns:
        fed = fedsample.Federation.from_sizes(random_sizes(n, np.random.default_rng(1)))
        for name in names:
            params = {"capped": True} if name == "poisson" else {}
            sampler = fedsample.make_sampler(name, **params)
            state = sampler.init(fed, m)
            rng = np.random.default_rng(2)

            def run(
                sampler: fedsample.Sampler[object] = sampler, state: object = state, rng: np.random.Generator = rng
            ) -> None:
                for _ in range(rounds):
                    sampler.sample(state, rng)

            out[name][n] = best_of(run, 3) / rounds
        # Reference: numpy's own weighted draw rebuilds the cumulative distribution every call,
        # O(n) per draw. This is the cost the samplers avoid by building it once in init.
        p = fed.importances
        rng = np.random.default_rng(3)
        reps = max(3, rounds // 20)

        def numpy_choice(p: np.ndarray = p, reps: int = reps, rng: np.random.Generator = rng) -> None:
            for _ in range(reps):
                rng.choice(p.size, size=m, p=p)

        out.setdefault("numpy choice(p)", {})[n] = best_of(numpy_choice, 3) / reps
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    n_big = 10**5 if args.quick else 10**6
    m = 100
    print(f"fedsample {fedsample.__version__}, numpy {np.__version__}, {platform.processor() or platform.machine()}")

    res = bench_algorithm_1(n_big, m, repeats=3 if args.quick else 7)
    ratio = res["alg1"] / res["sort"]
    print(f"\n[1] Algorithm 1, n = {n_big:,}, m = {m}")
    print(f"    numpy sort of {n_big:,} floats : {res['sort'] * 1e3:8.1f} ms")
    print(f"    size_clustered_design          : {res['alg1'] * 1e3:8.1f} ms  ({ratio:.2f}x the sort; target <= 20x)")
    init_ratio = res["init"] / res["sort"]
    print(f"    SizeClusteredSampler.init      : {res['init'] * 1e3:8.1f} ms  ({init_ratio:.2f}x the sort)")

    ns = [10**4, 10**5] if args.quick else [10**4, 10**5, 10**6, 10**7]
    rounds = 200 if args.quick else 1000
    names = ["md", "clustered-size", "uniform", "fedavg-uniform", "poisson", "binomial"]
    draws = bench_draws(names, ns, m, rounds)
    print(f"\n[2] time per draw over {rounds} rounds, m = {m} (microseconds)")
    base, top = ns[0], min(ns[-1], 10**6)
    header = "".join(f"{'n = ' + format(n, ','):>15}" for n in ns)
    print("    " + "sampler".ljust(16) + header + f"   ratio n={top:.0e} / n={base:.0e}")
    for name, per_n in draws.items():
        cells = "".join(f"{per_n[n] * 1e6:15.1f}" for n in ns)
        print(f"    {name:<16}{cells}   {per_n[top] / per_n[base]:8.2f}x")


if __name__ == "__main__":
    main()
