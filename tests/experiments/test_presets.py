"""Every preset gives valid configs, quick and full, and the paper settings they claim."""

from __future__ import annotations

import pytest

from fedsample.errors import FedsampleError
from fedsample.experiments.presets.catalogue import PRESETS, preset_configs


@pytest.mark.parametrize("name", [name for name, preset in PRESETS.items() if preset.kind != "quadratic"])
def test_every_quick_preset_resolves_to_valid_configs(name: str) -> None:
    parts = preset_configs(name)
    assert parts
    suffixes = [suffix for suffix, _ in parts]
    assert len(set(suffixes)) == len(suffixes)
    for _, config in parts:
        assert config.seeds
        assert config.samplers


@pytest.mark.parametrize("name", [name for name, preset in PRESETS.items() if preset.full is not None])
def test_every_full_preset_resolves_and_reads_the_data_directory(name: str) -> None:
    parts = preset_configs(name, full=True, data_dir="/data/files")
    for _, config in parts:
        if config.federation.dataset not in ("osmd-linear", "mnist1d", "digits"):
            assert config.federation.path == "/data/files"
    if name != "osmd-linear":
        with pytest.raises(FedsampleError, match="--data-dir"):
            preset_configs(name, full=True)


def test_full_mnist_shards_follows_paper_000() -> None:
    ((_, config),) = preset_configs("clustered-mnist-shards", full=True, data_dir="/d")
    assert (config.federation.dataset, config.federation.partition, config.federation.num_clients) == (
        "mnist",
        "one-label",
        100,
    )
    assert (config.training.num_sampled, config.training.local_steps, config.training.batch_size) == (10, 50, 50)
    assert config.training.local_lr == 0.01
    assert config.model.hidden == 50
    names = [entry.name for entry in config.samplers]
    assert names.count("clustered-size") == 2
    assert {"md", "clustered-similarity", "clustered-groups"} <= set(names)


def test_unknown_preset_and_missing_full_variant_are_one_line_errors() -> None:
    with pytest.raises(FedsampleError, match=r"'preset'.*'nope'"):
        preset_configs("nope")
    with pytest.raises(FedsampleError, match="--full"):
        preset_configs("impact-quadratic", full=True, data_dir="/d")
