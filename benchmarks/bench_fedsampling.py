"""A FedSampling round on paper 004's log-normal federation: size buckets against one padded batch.

Setting: MNIST-1D (generated), 5000 clients with log-normal sizes (mean about 2.7, sigma 4, the
largest client holds about a third of the data), FedSampling with ``K = 256`` at ``epsilon = 3``,
an MLP 40-100-10, mini-batch SGD. In a round about 200 clients keep from 1 to about 90 samples.

Compared in one process, on the same rounds:

* ``padded``: every slot padded to the round's largest kept count (one batched call);
* ``bucketed``: fedsample's default, slots grouped by size in ``(2^(j-1), 2^j]`` buckets;
* ``md``: MD sampling of the same federation with ``m = 96`` clients and ``B = 64`` (the
  client-level reference at about the same number of samples per round).

Reported: median seconds per round and the ratio padded / bucketed.

Run: ``python benchmarks/bench_fedsampling.py`` (``--rounds`` to change the timed rounds).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import fedsample
import fedsample.engine.trainers.base as backends
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.engine import MiniBatchSGD, ModelSpec, RunSpec, TrainingConfig, simulate


def seconds_per_round(data: Any, sampler: Any, rounds: int, num_sampled: int) -> float:
    model = ModelSpec("mlp", data.sample_shape, 10, hidden=100)
    config = TrainingConfig(
        rounds=rounds,
        num_sampled=num_sampled,
        local_steps=1,
        batch_size=64,
        local_lr=0.3,
        algorithm=MiniBatchSGD(),
        eval_every=10**6,
    )
    (result,) = simulate(data, model, [RunSpec(sampler, seed=0)], config)
    return float(np.median(result.history.round_seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    data = build_federation(
        FederationSpec(dataset="mnist1d", partition="lognormal", num_clients=5000, num_samples=16000, seed=0)
    )
    sizes = data.train_sizes()
    print(f"{data.num_clients} clients, {int(sizes.sum())} training samples, largest client {int(sizes.max())}")
    fedsampling = fedsample.make_sampler("fedsampling", target_samples=256)
    bucketed = seconds_per_round(data, fedsampling, args.rounds, 96)
    real_widths, real_buckets = backends.padded_widths, backends.size_buckets

    def widest(counts: np.ndarray, batch_size: int) -> np.ndarray:
        widths = real_widths(counts, batch_size)
        return np.full_like(widths, widths.max())

    def one_group(counts: np.ndarray, batch_size: int) -> list[np.ndarray]:
        return [np.arange(np.asarray(counts).size)]

    # The padded baseline: the same backend with bucketing switched off, every slot padded to the
    # round's widest one and trained in one group.
    backends.padded_widths, backends.size_buckets = widest, one_group
    try:
        padded = seconds_per_round(data, fedsampling, args.rounds, 96)
    finally:
        backends.padded_widths, backends.size_buckets = real_widths, real_buckets
    md = seconds_per_round(data, fedsample.make_sampler("md"), args.rounds, 96)
    print(f"median seconds per round over {args.rounds} rounds")
    print(f"{'fedsampling, padded':<24}{padded:>10.4f}")
    print(f"{'fedsampling, bucketed':<24}{bucketed:>10.4f}   {padded / bucketed:.2f}x faster than padded")
    print(f"{'md, m = 96, B = 64':<24}{md:>10.4f}   fedsampling bucketed / md: {bucketed / md:.2f}")


if __name__ == "__main__":
    main()
