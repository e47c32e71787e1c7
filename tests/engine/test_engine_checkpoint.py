"""Checkpoints: a simulation resumed from any checkpoint (saved to disk and read back) ends with exactly
the models and metrics of an uninterrupted one, for stateful samplers, algorithms and server optimizers."""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
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
from fedsample.engine.checkpoint import FORMAT, VERSION, load_archive, save_archive
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
    # Two-phase samplers beside a one-phase one: the reports and the two-phase metrics resume too.
    "optimal": {"samplers": ["optimal", "optimal-distribution", "md"], "config": {}},
    # The selection systems of issue 15: their loss tables, explored sets, stale gradients and pacer resume too.
    "selection-systems": {"samplers": ["oort", "divfl", "power-of-choice", "high-loss", "round-robin"], "config": {}},
    # Candidate sets drawn each round (optimal's K, Power-of-Choice's pow-d and cpow-d): the draws resume too.
    "two-phase-candidates": {
        "samplers": [
            ("optimal", {"mode": "protocol", "candidates": 5}),
            ("power-of-choice", {"variant": "pow-d"}),
            ("power-of-choice", {"variant": "cpow-d", "loss_batch": 2}),
        ],
        "config": {},
    },
}


def _sampler(entry: str | tuple[str, dict[str, Any]]) -> fedsample.Sampler[Any]:
    name, params = (entry, {}) if isinstance(entry, str) else entry
    return fedsample.make_sampler(name, **params)


def _simulate(setting: str, **options: Any) -> list[RunResult]:
    data = classification_data(2)
    chosen = SETTINGS[setting]
    runs = [RunSpec(_sampler(entry), seed=seed) for entry in chosen["samplers"] for seed in (0, 3)]
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


# --- the file format: nothing executed, every bad file one line (issue 11 item 4, issue 16 item 7) -------


class _Marker:
    """Unpickling this object creates the file ``path``: the proof that a loader ran code from a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _one_checkpoint(tmp_path: Path) -> Path:
    """A real checkpoint on disk (SCAFFOLD, server momentum, learning samplers), after round 2 of 7."""
    checkpoints: list[SimulationCheckpoint] = []
    _simulate("scaffold-osmd-momentum", checkpoint=checkpoints.append, checkpoint_every=2)
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(path, checkpoints[0])
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(FedsampleError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert info.value.parameter == "checkpoint"
    assert "\n" not in message
    assert str(path) in message
    return message


def test_a_checkpoint_file_is_an_archive_of_arrays_and_json(tmp_path: Path) -> None:
    """The file is an uncompressed zip of .npy members that numpy reads without pickle, and the
    structure is JSON naming the format and version."""
    path = _one_checkpoint(tmp_path)
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(archive["header"].tobytes().decode("utf-8"))
        assert all(archive[name].dtype.kind in "biuf" for name in archive.files)
    assert (header["format"], header["version"]) == (FORMAT, VERSION)
    assert header["content"]["__engine__"] == "SimulationCheckpoint"
    loaded = load_checkpoint(path)
    assert loaded.rounds_done == 2
    assert type(loaded.server_state).__name__ == "MomentumState"
    assert type(loaded.algorithm_state).__name__ == "ScaffoldState"
    assert all(v.dtype == torch.float32 for v in loaded.algorithm_state.clients.values())


@pytest.mark.parametrize("version", [VERSION - 1, VERSION + 1, "2"])
def test_a_checkpoint_of_another_format_version_is_refused(tmp_path: Path, version: Any) -> None:
    """The same content under another version number: refused, naming the version (issue 16 item 7)."""
    path = _one_checkpoint(tmp_path)
    save_archive(path, load_checkpoint(path), format=FORMAT, version=version)
    message = _refusal(path)
    assert f"of version {version!r}" in message
    assert f"reads version {VERSION} only" in message


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_a_truncated_checkpoint_is_refused(tmp_path: Path, keep: float) -> None:
    path = _one_checkpoint(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: int(keep * len(data))])
    _refusal(path)


def _npz(**members: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **members)
    return buffer.getvalue()


def _header(content: Any, *, format: str = FORMAT, version: int = VERSION) -> np.ndarray:
    text = json.dumps({"format": format, "version": version, "content": content})
    return np.frombuffer(text.encode(), dtype=np.uint8)


FOREIGN = {
    "empty": b"",
    "text": b"round,loss\n1,0.5\n",
    "a pickle": pickle.dumps({"format": FORMAT, "version": VERSION}),
    "an npz of other arrays": _npz(weights=np.ones(3)),
    "an npz holding a pickled object array": _npz(header=np.array([{"format": FORMAT}], dtype=object)),
    "another format": _npz(header=_header({"__tuple__": []}, format="something-else")),
    "a header that is not JSON": _npz(header=np.frombuffer(b"\x80not json", dtype=np.uint8)),
    "a header of floats": _npz(header=np.ones(4)),
    "an unknown engine type": _npz(header=_header({"__engine__": "Popen", "fields": {}})),
    "an unknown plain-data type": _npz(header=_header({"__type__": "Popen", "fields": {}})),
    "an array index beyond the archive": _npz(header=_header({"__array__": 5})),
    "a tensor index beyond the archive": _npz(header=_header({"__tensor__": 0})),
    "fields of another type": _npz(header=_header({"__engine__": "SimulationCheckpoint", "fields": {"x": 1}})),
    "a JSON nested 100000 deep": _npz(header=np.frombuffer(b"[" * 100_000 + b"]" * 100_000, dtype=np.uint8)),
    "a well-formed archive of something else": _npz(header=_header({"__tuple__": [1, 2]})),
}


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_foreign_file_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(FOREIGN[kind])
    _refusal(path)


def _zip_member(name: str, data: bytes, *, compress: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compress) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def _npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def test_an_archive_cannot_make_the_reader_allocate_more_than_its_size(tmp_path: Path) -> None:
    """A member whose .npy header declares 8 TB, and a compressed member (a zip bomb), are refused
    before anything is allocated: memory stays bounded by the file's size."""
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(_zip_member("header.npy", _npy_header((10**12,))))
    assert "declares more data than it holds" in _refusal(path)
    zeros = io.BytesIO()
    np.save(zeros, np.zeros(10**6, dtype=np.uint8))
    path.write_bytes(_zip_member("header.npy", zeros.getvalue(), compress=zipfile.ZIP_DEFLATED))
    assert "compressed" in _refusal(path)


