"""A run's recorded settings are the settings it ran with (issue 35 item 4).

A federation whose clients are a data file's client column reads neither ``num_clients`` nor the
partitioners' keys (``alpha``, ``num_samples``, ``sigma``...). A run on such a file recorded
``num_clients = 50`` (the default) and those keys in ``config.toml``, ``report.md`` and the trackers'
parameters, for a federation of 30 clients. Here a CSV and a Parquet file of 30 clients run one round, and
every recorded setting is compared with the federation that ran.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample.data.builders import build_federation
from fedsample.experiments import runner as runner_module
from fedsample.experiments.config import config_from_dict, config_to_dict
from fedsample.experiments.config.sections import unused_federation_keys
from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.runner import run_experiment

CLIENTS = 30
NOT_READ = ("alpha", "num_samples", "sigma", "lognormal_sigma", "sizes")


def _write(path: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = 6 * CLIENTS
    columns = {
        "user": np.repeat(np.arange(CLIENTS) * 7 + 100, 6),  # ids that are not 0..n-1
        "f1": rng.normal(size=rows),
        "f2": rng.normal(size=rows),
        "label": rng.integers(0, 3, rows),
    }
    if path.suffix == ".csv":
        lines = [",".join(columns)] + [",".join(str(c[i]) for c in columns.values()) for i in range(rows)]
        path.write_text("\n".join(lines) + "\n")
    else:
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        pq.write_table(pa.table(columns), path)
    return path


class _Quiet(ProgressLine):
    def message(self, text: str) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_file_federation_records_its_own_client_count_and_only_the_keys_it_read(
    suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _write(tmp_path / f"clients{suffix}")
    config = config_from_dict(
        {
            "name": "mine",
            "seeds": 1,
            "federation": {"dataset": str(data), "target_column": "label", "client_column": "user", "alpha": 0.1},
            "model": {"kind": "mlp", "hidden": 4},
            "training": {"rounds": 1, "num_sampled": 2, "local_steps": 1, "batch_size": 4},
            "samplers": [{"name": "md"}],
        }
    )
    assert config.federation.partition == "natural"
    assert config.federation.num_clients == 50  # the default, which the federation does not read
    given: dict[str, Any] = {}
    opened = runner_module.open_trackers

    def spy(tracking: Any, run_dir: Path, **options: Any) -> Any:
        given.update(options["parameters"])
        return opened(tracking, run_dir, **options)

    monkeypatch.setattr(runner_module, "open_trackers", spy)
    out = tmp_path / "run"
    outcome = run_experiment(config, out, progress=_Quiet())
    assert build_federation(config.federation).num_clients == CLIENTS  # the federation that ran

    recorded = tomllib.loads((out / "config.toml").read_text())["federation"]
    assert recorded["num_clients"] == CLIENTS
    assert not set(NOT_READ) & set(recorded), recorded
    report = (out / "report.md").read_text()
    assert f"num_clients = {CLIENTS}\n" in report
    assert not [line for line in report.splitlines() if line.split(" = ")[0] in NOT_READ]
    assert given["federation.num_clients"] == CLIENTS
    assert not {f"federation.{key}" for key in NOT_READ} & set(given), sorted(given)
    # the run resumes under the config it was given (num_clients 50, alpha 0.1: neither is read)
    again = run_experiment(config, out, resume=True, progress=_Quiet())
    assert again.summary == outcome.summary


def test_the_partitioners_keys_are_recorded_only_where_they_are_read() -> None:
    """The resolved config of a built-in federation keeps the keys its partition and dataset read."""

    def federation(**values: Any) -> dict[str, Any]:
        cfg = config_from_dict({"name": "x", "federation": values, "samplers": [{"name": "md"}]})
        return config_to_dict(cfg)["federation"]

    dirichlet = federation(dataset="digits", partition="dirichlet", alpha=0.1)
    assert dirichlet["alpha"] == 0.1
    assert not {"num_samples", "sigma", "lognormal_sigma"} & set(dirichlet)
    lognormal = federation(dataset="mnist1d", partition="lognormal", lognormal_sigma=2.0, num_samples=500)
    assert (lognormal["lognormal_sigma"], lognormal["num_samples"]) == (2.0, 500)
    assert "alpha" not in lognormal
    osmd = federation(dataset="osmd-linear", sigma=3.0)
    assert (osmd["sigma"], osmd["num_clients"]) == (3.0, 50)
    assert "alpha" not in osmd
    # a key left out reads back as its default, which the federation does not read either
    cfg = config_from_dict(
        {"name": "x", "federation": {"partition": "iid", "alpha": 0.1}, "samplers": [{"name": "md"}]}
    )
    again = config_from_dict(config_to_dict(cfg))
    assert "alpha" in unused_federation_keys(again.federation)
    assert config_to_dict(again) == config_to_dict(cfg)
