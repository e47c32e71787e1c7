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

from fedsample._validation import Options, invalid
from fedsample.data.loaders.idx import PACKAGED_DIRECTORIES
from fedsample.errors import FedsampleError
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict
from fedsample.experiments.presets.correlated import correlation_and_heterogeneity_quick
from fedsample.experiments.presets.participation import unknown_participation_quick
from fedsample.experiments.presets.rivals import active_and_balanced_quick, delta_vs_optimal_quick
from fedsample.experiments.presets.suites import (
    Suite,
    default_suite,
    dirichlet_full_suite,
    dirichlet_quick_suite,
    md_vs_uniform_full_suite,
    md_vs_uniform_quick_suite,
    mnist_shards_full_suite,
    mnist_shards_quick_suite,
)
from fedsample.experiments.presets.suites_learning import (
    fedsampling_full_suite,
    fedsampling_quick_suite,
    osmd_linear_suite,
    osmd_skewed_full_suite,
    osmd_skewed_quick_suite,
)
from fedsample.experiments.presets.systems import selection_systems_full, selection_systems_quick

# The MNIST-format data sets a full form that reads MNIST can be switched to, with display names.
_IDX_DATASETS = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "kmnist": "KMNIST"}

__all__ = ["DEFAULT_PRESET", "PRESETS", "Preset", "preset_configs"]

DEFAULT_PRESET = "default"


@dataclass(frozen=True)
class Preset:
    """A named experiment: ``quick()`` and ``full(data_dir)`` give its comparisons as (suffix, config dict)."""

    name: str
    summary: str
    paper: str
    quick: Callable[[], Suite]
    full: Callable[[str], Suite] | None = None
    kind: Literal["comparison", "quadratic"] = "comparison"


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            DEFAULT_PRESET,
            "MD, uniform and clustered sampling on the embedded digits "
            "(the main job, about 8 s on an idle 2-core machine)",
            "000",
            default_suite,
        ),
        Preset(
            "clustered-mnist-shards",
            "MD vs clustered (Alg. 1, Alg. 2) vs ideal target sampling, one digit per client",
            "000 Fig. 1",
            mnist_shards_quick_suite,
            mnist_shards_full_suite,
        ),
        Preset(
            "clustered-dirichlet",
            "MD vs clustered sampling on unbalanced clients, Dirichlet alpha in {0.001, 0.01, 0.1, 10}",
            "000 Fig. 2",
            dirichlet_quick_suite,
            dirichlet_full_suite,
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
            md_vs_uniform_quick_suite,
            md_vs_uniform_full_suite,
        ),
        Preset(
            "osmd-linear",
            "adaptive samplers (OSMD, Adaptive-OSMD, MABS, VRB, Avare) on linear regression, sigma in {1, 3, 10}",
            "001 Sec. 7",
            lambda: osmd_linear_suite(rounds=300, seeds=5),
            lambda data_dir: osmd_linear_suite(rounds=1000, seeds=10),
        ),
        Preset(
            "osmd-skewed",
            "adaptive samplers with FedAvg on clients of skewed sizes",
            "001 Sec. 7",
            osmd_skewed_quick_suite,
            osmd_skewed_full_suite,
        ),
        Preset(
            "fedsampling-lognormal",
            "FedSampling (eps = 3) vs FedAvg with uniform clients, MD and centralized training, log-normal sizes",
            "004 Sec. 4",
            fedsampling_quick_suite,
            fedsampling_full_suite,
        ),
        Preset(
            "selection-systems",
            "MD, clustered, Adaptive-OSMD vs Oort, Power-of-Choice, DivFL on heterogeneous clients with a deadline",
            "issue 15",
            selection_systems_quick,
            selection_systems_full,
        ),
        Preset(
            "delta-vs-optimal",
            "DELTA (unbiased, gradient diversity) vs MD, OSMD, Adaptive-OSMD and optimal sampling, non-IID digits",
            "issue 28",
            delta_vs_optimal_quick,
        ),
        Preset(
            "active-and-balanced",
            "AFL (loss valuations) and Fed-CBS (class-balanced unions) vs MD, uniform, high-loss, Power-of-Choice",
            "issue 28",
            active_and_balanced_quick,
        ),
        Preset(
            "unknown-participation",
            "renormalise, ignore, inverse-probability vs FedAU, MIFA, FedVARP; label-tied Bernoulli/Markov presence",
            "issue 28",
            unknown_participation_quick,
        ),
        Preset(
            "correlation-and-heterogeneity",
            "FedCor (loss correlations, a Gaussian process) and HiCS-FL (heterogeneity clusters) vs MD, clustered, "
            "pow-d, DivFL",
            "issue 28",
            correlation_and_heterogeneity_quick,
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
        raise invalid("preset", "fedsample run", Options(tuple(PRESETS)), name)
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
