"""A config whose ``[federation]`` names a user's data file: paths resolved, the partition's default,
the resolved config written and read back, and overrides of ``federation.dataset``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsample import FedsampleError
from fedsample.data.builders import build_federation
from fedsample.experiments.config.overrides import apply_overrides
from fedsample.experiments.config.reading import config_from_dict, config_to_dict, load_config
from fedsample.experiments.config.toml_writer import config_to_toml, write_config

SAMPLERS = '\n[[samplers]]\nname = "md"\n'


def _npz(path: Path, *, clients: bool, rows: int = 60) -> Path:
    rng = np.random.default_rng(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {"client": rng.integers(0, 4, rows)} if clients else {}
    np.savez(path, x=rng.normal(size=(rows, 3)), y=rng.integers(0, 3, rows), **extra)
    return path


def _config(folder: Path, federation: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "experiment.toml"
    path.write_text(f'name = "mine"\n\n[federation]\n{federation}\n{SAMPLERS}')
    return path


def test_a_relative_data_file_is_resolved_against_the_config_and_round_trips(tmp_path: Path) -> None:
    data = _npz(tmp_path / "configs" / "data" / "train.npz", clients=False)
    test = _npz(tmp_path / "configs" / "data" / "test.npz", clients=False, rows=20)
    federation = 'dataset = "data/train.npz"\ntest_path = "data/test.npz"\ntarget_column = "y"\nnum_clients = 4'
    cfg = load_config(_config(tmp_path / "configs", federation))
    assert cfg.federation.dataset == str(data.resolve())
    assert cfg.federation.test_path == str(test.resolve())
    assert cfg.federation.partition == "dirichlet"  # no client column: FederationSpec's default
    resolved = config_to_dict(cfg)["federation"]
    assert resolved["dataset"] == str(data.resolve())
    assert resolved["task"] == "auto"
    assert "feature_columns" not in resolved  # None is left out
    # the resolved config, written elsewhere, reads back as the same config (absolute paths stay put)
    elsewhere = tmp_path / "runs" / "config.toml"
    elsewhere.parent.mkdir()
    write_config(cfg, elsewhere)
    assert f'dataset = "{data.resolve()}"' in elsewhere.read_text()
    again = load_config(elsewhere)
    assert again == cfg
    assert config_to_toml(again) == config_to_toml(cfg)
    assert build_federation(again.federation).test_sizes().sum() == 20


def test_feature_columns_round_trip_as_a_list(tmp_path: Path) -> None:
    _npz(tmp_path / "d.npz", clients=False)
    cfg = load_config(_config(tmp_path, 'dataset = "d.npz"\nfeature_columns = ["x"]\ntask = "classification"'))
    assert cfg.federation.feature_columns == ("x",)
    assert config_to_dict(cfg)["federation"]["feature_columns"] == ["x"]
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_a_file_with_the_client_column_defaults_to_its_natural_clients(tmp_path: Path) -> None:
    _npz(tmp_path / "clients.npz", clients=True)
    cfg = load_config(_config(tmp_path, 'dataset = "clients.npz"'))
    assert cfg.federation.partition == "natural"
    assert config_to_dict(cfg)["federation"]["partition"] == "natural"  # stated in the resolved config
    assert build_federation(cfg.federation).num_clients == 4
    renamed = load_config(_config(tmp_path, 'dataset = "clients.npz"\nclient_column = "group"'))
    assert renamed.federation.partition == "dirichlet"  # the file has no column "group"


def test_an_explicit_partition_is_kept_and_refused_at_build(tmp_path: Path) -> None:
    _npz(tmp_path / "clients.npz", clients=True)
    cfg = load_config(_config(tmp_path, 'dataset = "clients.npz"\npartition = "dirichlet"'))
    assert cfg.federation.partition == "dirichlet"
    with pytest.raises(FedsampleError, match=r"'partition' parameter .* must be 'natural' for .*clients\.npz"):
        build_federation(cfg.federation)


def test_a_missing_data_file_is_named_by_its_key(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError) as caught:
        load_config(_config(tmp_path, 'dataset = "nowhere.csv"'))
    assert caught.value.parameter == "federation.dataset"
    assert f"file not found: {str(tmp_path / 'nowhere.csv')!r}" in str(caught.value)


def test_file_keys_with_a_built_in_dataset_are_refused_by_key(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError) as caught:
        load_config(_config(tmp_path, 'dataset = "digits"\ntarget_column = "label"'))
    assert caught.value.parameter == "federation.target_column"
    assert "for the built-in dataset 'digits'" in str(caught.value)


def test_changing_the_dataset_to_a_file_fits_the_partition_to_it(tmp_path: Path) -> None:
    natural = str(_npz(tmp_path / "n.npz", clients=True))
    central = str(_npz(tmp_path / "c.npz", clients=False))
    cfg = config_from_dict({"name": "x", "federation": {"partition": "iid"}, "samplers": [{"name": "md"}]})
    assert apply_overrides(cfg, {"federation.dataset": natural}).federation.partition == "natural"
    assert apply_overrides(cfg, {"federation.dataset": central}).federation.partition == "iid"  # kept
    regression = config_from_dict({"name": "x", "federation": {"dataset": "osmd-linear"}, "samplers": [{"name": "md"}]})
    assert apply_overrides(regression, {"federation.dataset": central}).federation.partition == "dirichlet"
    back = apply_overrides(apply_overrides(cfg, {"federation.dataset": natural}), {"federation.dataset": "digits"})
    assert back.federation.partition == "dirichlet"
    with pytest.raises(FedsampleError, match=r"'federation\.dataset'"):
        apply_overrides(cfg, {"federation.dataset": str(tmp_path / "none.npz")})
