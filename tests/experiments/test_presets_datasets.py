"""Full presets on real-size MNIST-format files: the own test split, ``--dataset`` and the packaged directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsample.cli import main
from fedsample.data.loaders import PACKAGED_DIRECTORIES
from fedsample.errors import FedsampleError
from fedsample.experiments.presets.catalogue import PRESETS, preset_configs
from idx_files import write_mnist_format

# The presets whose full form reads MNIST's IDX files.
MNIST_PRESETS = [
    name
    for name, preset in PRESETS.items()
    if preset.full is not None
    and any(c.federation.dataset == "mnist" for _, c in preset_configs(name, full=True, data_dir="/d"))
]


def test_the_presets_reading_mnist_are_known() -> None:
    assert set(MNIST_PRESETS) == {"clustered-mnist-shards", "osmd-skewed"}


@pytest.mark.parametrize("name", MNIST_PRESETS)
def test_fashion_mnist_full_form_defaults_to_the_packaged_directory(name: str) -> None:
    for _, config in preset_configs(name, full=True, dataset="fashion-mnist"):
        assert config.federation.dataset == "fashion-mnist"
        assert config.federation.path == "/usr/share/datasets/fashion-mnist"
        assert config.federation.test_fraction is None  # the data set's own test split
        assert "Fashion-MNIST" in config.description
    for _, config in preset_configs(name, full=True, dataset="kmnist", data_dir="/k"):
        assert (config.federation.dataset, config.federation.path) == ("kmnist", "/k")
    with pytest.raises(FedsampleError, match="--data-dir"):
        preset_configs(name, full=True, dataset="kmnist")


def test_dataset_of_another_kind_is_refused() -> None:
    with pytest.raises(FedsampleError, match=r"'--dataset'.*'cifar10'.*Got 'fashion-mnist'") as info:
        preset_configs("clustered-dirichlet", full=True, dataset="fashion-mnist")
    assert info.value.parameter == "--dataset"
    with pytest.raises(FedsampleError, match=r"'--dataset'.*Got 'cifar10'"):
        preset_configs("osmd-skewed", full=True, data_dir="/d", dataset="cifar10")
    ((_, config),) = preset_configs("clustered-dirichlet", full=True, data_dir="/d", dataset="cifar10")[:1]
    assert config.federation.test_fraction == 0.2  # paper 000's rule for CIFAR-10


def test_osmd_skewed_full_is_paper_001_real_data_setting() -> None:
    ((_, config),) = preset_configs("osmd-skewed", full=True, data_dir="/d")
    assert (config.federation.partition, config.federation.num_clients) == ("osmd-skewed", 500)
    assert (config.model.kind, config.model.zero_init, config.algorithm.name) == ("softmax", True, "minibatch-sgd")
    training = config.training
    assert (training.rounds, training.num_sampled, training.local_steps, training.batch_size) == (1000, 10, 1, 5)
    assert training.local_lr == 0.075
    assert [entry.name for entry in config.samplers] == ["uniform-is", "adaptive-osmd"]
    assert config.seeds == (0, 1, 2, 3, 4)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def test_full_shards_run_on_mnist_sized_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # MNIST's 6 : 1 ratio of training to test rows: a test fifth of the training rows would not fit.
    data = write_mnist_format(tmp_path / "mnist", np.repeat(np.arange(10), 30), np.repeat(np.arange(10), 5))
    out = tmp_path / "run"
    args = ["run", "clustered-mnist-shards", "--full", "--data-dir", str(data), "-o", str(out), "-q"]
    code, err = run_cli([*args, "--rounds", "1", "--seeds", "1", "--local-steps", "1", "--num-clients", "20"], capsys)
    assert (code, err) == (0, "")
    assert "test_fraction" not in (out / "config.toml").read_text()


def test_cli_fashion_mnist_reads_the_packaged_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_mnist_format(tmp_path / "fashion", np.repeat(np.arange(10), 50), np.repeat(np.arange(10), 2))
    monkeypatch.setitem(PACKAGED_DIRECTORIES, "fashion-mnist", str(data))
    out = tmp_path / "run"
    args = ["run", "osmd-skewed", "--full", "--dataset", "fashion-mnist", "-o", str(out), "-q"]
    code, err = run_cli([*args, "--rounds", "2", "--seeds", "1", "--num-clients", "20"], capsys)
    assert (code, err) == (0, ""), err
    text = (out / "config.toml").read_text()
    assert 'dataset = "fashion-mnist"' in text
    assert f'path = "{data}"' in text
    code, err = run_cli(["run", "osmd-skewed", "--full", "--dataset", "kmnist", "-o", str(tmp_path / "k")], capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert "--data-dir" in err
