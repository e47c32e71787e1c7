"""The ``selection-systems`` preset (issue 15 item 6): the field's client-selection systems on the clock.

MD (random selection by size), clustered sampling by similarity and Adaptive-OSMD, the unbiased
schemes, against Oort, Power-of-Choice (its stale-loss rpow-d and the paper's pow-d, whose
candidates' extra round trip the clock charges) and DivFL, the biased systems of docs/selection-systems.md,
on clients of heterogeneous speeds (log-normal compute costs and links) with a round deadline
(docs/system.md); the report shows each method's bias measured on a fixed feedback sequence
(:mod:`fedsample.experiments.results.bias`). The quick form runs on the embedded digits in about 15 s; the full form on
Fashion-MNIST's IDX files (the Debian package ``dataset-fashion-mnist``, or ``--data-dir``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["selection_systems_full", "selection_systems_quick"]

# (name, label, hyperparameters) of the compared samplers.
SAMPLERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("md", "MD (random, by size)", {}),
    ("clustered-similarity", "clustered (similarity)", {}),
    ("adaptive-osmd", "Adaptive-OSMD", {}),
    ("oort", "Oort", {}),
    ("power-of-choice", "Power-of-Choice (rpow-d)", {}),
    ("power-of-choice", "Power-of-Choice (pow-d)", {"variant": "pow-d"}),
    ("divfl", "DivFL", {}),
)


def _system(compute: float, reference_parameters: float, deadline: float) -> dict[str, Any]:
    """A heterogeneous system: log-normal compute costs (sigma 1, so the slowest decile is about 3.6x
    the median) and links, and a deadline that makes the slow tail late."""
    return {
        "distribution": "lognormal",
        "compute": compute,
        "compute_sigma": 1.0,
        "upload": 10.0,
        "download": 50.0,
        "bandwidth_sigma": 0.5,
        "latency": 0.05,
        "reference_parameters": reference_parameters,
        "deadline": deadline,
    }


def _samplers() -> list[dict[str, Any]]:
    return [{"name": name, "label": label, **params} for name, label, params in SAMPLERS]


def selection_systems_quick() -> list[tuple[str, dict[str, Any]]]:
    """Digits, 60 clients with Dirichlet(0.3) labels, m = 6, MLP; a median round of about 25 s with a 60 s deadline."""
    return [
        (
            "",
            {
                "name": "selection-systems",
                "description": "Client-selection systems on the clock: MD, clustered (similarity), Adaptive-OSMD, "
                "Oort, Power-of-Choice (rpow-d, pow-d) and DivFL on the embedded digits, 60 clients with "
                "Dirichlet(0.3) labels, m = 6, MLP, FedAvg (N = 5, B = 10), log-normal client speeds, "
                "60 s deadline, 2 seeds",
                "seeds": 2,
                "federation": {"dataset": "digits", "partition": "dirichlet", "num_clients": 60, "alpha": 0.3},
                "model": {"kind": "mlp", "hidden": 50},
                "training": {"rounds": 40, "num_sampled": 6, "local_steps": 5, "batch_size": 10, "local_lr": 0.05},
                "samplers": _samplers(),
                # 50 samples a round at 0.5 s per sample for a model of the MLP's ~3.8k parameters: ~25 s median.
                "system": _system(compute=0.5, reference_parameters=3810.0, deadline=60.0),
                "report": {"target_accuracy": 0.8, "rolling_window": 5, "measure_bias": True},
            },
        )
    ]


def selection_systems_full(data_dir: str) -> list[tuple[str, dict[str, Any]]]:
    """Fashion-MNIST, 100 clients with Dirichlet(0.3) labels, m = 10, MLP, 200 rounds evaluated every 2, 3 seeds."""
    federation: dict[str, Any] = {"dataset": "fashion-mnist", "partition": "dirichlet", "num_clients": 100}
    federation["alpha"] = 0.3
    if data_dir:
        federation["path"] = data_dir
    return [
        (
            "",
            {
                "name": "selection-systems",
                "description": "Client-selection systems on the clock on Fashion-MNIST: 100 clients with "
                "Dirichlet(0.3) labels, m = 10, MLP 784-100-10, FedAvg (N = 20, B = 32), log-normal client "
                "speeds, deadline 3x the median round, 3 seeds",
                "seeds": 3,
                "federation": federation,
                # An MLP, not a CNN: 21 runs of 200 rounds of a CNN take hours on 2 CPU cores, the MLP minutes.
                "model": {"kind": "mlp", "hidden": 100},
                "training": {
                    "rounds": 200,
                    "num_sampled": 10,
                    "local_steps": 20,
                    "batch_size": 32,
                    "local_lr": 0.05,
                    "eval_every": 2,
                },
                "samplers": _samplers(),
                # 640 samples a round at 0.05 s per sample for the MLP's 79,510 parameters: ~32 s median.
                "system": _system(compute=0.05, reference_parameters=79510.0, deadline=100.0),
                "report": {"target_accuracy": 0.75, "rolling_window": 10, "measure_bias": True},
                "run": {"checkpoint_every": 20},
            },
        )
    ]
