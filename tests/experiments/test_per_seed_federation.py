"""``federation.per_seed``: each run seed trains on its own realization of the federation.

Paper 001's regression draws the client scales once per data set; one draw moved every method's
final loss by up to 0.6 in log scale, so a comparison over seeds must also vary the data. These
tests check that the realization is keyed by ``(federation.seed, run seed)``, that the runner trains
each seed's runs on it (the same results as simulating that seed alone on that realization), that a
run interrupted mid-way resumes from the per-seed checkpoints to identical results, and that the
default keeps one shared federation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fedsample.data.builders import FederationSpec, build_federation
from fedsample.errors import FedsampleError
from fedsample.experiments.build import build_experiment
from fedsample.experiments.config.reading import ExperimentConfig, config_from_dict
from fedsample.experiments.results.metrics import read_metrics
from fedsample.experiments.runner import run_experiment
from run_interrupts import Interrupted, StopAfter, quiet_progress

ROUNDS = 20


def _config(per_seed: bool, *, checkpoint_every: int = 0) -> ExperimentConfig:
    return config_from_dict(
        {
            "name": "per-seed",
            "seeds": [0, 1, 2],
            "federation": {"dataset": "osmd-linear", "num_clients": 20, "sigma": 3.0, "seed": 4, "per_seed": per_seed},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {"rounds": ROUNDS, "num_sampled": 3, "local_steps": 1, "batch_size": 10, "local_lr": 0.05},
            "samplers": [{"name": "uniform-is"}, {"name": "vrb", "form": "mixture"}],
            "run": {"checkpoint_every": checkpoint_every},
        }
    )


def test_a_replicate_keys_its_own_realization() -> None:
    """build_federation(spec, replicate=s) is deterministic in (seed, s), differs across s, and
    replicate=None is the realization of the spec's seed alone (unchanged for every other preset)."""
    spec = FederationSpec(dataset="osmd-linear", partition="natural", num_clients=20, sigma=10.0, seed=4)
    scales = [build_federation(spec, replicate=s).metadata["client_scales"] for s in (0, 1)]
    again = build_federation(spec, replicate=1).metadata["client_scales"]
    np.testing.assert_array_equal(scales[1], again)
    assert not np.allclose(scales[0], scales[1])
    # sigma = 10: the draws of the client scales differ by orders of magnitude between replicates.
    assert np.abs(np.log(np.sort(scales[0])) - np.log(np.sort(scales[1]))).max() > 1.0
    shared = build_federation(spec).metadata["client_scales"]
    np.testing.assert_array_equal(
        shared, build_federation(dataclasses.replace(spec, per_seed=True)).metadata["client_scales"]
    )
    # replicate 0 included (numpy pads seed keys with zeros, so a bare key 0 would repeat the shared draw)
    assert not np.allclose(shared, scales[0])
    assert not np.allclose(shared, scales[1])
    with pytest.raises(FedsampleError, match="'replicate'"):
        build_federation(spec, replicate=-1)


def test_the_groups_follow_the_option() -> None:
    """Off: one group of every run on one federation. On: one group per seed, on that seed's realization."""
    shared = build_experiment(_config(False))
    ((data, indices),) = shared.federation_groups()
    assert data is shared.data
    assert indices == list(range(6))
    experiment = build_experiment(_config(True))
    groups = experiment.federation_groups()
    assert [indices for _, indices in groups] == [[0, 3], [1, 4], [2, 5]]
    spec = experiment.config.federation
    for seed, (data, indices) in enumerate(groups):
        assert {experiment.runs[i].seed for i in indices} == {seed}
        np.testing.assert_array_equal(data.train_features, build_federation(spec, replicate=seed).train_features)
    assert [indices for _, indices in experiment.federation_groups([5, 0, 2])] == [[5, 2], [0]]


def _final_losses(directory: Path) -> dict[tuple[str, int], np.ndarray]:
    table = read_metrics(directory)
    out: dict[tuple[str, int], np.ndarray] = {}
    for label in np.unique(table["label"]):
        for seed in np.unique(table["seed"]):
            rows = (table["label"] == label) & (table["seed"] == seed)
            out[(str(label), int(seed))] = np.asarray(table["train_loss"][rows], dtype=np.float64)
    return out


def test_the_runner_trains_each_seed_on_its_own_realization(tmp_path: Path) -> None:
    """Each seed's curves equal a run of that seed alone on build_federation(spec, replicate=seed),
    and differ from the shared-federation run of the same seed (whose data is another draw)."""
    from fedsample.engine import simulate

    outcome = run_experiment(_config(True), tmp_path / "per-seed", progress=quiet_progress())
    shared = run_experiment(_config(False), tmp_path / "shared", progress=quiet_progress())
    experiment = build_experiment(_config(True))
    spec = experiment.config.federation
    for seed in (0, 1, 2):
        runs = [run for run in experiment.runs if run.seed == seed]
        alone = simulate(
            build_federation(spec, replicate=seed), experiment.model, runs, experiment.training, init_seed=4
        )
        for result in alone:
            index = next(i for i, r in enumerate(experiment.runs) if r.seed == seed and r.label == result.history.label)
            np.testing.assert_array_equal(
                outcome.results[index].history.train_loss, result.history.train_loss, err_msg=f"seed {seed}"
            )
            assert not np.array_equal(shared.results[index].history.train_loss, result.history.train_loss)


def test_an_interrupted_per_seed_run_resumes_to_identical_results(tmp_path: Path) -> None:
    """Interrupted in the second seed: the first seed's final checkpoint and the second's mid-way one
    are on disk; --resume finishes with the uninterrupted run's metrics and removes them."""
    reference = run_experiment(_config(True, checkpoint_every=5), tmp_path / "reference", progress=quiet_progress())
    killed = tmp_path / "killed"
    with pytest.raises(Interrupted):
        run_experiment(_config(True, checkpoint_every=5), killed, progress=StopAfter(ROUNDS + 12))
    assert sorted(p.name for p in killed.glob("checkpoint*.npz")) == ["checkpoint-seed0.npz", "checkpoint-seed1.npz"]
    resumed = run_experiment(None, killed, resume=True, progress=quiet_progress())
    assert resumed.resumed_from == 10
    assert not list(killed.glob("checkpoint*.npz"))
    first, second = _final_losses(reference.run_dir), _final_losses(killed)
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=str(key))


@pytest.mark.slow  # starts a Ray instance: about 80 s on 2 busy cores
def test_a_per_seed_run_on_ray_gives_the_local_metrics(tmp_path: Path) -> None:
    """Ray tasks build each seed's realization as the local runner does: the metrics agree exactly."""
    ray = pytest.importorskip("ray")
    import warnings

    from fedsample.experiments.distributed import RayOptions
    from fedsample.experiments.executors import RayExecutor

    local = run_experiment(_config(True), tmp_path / "local", progress=quiet_progress())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # a tip about Ray's future defaults
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_experiment(
            _config(True),
            tmp_path / "ray",
            executor=RayExecutor(RayOptions(runs_per_task=4)),
            progress=quiet_progress(),
        )
    finally:
        ray.shutdown()
    first, second = read_metrics(local.run_dir), read_metrics(remote.run_dir)
    for column in first:
        if column != "round_seconds":
            np.testing.assert_array_equal(first[column], second[column], err_msg=column)
