"""Cost of the adaptive samplers, as ratios measured in one run.

1. One OSMD round (the mirror step and exact projection after a round's feedback, then the next
   draw) for M = 10^6 clients and K = 100, against the time numpy takes to sort 10^6 floats.
   Target: at most 30x.
2. Adaptive-OSMD's round cost against its number of experts E (set through the horizon T): it
   should grow linearly in E (one mirror step and projection per expert).

Run: ``python benchmarks/bench_osmd.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import fedsample
from fedsample import Federation, Feedback
from fedsample.samplers import AdaptiveOSMDSampler, OSMDSampler
from fedsample.samplers.adaptive.osmd import num_experts


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def one_round(sampler: fedsample.Sampler[object], state: object, rng: np.random.Generator) -> object:
    """Draw, build the round's feedback (update norms of the drawn clients), update the state."""
    selection = sampler.sample(state, rng)
    clients, _ = selection.distinct()
    feedback = Feedback(
        round=0,
        selection=selection,
        clients=clients,
        update_norms=rng.random(clients.size) + 0.5,
        local_lr=1.0,
        local_steps=1,
    )
    return sampler.update(state, feedback)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 10**5 if args.quick else 10**6
    k = 100
    rng = np.random.default_rng(0)
    floats = rng.random(n)
    t_sort = best_of(lambda: np.sort(floats), 5)
    federation = Federation.from_sizes(np.maximum(1, rng.integers(1, 1000, size=n)))
    print(f"M = {n:,} clients, K = {k}; numpy sort of {n:,} floats: {t_sort * 1e3:.1f} ms")

    print("\n[1] one OSMD round (update after feedback, then the next draw)")
    for replace in (True, False):
        sampler = OSMDSampler(eta=1e-3, replace=replace)
        state = sampler.init(federation, k)
        state = one_round(sampler, state, rng)  # a learned, non-uniform state
        t_round = best_of(lambda s=sampler, st=state: one_round(s, st, rng), 5)
        mode = "with replacement" if replace else "without replacement"
        print(f"    {mode:<20}: {t_round * 1e3:8.1f} ms = {t_round / t_sort:5.1f}x the sort (target <= 30x)")

    print("\n[2] Adaptive-OSMD round cost against the number of experts")
    m_small = 10**4 if args.quick else 10**5
    small = Federation.from_sizes(np.full(m_small, 10))
    print(f"    M = {m_small:,}, K = {k}")
    rows = []
    for horizon in (1, 4, 64, 4096, 2**20, 2**40):
        sampler = AdaptiveOSMDSampler(horizon=horizon)
        state = one_round(sampler, sampler.init(small, k), rng)
        experts = num_experts(horizon, m_small, sampler.alpha)
        t = best_of(lambda s=sampler, st=state: one_round(s, st, rng), 3)
        rows.append((horizon, experts, t))
    for horizon, experts, t in rows:
        print(f"    T = {horizon:>17,}: E = {experts:2d} experts, {t * 1e3:7.1f} ms per round")
    e = np.array([r[1] for r in rows], dtype=float)
    times = np.array([r[2] for r in rows])
    slope, intercept = np.polyfit(e, times, 1)
    fitted = intercept + slope * e
    r2 = 1 - np.sum((times - fitted) ** 2) / np.sum((times - times.mean()) ** 2)
    print(
        f"    least-squares fit: {intercept * 1e3:.1f} ms + {slope * 1e3:.2f} ms x E  (R^2 = {r2:.3f}): "
        "linear in the number of experts"
    )


if __name__ == "__main__":
    main()