def test_a_pickle_where_the_checkpoint_goes_runs_nothing(tmp_path: Path) -> None:
    """A crafted pickle (its __reduce__ creates a marker file) at the checkpoint's path: refused, and the
    marker is never created."""
    marker = tmp_path / "marker"
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(pickle.dumps(_Marker(marker)))
    message = _refusal(path)
    assert not marker.exists()
    assert "not an archive of arrays" in message
    # The same pickle inside an archive, as an object array: numpy refuses it without unpickling.
    path.write_bytes(_npz(header=np.array([_Marker(marker)], dtype=object)))
    _refusal(path)
    assert not marker.exists()


def test_a_checkpoint_whose_parts_do_not_fit_is_refused(tmp_path: Path) -> None:
    """Well-formed archives of inconsistent checkpoints: one line each, not a traceback at restore."""
    checkpoint = load_checkpoint(_one_checkpoint(tmp_path))
    broken = {
        "rounds": dataclasses.replace(checkpoint, rounds_done=checkpoint.rounds + 1),
        "run keys": dataclasses.replace(checkpoint, run_keys=(("md", "md", "0"),)),
        "globals": dataclasses.replace(checkpoint, globals={"w": np.zeros(3)}),
        "sampler states": dataclasses.replace(checkpoint, sampler_states=checkpoint.sampler_states[:1]),
        "metric": dataclasses.replace(checkpoint, metrics={**checkpoint.metrics, "weight_sum": np.zeros(2)}),
        "evaluations": dataclasses.replace(checkpoint, evaluations=checkpoint.evaluations[:1]),
    }
    for name, value in broken.items():
        path = tmp_path / f"{name}.npz"
        save_archive(path, value, format=FORMAT, version=VERSION)
        assert "consistent" in _refusal(path), name
    path = tmp_path / "other.npz"
    save_archive(path, [checkpoint], format=FORMAT, version=VERSION)
    assert "holds a list" in _refusal(path)


def test_archives_round_trip_the_engine_types_and_refuse_others(tmp_path: Path) -> None:
    path = tmp_path / "results.npz"
    (result,) = _simulate("fedsampling")[:1]
    save_archive(path, {"results": [result], "key": (False, [0, 1])}, format="test", version=1)
    loaded = load_archive(path, format="test", version=1, parameter="file")
    assert loaded["key"] == (False, [0, 1])
    assert loaded["results"][0].history.to_dict() == result.history.to_dict()
    assert fedsample.dumps(loaded["results"][0].sampler_state) == fedsample.dumps(result.sampler_state)
    with pytest.raises(FedsampleError, match="must hold only arrays"):
        save_archive(path, {"function": len}, format="test", version=1)
    with pytest.raises(FedsampleError, match="must hold only arrays"):
        save_archive(path, {"tensor": torch.zeros(2, dtype=torch.bfloat16)}, format="test", version=1)
    with pytest.raises(FedsampleError, match="'file' parameter must name a test file") as info:
        load_archive(path, format="test", version=2, parameter="file")
    assert info.value.parameter == "file"
