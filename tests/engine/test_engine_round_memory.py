"""The round's memory check in ``simulate`` (issue 32 item 8): sizes counted before they are allocated.

A user's module is counted as it is, a factory on PyTorch's meta device (a 5 GiB parameter there costs
nothing), a factory that cannot be built there once it is built; a dense network's activations count
with its parameters; a ``TrainingConfig(batch_size=10**12)`` from Python is refused where it meets the
data, in ``simulate``. Each refusal is one line naming the parameter. The machine's memory is patched
(``fedsample._memory.memory_limit``) where the case needs a fixed one; deterministic, no statistics.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_cases import classification_data
from torch import nn

import fedsample._memory
from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate, specs
from fedsample.errors import FedsampleError
from fedsample.samplers import MDSampler

GIB = 2**30
DATA = classification_data(0)  # 12 clients, 6 features, 4 classes
CONFIG = TrainingConfig(rounds=1, num_sampled=2, local_steps=1, batch_size=4)


class Huge(nn.Module):
    """A linear head and an unused parameter of 5 GiB, made on the meta device: its size is real to the
    check, its memory is never allocated."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 4)
        self.unused = nn.Parameter(torch.empty(5 * GIB // 4, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(x)
        return out


def _limit(monkeypatch: pytest.MonkeyPatch, available: int) -> None:
    monkeypatch.setattr(fedsample._memory, "memory_limit", lambda: available)


def _refused(model: object, config: TrainingConfig = CONFIG) -> FedsampleError:
    with pytest.raises(FedsampleError) as caught:
        simulate(DATA, model, [RunSpec(MDSampler(), seed=0)], config)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("given", ["module", "factory"])
def test_a_user_module_with_a_5_gib_parameter_is_refused_before_training(
    given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 clients' copies with gradients and the global model: 5 x 5 GiB, more than a machine of 16 GiB."""
    _limit(monkeypatch, 16 * GIB)
    error = _refused(Huge() if given == "module" else Huge)
    assert error.parameter == "model"
    assert "'model' parameter of simulate" in str(error)
    assert "1342177308 parameters" in str(error)  # 5 GiB / 4 bytes, and the head's 6 x 4 + 4
    assert "Got 'Huge' instead" in str(error)


def test_a_factory_that_cannot_be_built_on_the_meta_device_is_counted_once_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The factory reads a value from a tensor (impossible on the meta device); its 1 MiB parameter,
    copied for 2 clients with gradients and the global model, exceeds a machine of 2 MiB once built."""
    built: list[str] = []

    def reads_a_value() -> nn.Module:
        scale = float(torch.ones(1))  # raises on the meta device
        module = nn.Sequential(nn.Linear(6, 4))
        module.register_parameter("extra", nn.Parameter(torch.full((2**18,), scale)))
        built.append(str(module.extra.device))
        return module

    _limit(monkeypatch, 2 * 2**20)
    error = _refused(reads_a_value)
    assert error.parameter == "model"
    assert built
    assert set(built) == {"cpu"}


def test_a_batch_size_of_10_to_the_12_from_python_is_refused_where_it_meets_the_data() -> None:
    """8 bytes of row ids x 1 step x 2 clients x 10^12: 15 TiB, more than any machine this runs on."""
    config = TrainingConfig(rounds=1, num_sampled=2, local_steps=1, batch_size=10**12)
    error = _refused(ModelSpec(kind="softmax", input_shape=(6,), output_dim=4), config)
    assert error.parameter == "batch_size"
    assert "Got 1000000000000 instead" in str(error)


def test_a_dense_networks_activations_count_with_its_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """An MLP of 10^5 hidden units: 1.1e6 parameters (4.2 MiB; 5 copies 21 MiB) and 2 x (10^5 + 4) values
    per sample held by the fused kernels: an evaluation chunk of the 114 training rows holds 87 MiB more.
    A machine of 64 MiB fits the parameters and not the activations."""
    spec = ModelSpec(kind="mlp", input_shape=(6,), output_dim=4, hidden=100_000)
    footprint = specs.model_footprint(spec, (6,))
    assert footprint is not None
    assert footprint.count == sum(p.numel() for p in spec.build().parameters())
    assert footprint.activations == 2 * (100_000 + 4)
    _limit(monkeypatch, 64 * 2**20)
    assert _refused(spec).parameter == "model"
    small = ModelSpec(kind="mlp", input_shape=(6,), output_dim=4, hidden=1_000)
    (result,) = simulate(DATA, small, [RunSpec(MDSampler(), seed=0)], CONFIG)
    assert np.isfinite(result.history.train_loss).all()


def test_the_meta_attempt_leaves_the_global_generator_as_it_was() -> None:
    """A factory that seeds PyTorch's generator, counted on the meta device: the caller's stream goes on."""

    def seeds() -> nn.Module:
        torch.manual_seed(1234)
        return nn.Linear(6, 4)

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    footprint = specs.model_footprint(seeds, (6,))
    assert footprint is not None
    assert footprint.count == 28
    assert torch.equal(torch.rand(3), expected)
