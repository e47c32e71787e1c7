"""The ``unknown-participation`` preset (issue 28 item 2): the aggregation policies when nobody knows the
clients' participation rates, on FedAU's setting (Wang & Ji, ICLR 2024).

Every client is asked every round (the ``full`` sampler) and takes part when it is available; the
availability rates are heterogeneous and tied to the clients' labels as in FedAU's experiments
(mean 0.1, floor 0.02, Dirichlet(0.1) over the labels: docs/failures.md). One comparison per policy
and availability process: ``renormalise`` (FedAvg over the participants), ``ignore`` (FedAvg over
everyone), ``inverse-probability`` with the known rates (FedAU's ``known_prob``), ``fedau``, ``mifa``
and ``fedvarp``, under Bernoulli and Markov availability. The quick form runs on the embedded digits;
there is no full form.
"""

from __future__ import annotations

from typing import Any

from fedsample.experiments.presets.suites import Suite, sampler_tables

__all__ = ["POLICY_LABELS", "unknown_participation_quick"]

# (policy, label): the released code's names in parentheses.
POLICY_LABELS: tuple[tuple[str, str], ...] = (
    ("renormalise", "renormalise (average_participating)"),
    ("ignore", "ignore (average_all)"),
    ("inverse-probability", "inverse-probability, known rates (known_prob)"),
    ("fedau", "FedAU (adaptive)"),
    ("mifa", "MIFA"),
    ("fedvarp", "FedVARP"),
)
PROCESSES = ("bernoulli", "markov")


def unknown_participation_quick() -> Suite:
    """Digits, 100 clients with Dirichlet(0.1) labels, all asked, label-tied availability of mean 0.1, MLP,
    150 rounds, 2 seeds; one comparison per policy and process."""
    suite: Suite = []
    for process in PROCESSES:
        for policy, label in POLICY_LABELS:
            participation: dict[str, Any] = {
                "availability": 0.1,
                "availability_label_alpha": 0.1,
                "availability_minimum": 0.02,
                "availability_process": process,
                "markov_off_to_on": 0.05,
                "policy": policy,
            }
            suite.append(
                (
                    f"{process}-{policy}",
                    {
                        "name": f"unknown-participation-{process}-{policy}",
                        "description": f"{label} under {process} availability tied to the labels (mean 0.1): "
                        "the embedded digits, 100 clients with Dirichlet(0.1) label mixtures, every client asked, "
                        "MLP, FedAvg (N = 5, B = 16), 2 seeds",
                        "seeds": 2,
                        "federation": {"dataset": "digits", "partition": "dirichlet", "num_clients": 100, "alpha": 0.1},
                        "model": {"kind": "mlp", "hidden": 50},
                        "training": {
                            "rounds": 150,
                            "num_sampled": 100,
                            "local_steps": 5,
                            "batch_size": 16,
                            "local_lr": 0.05,
                            "eval_every": 5,
                        },
                        "samplers": sampler_tables(("full", label, {})),
                        "participation": participation,
                        "report": {"target_accuracy": 0.8, "rolling_window": 5},
                    },
                )
            )
    return suite
