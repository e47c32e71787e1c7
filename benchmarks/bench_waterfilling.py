"""Water-filling and the fixed-size inclusion-probability design, timed in one run.

* ``capped_inclusion`` (``q_i = min(1, c s_i)`` with ``sum q_i = m``) on ``n = 10^6`` lognormal
  scores with ``m = 1000``, against numpy's ``np.sort`` of the same ``10^6`` floats in the same run.
  Target: at most 10x the sort.
* ``systematic`` (``SystematicSampler``): its set-up (``init``: the water-filling, a random layout
  permutation and the cumulative sums) and its draw cost per round, for ``n = 10^4 .. 10^6``
  clients of lognormal sizes with ``m = 100``; ``uniform``'s draw (Floyd's algorithm) as the
  reference for an ``O(m)`` draw.

Reported: the median of ``--repeats`` timings (default 7) of each, and the ratios.

Run: ``python benchmarks/bench_waterfilling.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsample import Federation
from fedsample.samplers import Sampler, SystematicSampler, UniformSampler, capped_inclusion


def _median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def waterfilling(repeats: int) -> None:
    rng = np.random.default_rng(0)
    scores = rng.lognormal(0.0, 2.0, size=10**6)
    sort = _median_seconds(lambda: np.sort(scores), repeats)
    fill = _median_seconds(lambda: capped_inclusion(scores, 1000), repeats)
    q = capped_inclusion(scores, 1000)
    print(f"water-filling n = 10^6, m = 1000: {fill * 1e3:.1f} ms ({int((q == 1).sum())} clients capped)")
    print(f"numpy sort of 10^6 floats:        {sort * 1e3:.1f} ms")
    print(f"ratio: {fill / sort:.2f}x (target: at most 10x)")


def _draw_seconds(sampler: Sampler[Any], state: Any, rounds: int, repeats: int) -> float:
    """Median time of one ``sample`` call, over ``repeats`` batches of ``rounds`` calls."""
    rng = np.random.default_rng(2)

    def draws() -> None:
        for _ in range(rounds):
            sampler.sample(state, rng)

    return _median_seconds(draws, repeats) / rounds


def _systematic_row(n: int, repeats: int, rounds: int) -> str:
    sizes = np.maximum(np.random.default_rng(1).lognormal(3.0, 1.5, size=n).astype(np.int64), 1)
    federation = Federation.from_sizes(sizes)
    sampler = SystematicSampler()
    init = _median_seconds(lambda: sampler.init(federation, 100), repeats)
    draw = _draw_seconds(sampler, sampler.init(federation, 100), rounds, repeats)
    uniform = UniformSampler()
    reference = _draw_seconds(uniform, uniform.init(federation, 100), rounds, repeats)
    return f"{n:<8} | {init * 1e3:9.1f} | {draw * 1e6:9.1f} | {reference * 1e6:9.1f}"


def systematic(repeats: int, rounds: int) -> None:
    print(f"\nsystematic, m = 100, lognormal sizes; draw = mean over {rounds} rounds")
    print("n        | init (ms) | draw (us) | uniform draw (us)")
    for n in (10**4, 10**5, 10**6):
        print(_systematic_row(n, repeats, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    waterfilling(args.repeats)
    systematic(args.repeats, args.rounds)


if __name__ == "__main__":
    main()
