"""The engine on a CUDA device: users' modules and the papers' models give the CPU's results to float32
tolerance (rtol 1e-3 after a few rounds: GPU kernels sum in other orders). Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_cases import classification_data, spec_for
from torch import nn

from fedsample.engine import RunSpec, TrainingConfig, simulate
from fedsample.engine.dropout import dropout_keys, keyed_uniforms
from fedsample.engine.user_model import Model
from fedsample.samplers import MDSampler, UniformSampler

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(4 * 4 * 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2).flatten(1)))


def _both(model: object, data: object) -> tuple[object, object]:
    runs = [RunSpec(MDSampler(), seed=1), RunSpec(UniformSampler(), seed=2)]
    common = {"rounds": 3, "num_sampled": 3, "local_steps": 3, "batch_size": 4, "local_lr": 0.05}
    cpu = simulate(data, model, runs, TrainingConfig(**common, device="cpu"))  # type: ignore[arg-type]
    gpu = simulate(data, model, runs, TrainingConfig(**common, device="cuda"))  # type: ignore[arg-type]
    return cpu, gpu


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_the_papers_models_on_cuda_match_the_cpu(kind: str) -> None:
    data = classification_data(0, sample_shape=(3, 18, 18) if kind == "cnn" else (6,))
    cpu, gpu = _both(spec_for(kind, data), data)
    for a, b in zip(cpu, gpu, strict=True):  # type: ignore[call-overload]
        assert b.history.info["device"].startswith("cuda")
        for name in a.params:
            np.testing.assert_allclose(a.params[name], b.params[name], rtol=1e-3, atol=1e-4, err_msg=name)


def test_a_users_module_with_batchnorm_and_dropout_on_cuda_matches_the_cpu() -> None:
    """On the GPU the module takes vmap (the CPU trains it on threads): same masks, same model."""
    data = classification_data(0, sizes=(6, 9, 5, 7, 12, 4, 10, 8), sample_shape=(3, 8, 8))
    cpu, gpu = _both(Model(ConvBN), data)
    for a, b in zip(cpu, gpu, strict=True):  # type: ignore[call-overload]
        for name in a.params:
            np.testing.assert_allclose(a.params[name], b.params[name], rtol=1e-3, atol=1e-4, err_msg=name)
        for name in a.buffers:
            np.testing.assert_allclose(a.buffers[name], b.buffers[name], rtol=1e-3, atol=1e-4, err_msg=name)


def test_keyed_dropout_draws_the_same_masks_on_the_gpu() -> None:
    shape = torch.Size([64, 33])
    with dropout_keys(torch.tensor(12345), 2) as keys:
        cpu = keyed_uniforms(keys, shape, torch.float32, torch.device("cpu"))
    with dropout_keys(torch.tensor(12345, device="cuda"), 2) as keys:
        gpu = keyed_uniforms(keys, shape, torch.float32, torch.device("cuda"))
    assert torch.equal(cpu, gpu.cpu())
