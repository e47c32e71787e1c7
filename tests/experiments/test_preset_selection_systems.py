"""The ``selection-systems`` preset (issue 15 item 6): the six samplers on a heterogeneous system with a
deadline, quick on the embedded digits, full on Fashion-MNIST (the packaged files when installed)."""

from __future__ import annotations

import os

import pytest

from fedsample.data.loaders import PACKAGED_DIRECTORIES
from fedsample.errors import FedsampleError
from fedsample.experiments.presets.catalogue import PRESETS, preset_configs

NAMES = ["md", "clustered-similarity", "adaptive-osmd", "oort", "power-of-choice", "power-of-choice", "divfl"]


def test_quick_form_compares_the_six_samplers_on_the_clock() -> None:
    ((suffix, config),) = preset_configs("selection-systems")
    assert suffix == ""
    assert [entry.name for entry in config.samplers] == NAMES
    variants = [entry.params.get("variant", "rpow-d") for entry in config.samplers if entry.name == "power-of-choice"]
    assert variants == ["rpow-d", "pow-d"]
    assert config.federation.dataset == "digits"
    assert config.system is not None
    assert config.system.deadline is not None
    assert config.system.compute_sigma > 0  # heterogeneous speeds
    assert config.report.target_accuracy is not None


def test_full_form_reads_fashion_mnist_from_the_data_directory_or_the_package() -> None:
    ((_, config),) = preset_configs("selection-systems", full=True, data_dir="/f")
    assert (config.federation.dataset, config.federation.path) == ("fashion-mnist", "/f")
    assert [entry.name for entry in config.samplers] == NAMES
    ((_, packaged),) = preset_configs("selection-systems", full=True, dataset="fashion-mnist")
    assert packaged.federation.path == PACKAGED_DIRECTORIES["fashion-mnist"]
    with pytest.raises(FedsampleError, match="--data-dir"):
        preset_configs("selection-systems", full=True)
    assert PRESETS["selection-systems"].full is not None


@pytest.mark.skipif(
    not os.path.isdir(PACKAGED_DIRECTORIES["fashion-mnist"]), reason="dataset-fashion-mnist is not installed"
)
def test_full_form_builds_on_the_packaged_fashion_mnist() -> None:
    from fedsample.experiments.build import build_experiment

    ((_, config),) = preset_configs("selection-systems", full=True, dataset="fashion-mnist")
    experiment = build_experiment(config)
    assert experiment.data.num_clients == 100
    assert experiment.participation.system is not None
