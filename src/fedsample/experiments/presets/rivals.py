"""Presets of newer samplers against the ones they were published as rivals of.

* ``delta-vs-optimal``: DELTA (NeurIPS 2023, unbiased, from last-seen gradient diversity) against
  MD, paper 001's OSMD and Adaptive-OSMD and Chen et al.'s optimal sampling, on the embedded digits
  with strongly non-IID labels.
* ``active-and-balanced``: AFL (Goetz et al. 2019, loss valuations) and Fed-CBS (ICML 2023, class-balanced
  unions from label histograms) against MD, uniform, FLSim's high-loss and Power-of-Choice, on the same
  data; the report measures every sampler's bias (:mod:`fedsample.experiments.results.bias`).

The quick forms run on the embedded digits; there is no full form.
"""

from __future__ import annotations

from typing import Any

from fedsample.experiments.presets.suites import Suite, sampler_tables

__all__ = ["active_and_balanced_quick", "delta_vs_optimal_quick"]

_DIGITS_NON_IID: dict[str, Any] = {"dataset": "digits", "partition": "dirichlet", "num_clients": 60, "alpha": 0.1}


def _digits_mlp() -> dict[str, Any]:
    """What both presets share: 2 seeds, the non-IID digits, an MLP, FedAvg (N = 10, B = 10) for 40 rounds, m = 6."""
    return {
        "seeds": 2,
        "federation": dict(_DIGITS_NON_IID),
        "model": {"kind": "mlp", "hidden": 50},
        "training": {"rounds": 40, "num_sampled": 6, "local_steps": 10, "batch_size": 10, "local_lr": 0.05},
    }


def delta_vs_optimal_quick() -> Suite:
    """Digits, 60 clients with Dirichlet(0.1) labels, m = 6, MLP, 40 rounds, 2 seeds."""
    return [
        (
            "",
            {
                "name": "delta-vs-optimal",
                "description": "DELTA (released and paper scores) vs MD, OSMD, Adaptive-OSMD and optimal sampling "
                "on the embedded digits: 60 clients with Dirichlet(0.1) label mixtures, m = 6, MLP, FedAvg "
                "(N = 10, B = 10), 2 seeds",
                **_digits_mlp(),
                "samplers": sampler_tables(
                    "md",
                    ("osmd", "OSMD", {"eta": 1e-4}),
                    ("adaptive-osmd", "Adaptive-OSMD", {}),
                    ("optimal", "optimal (oracle norms)", {}),
                    ("delta", "DELTA (released)", {}),
                    ("delta", "DELTA (paper)", {"form": "paper"}),
                ),
                "report": {"target_accuracy": 0.8, "rolling_window": 5},
            },
        )
    ]


def active_and_balanced_quick() -> Suite:
    """Digits, 60 clients with Dirichlet(0.1) labels, m = 6, MLP, 40 rounds, 2 seeds, bias measured."""
    return [
        (
            "",
            {
                "name": "active-and-balanced",
                "description": "AFL and Fed-CBS vs MD, uniform, high-loss and Power-of-Choice on the embedded digits: "
                "60 clients with Dirichlet(0.1) label mixtures, m = 6, MLP, FedAvg (N = 10, B = 10), 2 seeds",
                **_digits_mlp(),
                "samplers": sampler_tables(
                    "md",
                    ("fedavg-uniform", "uniform (FedAvg)", {"normalize": True}),
                    ("high-loss", "high-loss (FLSim)", {}),
                    ("power-of-choice", "Power-of-Choice (rpow-d)", {}),
                    ("afl", "AFL", {}),
                    ("fedcbs", "Fed-CBS", {}),
                ),
                "report": {"target_accuracy": 0.8, "rolling_window": 5, "measure_bias": True},
            },
        )
    ]
