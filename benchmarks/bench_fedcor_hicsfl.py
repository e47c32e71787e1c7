"""FedCor and HiCS-FL (issue 28, items 3 and 6): the cost of one round, as a ratio to numpy's sort.

1. **FedCor** (``fedcor``), ``n = 10^5`` clients, ``m = 100``, ``D = 15`` (the released dimension),
   16 stored loss-change vectors (a warm-up of 15 rounds):

   * a *selection round*: ``update`` with the round's report (no candidates: nobody is measured), which
     runs the greedy choice (``O(m n D)``, the ``D x D`` posterior; the released code's dense
     ``n x n`` covariance would take 80 GB here), then ``sample``;
   * a *refit round*: ``update`` with every client's loss (the round's loss changes, then
     ``refit_iterations = 100`` Adam steps on the marginal likelihood, ``O(n D (D + k))`` each), then
     ``sample``; the first fit after the warm-up runs 1000 such steps (shown as 10 refits).

2. **HiCS-FL** (``hics-fl``), a ``Linear(50, 10)`` output layer (510 entries per update), ``m = 100``
   (``m = n / 10`` below 1000 clients), every client reported once: a round is ``update`` with the
   returned clients' updates (their distance rows, ``O(n m d)``, their entropies, then Ward's tree of
   all ``n`` clients and its cut) and ``sample``. Its state is quadratic in ``n`` (the ``n x n``
   dissimilarities: 80 GB at ``n = 10^5``, so ``n = 10^5`` is out of reach by design, as for
   clustered sampling by similarity); the released clustering (``clustering="rows"``: Ward on the rows
   of the dissimilarity matrix as points of ``R^n``) costs ``O(n^3)`` a round, Ward on the
   dissimilarities themselves (``clustering="distances"``) ``O(n^2)``. Shown at ``n = 1000`` and
   ``4000`` for both, and ``n = 10^4`` for ``"distances"``.

Each is reported as a ratio to numpy sorting ``n`` floats, measured in the same run, with the machine's
load average (the reference machine has 2 cores shared with other jobs). Figures are medians. Run:
``python benchmarks/bench_fedcor_hicsfl.py`` (``--quick`` for a smoke run, ``--sampler fedcor`` for one).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

import fedsample
from _timing import median_seconds
from fedsample import Federation, Feedback, Selection
from fedsample.samplers import FedCorSampler, HiCSFLSampler

NUM_SAMPLED = 100


def _report(sampler: FedCorSampler, state: Any, t: int, losses: np.ndarray) -> Feedback:
    n = losses.size
    candidates = sampler.draw_candidates(state, np.arange(n), np.random.default_rng(t))
    ids = candidates.clients
    return Feedback(round=t, selection=candidates, clients=ids, losses=losses[ids])


def bench_fedcor(num_clients: int, rounds: int, refits: int) -> dict[str, float]:
    """Median seconds of a selection round and of a refit round of FedCor, and of numpy's sort."""
    rng = np.random.default_rng(0)
    federation = Federation.from_sizes(rng.integers(10, 1000, size=num_clients))
    # Warm-up rounds 0..15 measured; the fits are skipped here (0 iterations) and timed below.
    sampler = FedCorSampler(warmup_iterations=0, refit_interval=10**6)
    state = sampler.init(federation, NUM_SAMPLED)
    losses = rng.uniform(1.0, 3.0, size=num_clients)
    groups = rng.integers(0, 20, size=num_clients)
    for t in range(sampler.warmup_rounds + 2):  # reports 0..W+1: W+1 loss-change vectors
        state = sampler.update(state, _report(sampler, state, t, losses))
        sampler.sample(state, rng)
        losses = losses - rng.uniform(0.0, 0.1, size=20)[groups] - rng.uniform(0.0, 0.01, size=num_clients)
    selection_times = []
    t = sampler.warmup_rounds + 2
    for _ in range(rounds):
        feedback = _report(sampler, state, t, losses)
        start = time.perf_counter()
        state = sampler.update(state, feedback)
        sampler.sample(state, rng)
        selection_times.append(time.perf_counter() - start)
        t += 1
    # A refit round: the same state read by a sampler whose schedule draws round t at random and
    # measures it (refit_interval = t): its report at t, then the timed report at t + 1 (the round's
    # loss changes stored, 100 Adam steps, the greedy choice of round t + 1).
    refitting = FedCorSampler(warmup_rounds=sampler.warmup_rounds, refit_interval=t)
    before = refitting.update(state, _report(refitting, state, t, losses))
    after = losses - rng.uniform(0.0, 0.1, size=20)[groups]
    report_after = _report(refitting, before, t + 1, after)
    refit_times = []
    for _ in range(refits):
        start = time.perf_counter()
        refitted = refitting.update(before, report_after)
        refitting.sample(refitted, rng)
        refit_times.append(time.perf_counter() - start)
    assert refitted.change_rounds[-1] == t
    values = rng.random(num_clients)
    sort_s = median_seconds(lambda: np.sort(values), max(rounds, 5))
    return {
        "selection": statistics.median(selection_times),
        "refit": statistics.median(refit_times),
        "sort": sort_s,
        "vectors": float(refitted.change_rounds.size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^4 and 3 rounds, a smoke run")
    parser.add_argument("--sampler", action="append", help="fedcor or hics-fl (repeat; default: both)")
    args = parser.parse_args()
    num_clients, rounds, refits = (10**4, 3, 1) if args.quick else (10**5, 15, 3)
    names = args.sampler or ["fedcor", "hics-fl"]
    print(f"fedsample {fedsample.__version__}, numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} cores")
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if "fedcor" in names:
        result = bench_fedcor(num_clients, rounds, refits)
        sort_ms = 1e3 * result["sort"]
        print(f"\nfedcor, n = {num_clients}, m = {NUM_SAMPLED}, D = 15, {result['vectors']:.0f} loss-change vectors")
        print(f"  numpy sort of {num_clients} floats: {sort_ms:.2f} ms")
        print(
            f"  selection round (update: greedy choice; sample): {1e3 * result['selection']:.1f} ms; "
            f"round / sort = {result['selection'] / result['sort']:.1f}x (median of {rounds})"
        )
        print(
            f"  refit round (100 Adam steps, then the greedy choice): {1e3 * result['refit']:.0f} ms; "
            f"round / sort = {result['refit'] / result['sort']:.0f}x (median of {refits}); "
            f"the first fit (1000 steps) about {10 * result['refit']:.1f} s, once"
        )
    if "hics-fl" in names:
        bench_hicsfl_main(args.quick)
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def bench_hicsfl(num_clients: int, clustering: str, rounds: int) -> dict[str, float]:
    """Median seconds of a HiCS-FL round (``update`` with the returned clients' updates, then ``sample``)."""
    rng = np.random.default_rng(3)
    federation = Federation.from_sizes(rng.integers(10, 1000, size=num_clients))
    sampler = HiCSFLSampler(num_classes=10, output_inputs=50, clustering=clustering, horizon=200)  # type: ignore[arg-type]
    m = min(NUM_SAMPLED, max(num_clients // 10, 1))
    state = sampler.init(federation, m)
    lean = rng.dirichlet(np.full(10, 0.3), size=num_clients) - 0.1
    width = sampler.min_update_dimension

    def updates(ids: np.ndarray) -> np.ndarray:
        weights = 0.002 * lean[ids, :, None] * rng.uniform(0.2, 1.0, size=(ids.size, 1, 50))
        biases = 0.002 * lean[ids] + 1e-5 * rng.standard_normal((ids.size, 10))
        return np.concatenate([weights.reshape(ids.size, 500), biases], axis=1)

    everyone = np.arange(num_clients)
    first = Selection(clients=everyone, weights=np.full(num_clients, 1.0 / num_clients))
    state = sampler.update(state, Feedback(round=0, selection=first, clients=everyone, updates=updates(everyone)))
    state = replace(state, round=sampler.warmup_rounds(state))
    assert state.vectors.shape[1] == width
    times = []
    selection = sampler.sample(state, rng)
    for t in range(rounds):
        ids = np.unique(selection.clients)
        feedback = Feedback(round=t, selection=selection, clients=ids, updates=updates(ids))
        start = time.perf_counter()
        state = sampler.update(state, feedback)
        selection = sampler.sample(state, rng)
        times.append(time.perf_counter() - start)
    values = rng.random(num_clients)
    return {"round": statistics.median(times), "sort": median_seconds(lambda: np.sort(values), 5), "m": float(m)}


def bench_hicsfl_main(quick: bool) -> None:
    cases = (
        [(300, "rows"), (300, "distances")]
        if quick
        else [
            (1000, "rows"),
            (1000, "distances"),
            (4000, "rows"),
            (4000, "distances"),
            (10_000, "distances"),
        ]
    )
    rounds = 2 if quick else 3
    for num_clients, clustering in cases:
        result = bench_hicsfl(num_clients, clustering, rounds)
        print(f"\nhics-fl, n = {num_clients}, m = {result['m']:.0f}, clustering = {clustering!r} (median of {rounds})")
        print(
            f"  round: {1e3 * result['round']:.0f} ms; numpy sort of {num_clients} floats: "
            f"{1e3 * result['sort']:.3f} ms; round / sort = {result['round'] / result['sort']:.0f}x"
        )


if __name__ == "__main__":
    main()
