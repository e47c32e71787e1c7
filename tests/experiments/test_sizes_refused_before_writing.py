"""Model sizes nobody bounded, refused before the run directory is made (issue 32 item 8).

``fedsample run --hidden N`` counts the MLP's activations with its parameters, and ``run_comparison``
counts a user's module (here a 5 GiB parameter made on the meta device, never allocated). Each is one
line naming the key, and ``--out`` is never created. The machine's memory is patched
(``fedsample._memory.memory_limit``) so the cases hold on any machine; deterministic, no statistics.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import fedsample._memory
from cli_helpers import digits_config, run_cli
from fedsample.data import FederatedDataset
from fedsample.errors import FedsampleError
from fedsample.experiments import run_comparison

GIB = 2**30


def _limit(monkeypatch: pytest.MonkeyPatch, available: int) -> None:
    monkeypatch.setattr(fedsample._memory, "memory_limit", lambda: available)


def test_hidden_whose_activations_cannot_fit_is_refused_before_any_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """digits (64 features, 10 classes), 2 samplers x 1 seed x 3 clients, ``--hidden 100000``: 7.5e6
    parameters, 14 copies 0.42 GB, fit a machine of 1 GiB; an evaluation chunk of the ~1400 training rows
    holds 2 x 100010 activations each, 1.1 GB more, and does not."""
    _limit(monkeypatch, GIB)
    (tmp_path / "config.toml").write_text(digits_config(seeds=1, rounds=1))
    out = tmp_path / "out"
    argv = ["run", str(tmp_path / "config.toml"), "--hidden", "100000", "--out", str(out), "-q"]
    code, stdout, err = run_cli(argv, capsys)
    assert (code, stdout, len(err.splitlines())) == (2, "", 1), err
    assert "'model.hidden' key" in err
    assert "Got 100000 instead" in err
    assert not os.path.lexists(out)


class Huge(nn.Module):
    """A linear head and an unused parameter of 5 GiB on the meta device (its memory is never allocated)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)
        self.unused = nn.Parameter(torch.empty(5 * GIB // 4, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(x)
        return out


def _toy() -> FederatedDataset:
    features = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    return FederatedDataset(
        train_features=features,
        train_targets=np.arange(40) % 2,
        train_indptr=np.array([0, 10, 20, 30, 40]),
        test_features=np.zeros((0, 4), np.float32),
        test_targets=np.zeros(0, int),
        test_indptr=np.zeros(5, np.int64),
        name="toy",
    )


def test_a_user_module_with_a_5_gib_parameter_is_refused_before_any_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 sampler x 1 seed x 2 clients: 2 copies with gradients and the global model, 25 GiB > 16 GiB."""
    _limit(monkeypatch, 16 * GIB)
    out = tmp_path / "out"
    with pytest.raises(FedsampleError) as caught:
        run_comparison(_toy(), Huge(), ["md"], out, training={"rounds": 1, "num_sampled": 2, "batch_size": 4})
    message = str(caught.value)
    assert caught.value.parameter == "model.factory"
    assert "\n" not in message
    assert "25 GiB, more than this machine's 16 GiB" in message
    assert "Got 'python:Huge' instead" in message
    assert not os.path.lexists(out)
