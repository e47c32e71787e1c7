"""The ``correlation-and-heterogeneity`` preset (issue 28, items 3 and 6): FedCor and HiCS-FL against the
samplers they were published against, on the embedded digits.

FedCor (a Gaussian process of the clients' loss changes) and HiCS-FL (clusters by output-layer update
and estimated heterogeneity, the follow-up to clustered sampling) against MD (random by size),
clustered sampling by similarity (what HiCS-FL follows up), Power-of-Choice (pow-d: FedCor's and
HiCS-FL's rival) and DivFL (HiCS-FL's rival), with each method's bias measured on the report's fixed
feedback sequence. The quick form runs in well under a minute; there is no full form.
"""

from __future__ import annotations

from fedsample.experiments.presets.suites import Suite, sampler_tables

__all__ = ["correlation_and_heterogeneity_quick"]

ROUNDS = 40
HIDDEN = 50  # the MLP's hidden width: HiCS-FL's output layer is a Linear(50, 10)


def correlation_and_heterogeneity_quick() -> Suite:
    """Digits, 60 clients with Dirichlet(0.1) labels, m = 6, MLP, 40 rounds, 2 seeds."""
    return [
        (
            "",
            {
                "name": "correlation-and-heterogeneity",
                "description": "FedCor and HiCS-FL vs MD, clustered (similarity), Power-of-Choice (pow-d) and DivFL "
                "on the embedded digits: 60 clients with Dirichlet(0.1) label mixtures, m = 6, MLP, FedAvg "
                "(N = 10, B = 10), 40 rounds, 2 seeds",
                "seeds": 2,
                "federation": {"dataset": "digits", "partition": "dirichlet", "num_clients": 60, "alpha": 0.1},
                "model": {"kind": "mlp", "hidden": HIDDEN},
                "training": {"rounds": ROUNDS, "num_sampled": 6, "local_steps": 10, "batch_size": 10, "local_lr": 0.05},
                "samplers": sampler_tables(
                    "md",
                    ("clustered-similarity", "clustered (similarity)", {}),
                    ("power-of-choice", "Power-of-Choice (pow-d)", {"variant": "pow-d"}),
                    ("divfl", "DivFL", {}),
                    # The README's FMNIST settings, the warm-up and refits scaled to 40 rounds (refits at 16, 24, 32:
                    # round 20, where the report measures the bias, is one the process chooses).
                    ("fedcor", "FedCor", {"warmup_rounds": 10, "refit_interval": 8}),
                    ("hics-fl", "HiCS-FL", {"num_classes": 10, "output_inputs": HIDDEN, "horizon": ROUNDS}),
                ),
                "report": {"target_accuracy": 0.8, "rolling_window": 5, "measure_bias": True},
            },
        )
    ]
