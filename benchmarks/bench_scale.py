"""Population-scale sampling: 10^8 clients given as sizes in a memory-mapped file.

Writes a sizes file of ``--clients`` log-normal integer sizes (default 10^8, int32 ``.npy``) in a
temporary folder, opens it with :func:`fedsample.samplers.population.samplers.open_population`, and reports for
each population sampler the one-time set-up, the seconds per draw of ``m = 1000`` clients among
the clients available in the round (Bernoulli availability, 70% by default, a new round each
draw), the bytes the sampler's state holds, and the peak resident memory of each phase. The
baseline, measured in the same run on the same sizes, is numpy's weighted draw
``Generator.choice(n, m, p=p)``, which is ``O(n)`` per draw (it rebuilds the cumulative
distribution each call, and ignores availability).

Peak resident memory is the process's high-water mark (``VmHWM``), reset before each phase where
the kernel allows it. It counts the pages of the mapped sizes file that the phase touched (file
pages, shared and reclaimable) as well as the arrays the phase allocated.

Run: ``python benchmarks/bench_scale.py`` (``--clients 1000000`` for a quick run).
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import fedsample
from fedsample.participation.availability import BernoulliAvailability
from fedsample.samplers.population.samplers import (
    ClusteredPopulationState,
    Population,
    PopulationClusteredSampler,
    PopulationMDSampler,
    PopulationUniformSampler,
    open_population,
)

_CHUNK = 10_000_000


def write_lognormal_sizes(path: Path, num_clients: int, seed: int) -> None:
    """Sizes ``max(1, round(LogNormal(4, 1.5)))`` as int32, written chunk by chunk to a ``.npy`` file."""
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(num_clients,))
    for start in range(0, num_clients, _CHUNK):
        stop = min(num_clients, start + _CHUNK)
        draws = np.round(rng.lognormal(4.0, 1.5, size=stop - start))
        out[start:stop] = np.clip(draws, 1, np.iinfo(np.int32).max).astype(np.int32)
    out.flush()
    del out


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak() -> bool:
    """Reset the resident high-water mark (Linux ``clear_refs`` 5); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_mib() -> float:
    hwm = _status_kib("VmHWM")
    if hwm is None:  # not Linux: the process's peak since it started
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return hwm / 1024


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def state_bytes(state: Any) -> int:
    """Bytes of the arrays a state holds in memory (the mapped sizes file excluded)."""
    return sum(
        value.nbytes
        for value in vars(state).values()
        if isinstance(value, np.ndarray) and not isinstance(value, np.memmap)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=10**8, help="population size n (default 10^8)")
    parser.add_argument("--num-sampled", type=int, default=1000, help="m, clients per draw (default 1000)")
    parser.add_argument("--rounds", type=int, default=50, help="draws timed per sampler (default 50)")
    parser.add_argument("--availability", type=float, default=0.7, help="Bernoulli availability (default 0.7)")
    parser.add_argument("--baseline-rounds", type=int, default=3, help="numpy choice(p) draws timed (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the sizes file (default: a temp dir)")
    args = parser.parse_args()
    n, m = args.clients, args.num_sampled
    print(f"fedsample {fedsample.__version__}, numpy {np.__version__}, {platform.machine()}, n = {n:,}, m = {m}")
    tracked = reset_peak()
    if not tracked:
        print("(peak memory cannot be reset here: each figure is the process's peak so far)")

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "sizes.npy"
        _, seconds = timed(lambda: write_lognormal_sizes(path, n, seed=0))
        print(f"\nsizes file      : {path.stat().st_size / 2**20:,.0f} MiB int32, written in {seconds:.1f} s")

        reset_peak()
        population, seconds = timed(lambda: open_population(path))
        print(
            f"open_population : {seconds:6.2f} s (one validating scan), M = {population.total:,}, "
            f"peak RSS {peak_mib():,.0f} MiB"
        )

        availability = BernoulliAvailability(args.availability, seed=1)
        # A clustered row with no available client (a large client alone in its row, likelier for
        # small n) contributes no draw rather than stopping the benchmark; short rounds are counted.
        samplers = [PopulationMDSampler(), PopulationUniformSampler(), PopulationClusteredSampler(empty_rows="skip")]
        print(f"\n{'sampler':<28}{'set-up s':>10}{'ms/draw':>10}{'state B/client':>16}{'peak RSS MiB':>14}")
        per_draw: dict[str, float] = {}
        for sampler in samplers:
            reset_peak()
            state, setup = timed(lambda sampler=sampler: sampler.init(population, m))
            rng = np.random.default_rng(2)
            times, short, distinct = [], 0, ""
            for round_index in range(args.rounds):
                selection, seconds = timed(
                    lambda sampler=sampler, state=state, rng=rng, t=round_index: sampler.sample(
                        state, rng, availability=availability, round=t
                    )
                )
                short += selection.clients.size < m
                times.append(seconds)
            per_draw[sampler.name] = statistics.median(times)
            if isinstance(state, ClusteredPopulationState):
                distinct = f"  (d = {state.run_sizes.size:,} distinct sizes)"
            print(
                f"{sampler.name:<28}{setup:10.2f}{per_draw[sampler.name] * 1e3:10.2f}"
                f"{state_bytes(state) / n:16.2f}{peak_mib():14,.0f}"
                + distinct
                + (f"  ({short} rounds with an empty row)" if short else "")
            )
            del state

        reset_peak()
        baseline = _baseline(population, m, args.baseline_rounds)
        print(f"{'numpy choice(n, m, p=p)':<28}{'':>10}{baseline * 1e3:10.2f}{8.0:16.2f}{peak_mib():14,.0f}")
        print("\nbaseline per draw / sampler per draw (numpy's draw ignores availability):")
        for name, seconds in per_draw.items():
            print(f"    {name:<28}{baseline / seconds:12,.0f}x")
        print(f"\nprocess peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


def _baseline(population: Population, m: int, rounds: int) -> float:
    """Median seconds per ``Generator.choice(n, m, p=p)`` draw, ``p`` built once (8 bytes per client)."""
    p = np.empty(population.num_clients)
    for start in range(0, p.size, _CHUNK):
        p[start : start + _CHUNK] = population.sizes[start : start + _CHUNK]
    p /= population.total
    rng = np.random.default_rng(3)
    times = [timed(lambda: rng.choice(p.size, size=m, p=p))[1] for _ in range(rounds)]
    return statistics.median(times)


if __name__ == "__main__":
    main()
