"""The ``dp-samplers`` preset (issue 36 item 5): samplers compared at an equal user-level privacy budget.

Every sampler trains with DP-FedAvg (:class:`~fedsample.privacy.DPFedAvg`), its noise multiplier
solved so that its most exposed client spends exactly ``epsilon`` (``delta = 1e-5``) after the
training's rounds (``privacy.target_epsilon``), one comparison per ``epsilon`` in 1, 4 and 8. The
samplers are those the accountant bounds: MD, uniform without replacement, Poisson and clustered
sampling by size (paper 000's Algorithm 1). Clustered sampling by similarity (Algorithm 2) and
optimal sampling are refused by the accountant (their selection reads the clients' updates), so
they have no epsilon to be compared at (docs/privacy.md). The quick form trains on the embedded
digits (equal importances); the full form on Fashion-MNIST's IDX files (the Debian package
``dataset-fashion-mnist``, or ``--data-dir``), with Dirichlet label skew over clients of unbalanced sizes
weighted by size.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DP_EPSILONS", "DP_SAMPLERS", "dp_samplers_full", "dp_samplers_quick"]

DP_EPSILONS = (1.0, 4.0, 8.0)
DP_SAMPLERS: tuple[tuple[str, str], ...] = (
    ("md", "MD"),
    ("uniform", "uniform"),
    ("poisson", "Poisson"),
    ("clustered-size", "clustered (Alg. 1)"),
)


def _suite(base: dict[str, Any], what: str) -> list[tuple[str, dict[str, Any]]]:
    suite = []
    for epsilon in DP_EPSILONS:
        config = {
            **base,
            "name": f"dp-samplers-eps-{epsilon:g}",
            "description": f"DP-FedAvg at epsilon {epsilon:g} (delta 1e-5, the most exposed client) for every "
            f"sampler: {what}",
            "samplers": [{"name": name, "label": label} for name, label in DP_SAMPLERS],
            # RDP: each sampler's noise is solved by bisection, and RDP's curves cost a multiplication.
            "privacy": {"clip_norm": 1.0, "target_epsilon": epsilon, "delta": 1e-5, "accountant": "rdp"},
        }
        suite.append((f"eps-{epsilon:g}", config))
    return suite


def dp_samplers_quick() -> list[tuple[str, dict[str, Any]]]:
    """Digits, 50 clients with Dirichlet(0.3) labels and equal importances, m = 10, MLP, 30 rounds, 2 seeds."""
    base = {
        "seeds": 2,
        "federation": {
            "dataset": "digits",
            "partition": "dirichlet",
            "num_clients": 50,
            "alpha": 0.3,
        },
        "model": {"kind": "mlp", "hidden": 50},
        "training": {
            "rounds": 30,
            "num_sampled": 10,
            "local_steps": 5,
            "batch_size": 10,
            "local_lr": 0.05,
            "importance": "uniform",  # equal weights: one group of clients a design, a fast accountant
        },
        "report": {"rolling_window": 5},
    }
    return _suite(base, "embedded digits, 50 clients, Dirichlet(0.3) labels, m = 10, MLP, 30 rounds")


def dp_samplers_full(data_dir: str) -> list[tuple[str, dict[str, Any]]]:
    """Fashion-MNIST, 100 clients of unbalanced sizes with Dirichlet(0.3) labels, m = 10, MLP, 200 rounds, 3 seeds."""
    federation: dict[str, Any] = {
        "dataset": "fashion-mnist",
        "partition": "dirichlet",
        "sizes": "unbalanced",
        "num_clients": 100,
        "alpha": 0.3,
    }
    if data_dir:
        federation["path"] = data_dir
    base = {
        "seeds": 3,
        "federation": federation,
        "model": {"kind": "mlp", "hidden": 100},
        "training": {
            "rounds": 200,
            "num_sampled": 10,
            "local_steps": 10,
            "batch_size": 32,
            "local_lr": 0.05,
            "eval_every": 5,
        },
        "report": {"rolling_window": 5},
        "run": {"checkpoint_every": 50},
    }
    return _suite(base, "Fashion-MNIST, 100 clients, Dirichlet(0.3) labels, m = 10, MLP 784-100-10, 200 rounds")
