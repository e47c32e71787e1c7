"""Checkpoints: a simulation resumed from any checkpoint (saved to disk and read back) ends with exactly
the models and metrics of an uninterrupted one, for stateful samplers, algorithms and server optimizers."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engine_cases import classification_data, spec_for

import fedsample
from fedsample.engine import (
    FedAdam,
    MiniBatchSGD,
    RunResult,
    RunSpec,
    Scaffold,
    ServerMomentum,
    SimulationCheckpoint,
    TrainingConfig,
    load_checkpoint,
    save_checkpoint,
    simulate,
)
from fedsample.errors import FedsampleError

ROUNDS = 7

SETTINGS: dict[str, dict[str, Any]] = {
    "fedavg-md-clustered": {"samplers": ["md", "clustered-size"], "config": {}},
    "scaffold-osmd-momentum": {
        "samplers": ["osmd", "adaptive-osmd"],
        "config": {"algorithm": Scaffold(), "server": ServerMomentum(lr=1.0, beta=0.5)},
    },
    "fedadam-similarity": {"samplers": ["clustered-similarity", "vrb"], "config": {"server": FedAdam(lr=0.05)}},
    "fedsampling": {"samplers": ["fedsampling"], "config": {"algorithm": MiniBatchSGD()}},
}


def _simulate(setting: str, **options: Any) -> list[RunResult]:
    data = classification_data(2)
    chosen = SETTINGS[setting]
    runs = [RunSpec(fedsample.make_sampler(name), seed=seed) for name in chosen["samplers"] for seed in (0, 3)]
    config = TrainingConfig(
        rounds=ROUNDS, num_sampled=3, local_steps=2, batch_size=4, local_lr=0.1, eval_every=2, **chosen["config"]
    )
    return simulate(data, spec_for("mlp", data), runs, config, init_seed=1, **options)


def _assert_identical(first: list[RunResult], second: list[RunResult]) -> None:
    for a, b in zip(first, second, strict=True):
        for name in a.params:
            np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
        one, two = a.history.to_dict(), b.history.to_dict()
        one["rounds"].pop("round_seconds")  # wall-clock time, the one thing that differs
        two["rounds"].pop("round_seconds")
        assert one == two
        assert fedsample.dumps(a.sampler_state) == fedsample.dumps(b.sampler_state)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_resuming_from_every_checkpoint_reproduces_the_uninterrupted_run(setting: str, tmp_path: Path) -> None:
    saved: list[Path] = []

    def keep(checkpoint: SimulationCheckpoint) -> None:
        path = tmp_path / f"round-{checkpoint.rounds_done}.ckpt"
        save_checkpoint(path, checkpoint)
        saved.append(path)

    reference = _simulate(setting, checkpoint=keep, checkpoint_every=2)
    assert [p.name for p in saved] == ["round-2.ckpt", "round-4.ckpt", "round-6.ckpt"]
    for path in saved:
        resumed = _simulate(setting, resume=load_checkpoint(path))
        _assert_identical(reference, resumed)
    _assert_identical(reference, _simulate(setting))  # checkpointing itself changes nothing


def test_progress_of_a_resumed_run_starts_at_the_checkpoint() -> None:
    checkpoints: list[SimulationCheckpoint] = []
    _simulate("fedavg-md-clustered", checkpoint=checkpoints.append, checkpoint_every=3)
    seen: list[int] = []
    _simulate("fedavg-md-clustered", resume=checkpoints[0], progress=lambda p: seen.append(p.done))
    assert seen == [4, 5, 6, 7]


def test_a_checkpoint_of_other_runs_is_rejected() -> None:
    checkpoints: list[SimulationCheckpoint] = []
    _simulate("fedavg-md-clustered", checkpoint=checkpoints.append, checkpoint_every=3)
    with pytest.raises(FedsampleError) as info:
        _simulate("fedsampling", resume=checkpoints[0])
    assert info.value.parameter == "resume"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps({"format": "something else"})])
def test_a_corrupt_or_foreign_file_is_one_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.ckpt"
    path.write_bytes(content)
    with pytest.raises(FedsampleError) as info:
        load_checkpoint(path)
    assert info.value.parameter == "checkpoint"
    assert str(path) in str(info.value)
    with pytest.raises(FedsampleError, match="existing file"):
        load_checkpoint(tmp_path / "missing.ckpt")


def test_checkpointing_needs_batched_runs() -> None:
    with pytest.raises(FedsampleError) as info:
        _simulate("fedavg-md-clustered", batch_runs=False, checkpoint=lambda c: None, checkpoint_every=2)
    assert info.value.parameter == "batch_runs"
