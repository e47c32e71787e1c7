"""Named presets: the papers' experiments as configs, on embedded data and at full scale.

Each preset has a *quick* form, which runs in minutes on 2 CPU cores with embedded or generated
data (the digits, MNIST-1D, paper 001's synthetic regression), and a *full* form, which follows
the paper when the user has its dataset files (``fedsample run PRESET --full --data-dir DIR``).
A full form that reads MNIST's IDX files runs on Fashion-MNIST or KMNIST with ``--dataset NAME``;
``--dataset fashion-mnist`` needs no ``--data-dir`` where the Debian package
``dataset-fashion-mnist`` is installed. File-backed data sets are tested on their own test split.
A preset is one comparison or a *suite* of comparisons (one per value of the parameter the
paper's figure sweeps), each run into its own subdirectory. ``impact-quadratic`` is the closed
form experiment of paper 003, which needs no training.

``fedsample presets`` lists them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fedsample._validation import invalid
from fedsample.data.loaders.idx import PACKAGED_DIRECTORIES
from fedsample.errors import FedsampleError
from fedsample.experiments.config import ExperimentConfig, config_from_dict
from fedsample.experiments.presets_systems import selection_systems_full, selection_systems_quick

# The MNIST-format data sets a full form that reads MNIST can be switched to, with display names.
_IDX_DATASETS = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "kmnist": "KMNIST"}

__all__ = ["DEFAULT_PRESET", "PRESETS", "Preset", "preset_configs"]

DEFAULT_PRESET = "default"
Suite = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Preset:
    """A named experiment: ``quick()`` and ``full(data_dir)`` give its comparisons as (suffix, config dict)."""

    name: str
    summary: str
    paper: str
    quick: Callable[[], Suite]
    full: Callable[[str], Suite] | None = None
    kind: Literal["comparison", "quadratic"] = "comparison"


def _one(config: dict[str, Any]) -> Suite:
    return [("", config)]


def _samplers(*entries: str | tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
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


def _default() -> Suite:
    return _one(
        {
            "name": "default",
            "description": "MD vs uniform vs clustered sampling (by size, by similarity) on the embedded digits: "
            "60 clients with Dirichlet(0.1) label mixtures, m = 6, MLP, FedAvg (N = 10, B = 10), 3 seeds",
            "seeds": 3,
            "federation": {"dataset": "digits", "partition": "dirichlet", "num_clients": 60, "alpha": 0.1},
            "model": {"kind": "mlp", "hidden": 50},
            "training": {"rounds": 60, "num_sampled": 6, "local_steps": 10, "batch_size": 10, "local_lr": 0.05},
            "samplers": _samplers(
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


def _mnist_shards_quick() -> Suite:
    return _one(
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
            "samplers": _samplers(
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


def _mnist_shards_full(data_dir: str) -> Suite:
    ((_, config),) = _mnist_shards_quick()
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
    return _one(config)


_DIRICHLET_ALPHAS = (0.001, 0.01, 0.1, 10.0)


def _dirichlet_quick() -> Suite:
    suite: Suite = []
    for alpha in _DIRICHLET_ALPHAS:
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
                    "samplers": _samplers(*_CLUSTERED),
                    "report": {"rolling_window": 10},
                    "run": {"checkpoint_every": 20},
                },
            )
        )
    return suite


def _dirichlet_full(data_dir: str) -> Suite:
    suite = []
    learning_rates = {0.001: 0.05, 0.01: 0.05, 0.1: 0.05, 10.0: 0.1}  # 000, Fig. 2
    for suffix, config in _dirichlet_quick():
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


def _md_vs_uniform_quick() -> Suite:
    suite: Suite = []
    for importance in ("uniform", "size"):
        for clients in (10, 40):
            suite.append(
                (
                    f"{importance}-importance-n{clients}",
                    {
                        "name": f"impact-md-vs-uniform-{importance}-n{clients}",
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
                        "training": {
                            "rounds": 50,
                            "num_sampled": clients // 2,
                            "local_steps": 10,
                            "batch_size": 20,
                            "local_lr": 0.05,
                            "importance": importance,
                        },
                        "samplers": _samplers("md", "uniform"),
                        "run": {"checkpoint_every": 10},
                    },
                )
            )
    return suite


def _md_vs_uniform_full(data_dir: str) -> Suite:
    suite: Suite = []
    for importance in ("uniform", "size"):
        for clients in (10, 20, 40, 80):
            suite.append(
                (
                    f"{importance}-importance-n{clients}",
                    {
                        "name": f"impact-md-vs-uniform-{importance}-n{clients}",
                        "description": f"Paper 003, Fig. 2: Shakespeare (LEAF), n = {clients}, m = n/2, LSTM",
                        "seeds": 5,
                        "federation": {"dataset": "shakespeare", "partition": "natural", "path": data_dir},
                        "model": {"kind": "lstm"},
                        "training": {
                            "rounds": 100,
                            "num_sampled": clients // 2,
                            "local_steps": 50,
                            "batch_size": 64,
                            "local_lr": 1.5,
                            "importance": importance,
                        },
                        "samplers": _samplers("md", "uniform"),
                        "run": {"checkpoint_every": 10},
                    },
                )
            )
    return suite


# --- paper 001: adaptive client sampling ----------------------------------------------------------

_BANDITS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("uniform-is", "uniform", {}),
    ("mabs", "MABS", {"delta": 0.01}),
    ("vrb", "VRB", {}),
    ("avare", "Avare", {}),
    ("osmd", "OSMD", {"eta": 0.0001}),
    ("adaptive-osmd", "Adaptive-OSMD", {}),
)


# Paper 001's synthetic experiment. Our baselines follow their own papers; the released code's
# variants run beside them where they differ: VRB fed the squared loss, in its mixture-with-uniform
# form, and MABS with the step derived from the horizon (docs/adaptive.md).
def _osmd_linear_samplers(rounds: int) -> tuple[tuple[str, str, dict[str, Any]], ...]:
    return (
        ("uniform-is", "uniform", {}),
        ("mabs", "MABS", {"delta": 0.01}),
        ("mabs", "MABS (released: horizon step)", {"step": "horizon", "horizon": rounds}),
        ("vrb", "VRB", {}),
        ("vrb", "VRB (released: loss, mixture)", {"feedback": "loss", "form": "mixture"}),
        ("avare", "Avare", {}),
        ("osmd", "OSMD", {"eta": 0.0001}),
        ("adaptive-osmd", "Adaptive-OSMD", {}),
        # Paper 001's full-information reference: p_m proportional to lambda_m ||g_m|| from every client's
        # current mini-batch gradient, probabilities <= 1e-10 set to zero as its released code does.
        ("optimal-distribution", "Optimal", {}),
    )


def _osmd_linear(rounds: int, seeds: int) -> Suite:
    """Paper 001's released setting (``--full``: 1000 rounds, 10 repetitions): K = 5, B = 10, SGD step
    0.1 on half the squared loss, which is step 0.05 on the engine's loss (no 1/2); each seed draws
    its own data (``per_seed``)."""
    suite: Suite = []
    for sigma in (1.0, 3.0, 10.0):
        suite.append(
            (
                f"sigma-{sigma:g}",
                {
                    "name": f"osmd-linear-sigma-{sigma:g}",
                    "description": f"Paper 001, Sec. 7: linear regression, 100 clients of 100 samples, client "
                    f"scales log-normal(sigma = {sigma:g}), K = 5, mini-batch SGD (B = 10, step 0.1 on half the "
                    f"squared loss = lr 0.05 here), {rounds} rounds, one data draw per seed",
                    "seeds": seeds,
                    "federation": {"dataset": "osmd-linear", "num_clients": 100, "sigma": sigma, "per_seed": True},
                    "model": {"kind": "linear"},
                    "algorithm": {"name": "minibatch-sgd"},
                    "training": {
                        "rounds": rounds,
                        "num_sampled": 5,
                        "local_steps": 1,
                        "batch_size": 10,
                        "local_lr": 0.05,
                        "eval_every": 5,
                    },
                    "samplers": _samplers(*_osmd_linear_samplers(rounds)),
                    "report": {"rolling_window": 5},
                    "run": {"checkpoint_every": 100},
                },
            )
        )
    return suite


def _osmd_skewed_quick() -> Suite:
    return _one(
        {
            "name": "osmd-skewed",
            "description": "Paper 001's real-data client sizes on MNIST-1D: 500 clients of skewed sizes "
            "(1/10/30/100 samples w.p. 0.65/0.2/0.1/0.05), K = 10 clients per round; FedAvg with an MLP "
            "(ours: the --full form is the paper's mini-batch SGD on softmax regression)",
            "seeds": 3,
            "federation": {"dataset": "mnist1d", "partition": "osmd-skewed", "num_clients": 500, "num_samples": 12000},
            "model": {"kind": "mlp", "hidden": 100},
            "training": {"rounds": 150, "num_sampled": 10, "local_steps": 5, "batch_size": 10, "local_lr": 0.05},
            "samplers": _samplers(*_BANDITS),
            "report": {"rolling_window": 10},
            "run": {"checkpoint_every": 25},
        }
    )


def _osmd_skewed_full(data_dir: str) -> Suite:
    # The authors' released real-data setting: mini-batch SGD (one step on min(B, n_i) distinct
    # rows, B = 5) on softmax regression from zero, lr 0.075, 1000 rounds, 5 repetitions on one
    # draw of the data, uniform sampling with replacement (unbiased weights) vs Adaptive-OSMD
    # (alpha = 0.4). Theirs validates on 10 training-split rows per client; ours on the test split.
    return _one(
        {
            "name": "osmd-skewed",
            "description": "Paper 001, real-data experiment: MNIST, 500 clients of 1/10/30/100 samples "
            "w.p. 0.65/0.2/0.1/0.05, mini-batch SGD (one step, B = 5, lr 0.075) on softmax regression, K = 10, "
            "1000 rounds; uniform (with replacement) vs Adaptive-OSMD; tested on the whole MNIST test split",
            "seeds": 5,
            "federation": {"dataset": "mnist", "partition": "osmd-skewed", "num_clients": 500, "path": data_dir},
            "model": {"kind": "softmax", "zero_init": True},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {
                "rounds": 1000,
                "num_sampled": 10,
                "local_steps": 1,
                "batch_size": 5,
                "local_lr": 0.075,
                "eval_every": 10,
            },
            "samplers": _samplers(("uniform-is", "uniform", {}), ("adaptive-osmd", "Adaptive-OSMD", {})),
            "report": {"rolling_window": 5},
            "run": {"checkpoint_every": 100},
        }
    )


# --- paper 004: FedSampling -----------------------------------------------------------------------


def _fedsampling_quick() -> Suite:
    return _one(
        {
            "name": "fedsampling-lognormal",
            "description": "Paper 004 on MNIST-1D: 5000 clients of log-normal sizes (mean 2.7, sigma 4), "
            "K = 256 samples per round; FedSampling (M = 300, eps = 3) vs FedAvg with uniform clients, "
            "MD, and the centralized baseline; mini-batch SGD. Controls for the step length (ours): "
            "FedSampling with no client clipped (M = 10^6) and with weights normalised to sum to one",
            "seeds": 3,
            "federation": {
                "dataset": "mnist1d",
                "partition": "lognormal",
                "lognormal_sigma": 4.0,
                "num_clients": 5000,
                "num_samples": 16000,
            },
            "model": {"kind": "mlp", "hidden": 100},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {
                "rounds": 300,
                "num_sampled": 96,
                "local_steps": 1,
                "batch_size": 64,
                "local_lr": 1.0,
                "eval_every": 10,
            },
            "samplers": _samplers(
                ("fedsampling", "FedSampling eps=3", {"target_samples": 256, "epsilon": 3.0}),
                (
                    "fedsampling",
                    "FedSampling eps=3, cumulative",
                    {"target_samples": 256, "epsilon": 3.0, "estimate": "cumulative"},
                ),
                ("fedsampling", "FedSampling no privacy", {"target_samples": 256, "probability": 1.0}),
                # Controls, one change each: clipped sizes make N~ about 0.63 N, so the weights above
                # sum to about 1.6 and the step is longer than the baselines'. With M above every
                # client N~ = N; with normalised weights the step is the baselines' whatever N~ is.
                (
                    "fedsampling",
                    "FedSampling no privacy, no clipping",
                    {"target_samples": 256, "probability": 1.0, "size_threshold": 1_000_000},
                ),
                (
                    "fedsampling",
                    "FedSampling eps=3, normalized",
                    {"target_samples": 256, "epsilon": 3.0, "normalize": True},
                ),
                ("fedavg-uniform", "FedAvg (uniform clients)", {"normalize": True}),
                ("md", "MD", {}),
            ),
            "baselines": {"centralized": True},
            "report": {"rolling_window": 5},
            "run": {"checkpoint_every": 50},
        }
    )


def _fedsampling_full(data_dir: str) -> Suite:
    ((_, config),) = _fedsampling_quick()
    config["description"] = "Paper 004 on FEMNIST (LEAF) with its natural clients: FedSampling vs FedAvg, K = 2048"
    config["federation"] = {"dataset": "femnist", "partition": "natural", "path": data_dir}
    config["model"] = {"kind": "cnn"}
    for sampler in config["samplers"]:
        if "target_samples" in sampler:
            sampler["target_samples"] = 2048
    config["training"] = config["training"] | {"rounds": 1000, "local_lr": 0.05}
    return _one(config)


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            DEFAULT_PRESET,
            "MD, uniform and clustered sampling on the embedded digits (the main job, about a minute)",
            "000",
            _default,
        ),
        Preset(
            "clustered-mnist-shards",
            "MD vs clustered (Alg. 1, Alg. 2) vs ideal target sampling, one digit per client",
            "000 Fig. 1",
            _mnist_shards_quick,
            _mnist_shards_full,
        ),
        Preset(
            "clustered-dirichlet",
            "MD vs clustered sampling on unbalanced clients, Dirichlet alpha in {0.001, 0.01, 0.1, 10}",
            "000 Fig. 2",
            _dirichlet_quick,
            _dirichlet_full,
        ),
        Preset(
            "impact-quadratic",
            "closed-form expected distance after one round (Full, MD, Uniform) vs 1000 simulated rounds",
            "003 Fig. 1, App. D",
            lambda: [],
            kind="quadratic",
        ),
        Preset(
            "impact-md-vs-uniform",
            "MD vs Uniform sampling with equal and size-proportional importances",
            "003 Fig. 2",
            _md_vs_uniform_quick,
            _md_vs_uniform_full,
        ),
        Preset(
            "osmd-linear",
            "adaptive samplers (OSMD, Adaptive-OSMD, MABS, VRB, Avare) on linear regression, sigma in {1, 3, 10}",
            "001 Sec. 7",
            lambda: _osmd_linear(rounds=300, seeds=5),
            lambda data_dir: _osmd_linear(rounds=1000, seeds=10),
        ),
        Preset(
            "osmd-skewed",
            "adaptive samplers with FedAvg on clients of skewed sizes",
            "001 Sec. 7",
            _osmd_skewed_quick,
            _osmd_skewed_full,
        ),
        Preset(
            "fedsampling-lognormal",
            "FedSampling (eps = 3) vs FedAvg with uniform clients, MD and centralized training, log-normal sizes",
            "004 Sec. 4",
            _fedsampling_quick,
            _fedsampling_full,
        ),
        Preset(
            "selection-systems",
            "MD, clustered, Adaptive-OSMD vs Oort, Power-of-Choice, DivFL on heterogeneous clients with a deadline",
            "issue 15",
            selection_systems_quick,
            selection_systems_full,
        ),
    )
}


def preset_configs(
    name: str, *, full: bool = False, data_dir: str | None = None, dataset: str | None = None
) -> list[tuple[str, ExperimentConfig]]:
    """The validated comparisons of preset ``name`` as (subdirectory suffix, config); ``""`` for a single one.

    With ``full``, ``dataset`` switches a full form that reads MNIST to another MNIST-format data set
    (``fashion-mnist``, ``kmnist``); ``data_dir`` may then be left out for a data set installed by a
    package (``fashion-mnist``: ``/usr/share/datasets/fashion-mnist``).
    """
    if name not in PRESETS:
        raise invalid("preset", "fedsample run", "one of {" + ", ".join(map(repr, PRESETS)) + "}", name)
    preset = PRESETS[name]
    if full:
        if preset.full is None:
            raise FedsampleError(
                f"The '--full' parameter needs a preset with a full-scale variant. Got {name!r}, which has none, "
                "instead.",
                parameter="--full",
            )
        if data_dir is None and name != "osmd-linear" and dataset not in PACKAGED_DIRECTORIES:
            raise FedsampleError(
                f"The '--data-dir' parameter must name the dataset directory for the full-scale {name!r}. Got None "
                "instead.",
                parameter="--data-dir",
            )
        suite = preset.full(data_dir or "")
        if dataset is not None:
            suite = [(suffix, _on_dataset(config, name, dataset, data_dir)) for suffix, config in suite]
    else:
        suite = preset.quick()
    return [(suffix, config_from_dict(config, source=f"preset {name!r}")) for suffix, config in suite]


def _on_dataset(config: dict[str, Any], name: str, dataset: str, data_dir: str | None) -> dict[str, Any]:
    """A full-form config switched from MNIST to another MNIST-format data set."""
    federation = config["federation"]
    if federation.get("dataset") == dataset:
        return config
    if federation.get("dataset") != "mnist" or dataset not in _IDX_DATASETS:
        reads = federation.get("dataset", "generated data")
        raise FedsampleError(
            f"The '--dataset' parameter of the full-scale {name!r} must be {reads!r}"
            + (f" or another MNIST-format data set ({', '.join(_IDX_DATASETS)})" if reads == "mnist" else "")
            + f". Got {dataset!r} instead.",
            parameter="--dataset",
        )
    federation = federation | {"dataset": dataset}
    if data_dir is None:
        federation.pop("path", None)  # the packaged directory (FederationSpec's default)
    description = re.sub(r"\bMNIST(?!-)", _IDX_DATASETS[dataset], config["description"])
    return config | {"federation": federation, "description": description}
