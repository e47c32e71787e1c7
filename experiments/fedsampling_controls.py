"""The controlled FedSampling comparison: tables from two run directories of ``fedsampling-lognormal``.

Paper 004's gain over FedAvg in the quick preset is confounded with the step length: clipped
sizes make ``N~`` about 0.635 ``N``, so FedSampling's weights sum to about 1.58. The preset holds
two controls (no clipping, normalised weights); the baselines at the matched step come from a
second run. Make both runs, then read them here::

    fedsample run fedsampling-lognormal --seeds 10 -o runs/fs
    fedsample run fedsampling-lognormal --seeds 10 --set training.local_lr=1.58 \\
        --sampler fedavg-uniform --param fedavg-uniform.normalize=true --sampler md -o runs/fs-matched
    python experiments/fedsampling_controls.py runs/fs runs/fs-matched

Each run's test accuracy is the mean of its last ``--tail`` evaluations (less noisy than the last
one alone, which is also printed); a pair is compared by a two-sided Mann-Whitney U test over
the seeds.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

MATCHED = " (matched step)"

# (first, second, what differs): each pair changes one thing.
PAIRS = (
    ("FedSampling no privacy", "FedSampling no privacy, no clipping", "clipping (M = 300 against 10^6)"),
    ("FedSampling no privacy, no clipping", "FedAvg (uniform clients)", "sampling, same step"),
    ("FedSampling no privacy, no clipping", "MD", "sampling, same step"),
    ("FedSampling no privacy, no clipping", "centralized", "sampling, same step"),
    ("FedSampling eps=3", "FedAvg (uniform clients)", "sampling and step (the preset's comparison)"),
    # Clipped FedSampling also keeps about 1.58 K samples a round: its batch is not matched.
    ("FedSampling eps=3", "fedavg-uniform" + MATCHED, "sampling and batch, step about matched"),
    ("FedSampling no privacy", "fedavg-uniform" + MATCHED, "sampling and batch, matched step"),
    ("FedSampling no privacy", "centralized" + MATCHED, "sampling and batch, matched step"),
    ("FedSampling eps=3, normalized", "FedSampling eps=3", "aggregation (weights k/sum k against k/K)"),
    ("FedSampling eps=3, normalized", "FedAvg (uniform clients)", "sampling, same step"),
)


def read(directory: Path, suffix: str, tail: int) -> dict[str, dict[str, dict[int, float]]]:
    """label -> {"tail", "final", "weight_sum"} -> seed -> value, from ``metrics.csv``."""
    accuracy: dict[tuple[str, int], list[float]] = defaultdict(list)
    weights: dict[tuple[str, int], list[float]] = defaultdict(list)
    with open(directory / "metrics.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            key = (row["label"] + suffix, int(row["seed"]))
            if row["test_accuracy"] not in ("", "nan"):
                accuracy[key].append(float(row["test_accuracy"]))
            if row["weight_sum"] not in ("", "nan"):
                weights[key].append(float(row["weight_sum"]))
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (label, seed), values in accuracy.items():
        out[label]["tail"][seed] = float(np.mean(values[-tail:]))
        out[label]["final"][seed] = values[-1]
        out[label]["weight_sum"][seed] = float(np.mean(weights[(label, seed)]))
    return out


def values(table: dict[str, dict[str, dict[int, float]]], label: str, column: str) -> np.ndarray:
    return np.array([table[label][column][seed] for seed in sorted(table[label][column])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="run directory of fedsampling-lognormal")
    parser.add_argument("matched", type=Path, help="run directory of the baselines at the matched step")
    parser.add_argument("--tail", type=int, default=5, help="evaluations averaged per run")
    args = parser.parse_args()
    table = read(args.run, "", args.tail) | read(args.matched, MATCHED, args.tail)
    print(f"| method | seeds | test accuracy, last {args.tail} | final test accuracy | mean weight sum |")
    print("|---|---|---|---|---|")
    for label in table:
        tail, final = values(table, label, "tail"), values(table, label, "final")
        print(
            f"| {label} | {tail.size} | {tail.mean():.3f} ± {tail.std(ddof=1):.3f} | "
            f"{final.mean():.3f} ± {final.std(ddof=1):.3f} | {values(table, label, 'weight_sum').mean():.3f} |"
        )
    print(f"\n| first | second | what differs | last {args.tail}: difference, p | final: difference, p |")
    print("|---|---|---|---|---|")
    for first, second, what in PAIRS:
        cells = []
        for column in ("tail", "final"):
            a, b = values(table, first, column), values(table, second, column)
            p = mannwhitneyu(a, b, alternative="two-sided").pvalue
            cells.append(f"{a.mean() - b.mean():+.3f}, p = {p:.2g}")
        print(f"| {first} | {second} | {what} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
