"""Keyed dropout: masks that are a function of (key, step, call, element) alone.

Statistical checks use fixed keys and state their bounds: a keep fraction over 10^6 draws lies within
5 standard errors of 1 - p (a false failure below 1e-6 for a fair generator).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fedsample.engine.dropout import (
    KeyedDropout,
    as_int32,
    check_mixer,
    dropout_keys,
    keyed_uniforms,
    mix32,
    mix32_int,
    swap_dropout,
)


@settings(deadline=None, max_examples=200)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20))
def test_the_tensor_mixer_is_the_python_mixer(values: list[int]) -> None:
    """The int32 mixer (wrap-around products) gives the words of the Python reference, bit for bit."""
    mixed = mix32(torch.tensor([as_int32(v) for v in values], dtype=torch.int32)).tolist()
    assert mixed == [as_int32(mix32_int(v)) for v in values]
    check_mixer(torch.device("cpu"))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_keep_fraction_is_one_minus_p(p: float) -> None:
    count = 10**6
    layer = KeyedDropout(p)
    with dropout_keys(torch.tensor(12345), step=3):
        out = layer(torch.ones(count))
    kept = float((out > 0).double().mean())
    assert abs(kept - (1 - p)) < 5 * math.sqrt(p * (1 - p) / count)
    # The kept values are scaled by 1 / (1 - p), so the mean stays 1 in expectation.
    assert torch.allclose(out[out > 0], torch.full_like(out[out > 0], 1 / (1 - p)))


def test_masks_repeat_for_the_same_keys_and_differ_otherwise() -> None:
    shape = torch.Size([64, 32])

    def uniforms(key: int, step: int, calls: int = 0) -> torch.Tensor:
        with dropout_keys(torch.tensor(key), step) as keys:
            keys.calls = calls
            return keyed_uniforms(keys, shape, torch.float32, torch.device("cpu"))

    same = uniforms(7, 2)
    assert torch.equal(same, uniforms(7, 2))
    others = [uniforms(8, 2), uniforms(7, 3), uniforms(7, 2, calls=1)]
    for other in others:
        # Independent uniforms: their correlation over 2048 pairs is within 5 / sqrt(2048) of 0.
        correlation = np.corrcoef(same.flatten().numpy(), other.flatten().numpy())[0, 1]
        assert abs(correlation) < 5 / math.sqrt(shape.numel())
    values = same.flatten()
    assert float(values.min()) >= 0.0
    assert float(values.max()) < 1.0


def test_each_call_of_a_step_draws_a_new_mask() -> None:
    layer = KeyedDropout(0.5)
    with dropout_keys(torch.tensor(1), step=0):
        first, second = layer(torch.ones(1000)), layer(torch.ones(1000))
    assert not torch.equal(first, second)


def test_channel_dropout_drops_whole_channels() -> None:
    layer = KeyedDropout(0.5, channels=2)
    with dropout_keys(torch.tensor(3), step=0):
        out = layer(torch.ones(8, 6, 4, 4))
    per_channel = out.flatten(2)
    assert torch.equal(per_channel.amin(-1), per_channel.amax(-1))  # constant within a channel
    assert 0 < int((per_channel[..., 0] == 0).sum()) < 48


def test_evaluation_mode_and_outside_a_step() -> None:
    layer = KeyedDropout(0.5).eval()
    x = torch.ones(100)
    assert torch.equal(layer(x), x)
    layer.train()
    torch.manual_seed(0)
    plain = layer(x)  # no keys: PyTorch's own dropout from the global generator
    assert set(plain.unique().tolist()) <= {0.0, 2.0}


class MyDropout(nn.Dropout):
    """A subclass may draw differently: it is left alone."""


def test_swap_replaces_exactly_the_dropout_layers() -> None:
    module = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.2), nn.Sequential(nn.Dropout2d(0.4)), MyDropout(0.1))
    module.eval()
    assert swap_dropout(module) == 2
    assert isinstance(module[1], KeyedDropout)
    assert module[1].p == 0.2
    assert not module[1].training
    assert isinstance(module[2][0], KeyedDropout)
    assert module[2][0].channels == 2
    assert type(module[3]) is MyDropout
