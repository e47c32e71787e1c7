"""The participation policies and availability processes of issue 28 item 2: the cost of one round at ``n = 10^5``.

A round of a policy is the participation layer's share of an engine round: ``select_participants``
(the sampler's draw, then each selected client's availability and dropout), ``settle_participants``
(the policy's weights, FedAU's interval estimator read and fed) and, for MIFA and FedVARP,
``memory_step`` (the kept clients' ``d``-float updates against the remembered ones; the memory is
``n x d`` float32). Two settings:

* **every client asked** (FedAU's setting): the ``full`` sampler, Bernoulli availability with rates from
  0.02 to 0.18 (about ``10^4`` clients take part a round), 10% dropout, ``d = 100``;
* **m = 100 drawn**: MD sampling of 100 clients, unavailable draws skipped, same rates, ``d = 100``.

Then each availability process answering for all ``n`` clients, what the engine asks once a round
(the next round's available set for the samplers' feedback): Bernoulli, Markov (FedAU's
``markov-0.05`` at a mean rate of 0.1: about 10 rounds read back per client) and cyclic (period 100).

Each figure is the median over the rounds, reported as a ratio to numpy sorting ``n`` floats measured
in the same run, with the machine's load average (the reference machine is 2 cores shared with other
jobs; torch runs one thread unless ``--threads`` says otherwise, since on a loaded machine a second
thread slows the small gathers and scatters of the memory down).

Run: ``python benchmarks/bench_participation_policies.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

import numpy as np
import torch

import fedsample
from _timing import median_seconds
from fedsample import Federation
from fedsample.engine.aggregation import memory_step, new_memory
from fedsample.participation import (
    POLICIES,
    Availability,
    BernoulliAvailability,
    CyclicAvailability,
    Dropout,
    MarkovAvailability,
    Participation,
    select_participants,
    settle_participants,
)
from fedsample.samplers import FullSampler, MDSampler, Sampler

DIMENSION = 100


def policy_round_seconds(
    sampler: Sampler[Any], num_sampled: int, policy: str, rates: np.ndarray, rounds: int
) -> tuple[float, float]:
    """Median seconds of a round of ``policy``, and the mean number of kept clients."""
    n = rates.size
    federation = Federation.from_sizes(np.random.default_rng(0).integers(10, 1000, size=n))
    state = sampler.init(federation, num_sampled)
    p = np.asarray(federation.importances)
    setting = Participation(
        availability=BernoulliAvailability(rates, seed=1), dropout=Dropout(0.1, seed=2), policy=policy, redraws=0
    )  # type: ignore[arg-type]
    estimator = setting.new_estimator(n)
    memory = new_memory({"w": torch.zeros(1, DIMENSION)}, n) if policy in ("mifa", "fedvarp") else None
    updates = torch.randn(n, DIMENSION)  # client i's update, whenever it is kept (made before the clock)
    times, kept_counts = [], []
    for t in range(rounds):
        start = time.perf_counter()
        selected = select_participants(sampler, state, setting, seed=0, round=t, num_clients=n)
        finite = np.ones(selected.clients.size, dtype=bool)
        settled = settle_participants(
            selected, finite, setting, seed=0, round=t, num_kept=num_sampled, estimator=estimator, importances=p
        )
        ids = selected.clients[settled.kept]
        if memory is not None:
            index = torch.as_tensor(ids)
            _, memory = memory_step(
                memory,
                {"w": updates.index_select(0, index)},
                np.zeros(ids.size, dtype=np.int64),
                ids,
                settled.weights[settled.kept],
                p[ids],
                still_without_kept=policy == "fedvarp",
            )
        times.append(time.perf_counter() - start)
        kept_counts.append(ids.size)
    return statistics.median(times), float(np.mean(kept_counts))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^4 and 3 rounds, a smoke run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the ops are small)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n, rounds = (10**4, 3) if args.quick else (10**5, 15)
    print(f"fedsample {fedsample.__version__}, numpy {np.__version__}, torch {torch.__version__}, ", end="")
    print(f"{platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}")
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    values = np.random.default_rng(3).random(n)
    sort_s = median_seconds(lambda: np.sort(values), 2 * rounds)
    print(f"numpy sort of {n} floats: {1e3 * sort_s:.2f} ms (median of {2 * rounds})")
    rates = np.linspace(0.02, 0.18, n)
    settings: tuple[tuple[str, Sampler[Any], int], ...] = (
        ("every client asked", FullSampler(), n),
        ("m = 100 drawn (MD)", MDSampler(), 100),
    )
    for title, sampler, m in settings:
        print(f"\n{title}, n = {n}, d = {DIMENSION} (medians over {rounds} rounds)")
        print(f"  {'policy':<20} {'round ms':>9} {'/ sort':>8} {'kept':>8}")
        for policy in POLICIES:
            seconds, kept = policy_round_seconds(sampler, m, policy, rates, rounds)
            print(f"  {policy:<20} {1e3 * seconds:>9.2f} {seconds / sort_s:>7.2f}x {kept:>8.0f}")
    processes: tuple[tuple[str, Availability], ...] = (
        ("bernoulli", BernoulliAvailability(np.full(n, 0.1), seed=1)),
        ("markov (q = 0.05)", MarkovAvailability.stationary(np.full(n, 0.1), off_to_on=0.05, seed=1)),
        ("cyclic (C = 100)", CyclicAvailability(np.full(n, 0.1), period=100, seed=1)),
    )
    everyone = np.arange(n)
    print(f"\navailability of all {n} clients in a round (medians over {rounds} rounds from round 1000)")
    for name, process in processes:
        counter = iter(range(1000, 1000 + 10 * rounds))
        seconds = median_seconds(
            lambda process=process, counter=counter: process.available(next(counter), everyone), rounds
        )
        print(f"  {name:<20} {1e3 * seconds:>9.2f} ms {seconds / sort_s:>7.2f}x the sort")
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
