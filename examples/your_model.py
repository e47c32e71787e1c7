"""Bring your own model and data: a CNN with BatchNorm and dropout on numpy arrays, three samplers x two seeds.

Run it with ``python examples/your_model.py [OUT]`` (default ``runs/your-model``); docs/your-model.md
walks through it, and ``tests/test_examples.py`` runs it. It writes the run directory that
``fedsample run`` writes (``config.toml``, ``metrics.csv``/``.parquet``, ``summary.md``, ``plots/``,
``report.md``), which ``fedsample report`` and ``fedsample plot`` read.
"""

from __future__ import annotations

import sys

import numpy as np
from torch import nn

from fedsample.data import ArrayDataset, federate, partition_dirichlet
from fedsample.engine import Model
from fedsample.experiments import run_comparison


class SmallCNN(nn.Module):
    """conv-BatchNorm-ReLU, max pooling, dropout and a linear head, for 1 x 12 x 12 images."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(0.25)
        self.head = nn.Linear(8 * 6 * 6, classes)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.head(self.dropout(self.features(x).flatten(1)))


def my_arrays(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stand-in for your own arrays: 1 x 12 x 12 images of 4 classes, each class a blurred template."""
    rng = np.random.default_rng(seed)
    templates = rng.normal(size=(4, 1, 12, 12)).astype(np.float32)
    labels = rng.integers(0, 4, 1200)
    images = templates[labels] + rng.normal(scale=2.5, size=(1200, 1, 12, 12)).astype(np.float32)
    return images, labels


def main(out: str = "runs/your-model") -> None:
    images, labels = my_arrays()
    train, test = (
        ArrayDataset(images[:1000], labels[:1000], name="my-images"),
        ArrayDataset(images[1000:], labels[1000:]),
    )
    rng = np.random.default_rng(1)
    # 20 clients of 50 images each, with Dirichlet(0.3) label mixtures; the test rows keep each client's mix.
    partition = partition_dirichlet(train.targets, alpha=0.3, sizes=np.full(20, 50), rng=rng)
    test_partition = partition_dirichlet(test.targets, alpha=1000.0, sizes=np.full(20, 10), rng=rng)
    data = federate(train, partition, test=test, test_partition=test_partition, name="my-images")
    model = Model(SmallCNN, loss="cross-entropy", name="SmallCNN")
    outcome = run_comparison(
        data,
        model,
        ["md", "uniform", "clustered-size"],
        out,
        name="your-model",
        seeds=2,
        training={"rounds": 15, "num_sampled": 5, "local_steps": 5, "batch_size": 16, "local_lr": 0.05},
        overwrite=True,
    )
    for row in outcome.summary:
        accuracy = f"{row.final_test_accuracy_mean:.3f} +- {row.final_test_accuracy_std:.3f}"
        print(f"{row.label:>16}: final test accuracy {accuracy}")
    print(f"run directory: {outcome.run_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
