"""Issue 14's samplers in experiments: a config running ``bernoulli``, ``systematic``, ``optimal`` (both
modes) and ``optimal-distribution`` writes the two-phase columns for the two-phase runs only, saves
every sampler state as JSON that loads back, and an interrupted run resumes to identical metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict
from fedsample.experiments.results.metrics import TWO_PHASE_COLUMNS, read_metrics
from fedsample.experiments.runner import run_experiment
from fedsample.samplers.persistence import load_sampler, save_sampler
from run_interrupts import Interrupted, StopAfter, quiet_progress

ROUNDS = 6
SAMPLERS = [
    {"name": "bernoulli"},
    {"name": "systematic"},
    {"name": "optimal", "label": "optimal-oracle"},
    {"name": "optimal", "label": "optimal-protocol", "mode": "protocol"},
    {"name": "optimal-distribution", "label": "Optimal"},
]


def _config(checkpoint_every: int = 0) -> ExperimentConfig:
    return config_from_dict(
        {
            "name": "two-phase",
            "seeds": [0, 1],
            "federation": {"dataset": "osmd-linear", "num_clients": 12, "sigma": 3.0, "seed": 4},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {"rounds": ROUNDS, "num_sampled": 3, "local_steps": 1, "batch_size": 10, "local_lr": 0.05},
            "samplers": SAMPLERS,
            "run": {"checkpoint_every": checkpoint_every},
        }
    )


def test_the_new_samplers_run_from_a_config_with_two_phase_columns_and_json_states(tmp_path: Path) -> None:
    outcome = run_experiment(_config(), tmp_path / "run", progress=quiet_progress())
    table = read_metrics(outcome.run_dir)
    later = table["round"] > 0
    for label in ("optimal-oracle", "optimal-protocol", "Optimal"):
        rows = later & (table["label"] == label)
        assert np.all(table["computed_clients"][rows] == 12), label
        assert np.all(table["communicated_clients"][rows] == table["distinct_clients"][rows]), label
        assert np.all(np.isfinite(table["aggregate_variance_md"][rows])), label
    for label in ("bernoulli", "systematic"):
        rows = table["label"] == label
        assert np.all(table["computed_clients"][rows] == -1), label
        for name in TWO_PHASE_COLUMNS[2:]:
            assert np.all(np.isnan(table[name][rows])), (label, name)
    states = sorted((outcome.run_dir / "states").glob("*.json"))
    assert len(states) == len(SAMPLERS) * 2
    names = {entry.get("label", entry["name"]): entry["name"] for entry in SAMPLERS}
    for path in states:
        sampler, state = load_sampler(path)
        assert sampler.name == names[path.stem.rsplit("-seed", 1)[0]], path.name
        again = tmp_path / "again.json"
        save_sampler(again, sampler, state)  # the loaded state writes back the same file
        assert again.read_text() == path.read_text(), path.name


def test_an_interrupted_run_of_the_new_samplers_resumes_to_identical_metrics(tmp_path: Path) -> None:
    reference = run_experiment(_config(checkpoint_every=2), tmp_path / "reference", progress=quiet_progress())
    killed = tmp_path / "killed"
    with pytest.raises(Interrupted):
        run_experiment(_config(checkpoint_every=2), killed, progress=StopAfter(3))  # seeds batched: 6 rounds in all
    resumed = run_experiment(None, killed, resume=True, progress=quiet_progress())
    assert resumed.resumed_from == 2
    first, second = read_metrics(reference.run_dir), read_metrics(killed)
    first.pop("round_seconds")
    second.pop("round_seconds")
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    for path in sorted((reference.run_dir / "states").glob("*.json")):
        assert path.read_text() == (killed / "states" / path.name).read_text(), path.name
