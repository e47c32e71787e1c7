"""Stacked kernels against autograd: each slot's masked mean loss and gradient, and the fused SGD step.

Every slot ``j`` holds its own model and batch; only its first ``counts[j]`` samples are real (the
rest is padding with mask 0, see :mod:`fedsample.engine.batching`). Autograd on an ordinary
``nn.Module`` over the real samples alone is the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample.engine import ModelSpec
from fedsample.engine.paper_models import Params
from fedsample.engine.trainers.kernels import dense_loss_and_grads, dense_sgd_step, functional_kernel, per_sample_loss
from fedsample.engine.user_model import DenseLayout, bind_model, dense_layout


def _stacked_case(
    spec: ModelSpec, slots: int, batch: int, seed: int
) -> tuple[Params, torch.Tensor, torch.Tensor, np.ndarray]:
    """``slots`` independent models, batches with random targets, and each slot's number of real samples."""
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    models = [spec.init_params(generator) for _ in range(slots)]
    params = {n: torch.stack([m[n] for m in models]) for n in models[0]}
    x = torch.randn((slots, batch, *spec.input_shape), generator=generator)
    if spec.task == "regression":
        y = torch.randn((slots, batch), generator=generator)
    else:
        y = torch.randint(0, spec.output_dim, (slots, batch), generator=generator)
    counts = rng.integers(1, batch + 1, slots)
    return params, x, y, counts


def _mask(counts: np.ndarray, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.as_tensor((np.arange(batch)[None, :] < counts[:, None]).astype(np.float32))
    return mask, torch.as_tensor(counts, dtype=torch.float32)


def _autograd(
    spec: ModelSpec, params: Params, x: torch.Tensor, y: torch.Tensor, counts: np.ndarray
) -> tuple[list[float], list[dict[str, torch.Tensor]]]:
    """Per slot: mean loss over the real samples and its gradient, by autograd on an nn.Module."""
    losses, grads = [], []
    for j, count in enumerate(counts):
        module = spec.build()
        module.load_state_dict({n: v[j] for n, v in params.items()})
        loss = per_sample_loss(module(x[j, :count]), y[j, :count], spec.task).mean()
        loss.backward()  # type: ignore[no-untyped-call]
        losses.append(float(loss.detach()))
        grads.append({n: p.grad.detach().clone() for n, p in module.named_parameters()})  # type: ignore[union-attr]
    return losses, grads


def _layout(spec: ModelSpec) -> DenseLayout:
    layout = dense_layout(spec.build(), spec.input_shape)
    assert layout is not None
    return layout


def _dense_spec(kind: str, features: int, classes: int, hidden: int, bias: bool) -> ModelSpec:
    return ModelSpec(kind, (features,), 1 if kind == "linear" else classes, hidden=hidden, bias=bias)  # type: ignore[arg-type]


dense_specs = st.builds(
    _dense_spec,
    kind=st.sampled_from(["linear", "softmax", "mlp"]),
    features=st.integers(1, 6),
    classes=st.integers(2, 5),
    hidden=st.integers(1, 6),
    bias=st.booleans(),
)


@settings(deadline=None, max_examples=40)
@given(spec=dense_specs, slots=st.integers(1, 4), batch=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_dense_kernel_equals_autograd(spec: ModelSpec, slots: int, batch: int, seed: int) -> None:
    """dense_loss_and_grads (bmm forward and backward) = autograd's loss and gradient on the real samples."""
    params, x, y, counts = _stacked_case(spec, slots, batch, seed)
    mask, count_tensor = _mask(counts, batch)
    loss, grads = dense_loss_and_grads(params, x, y, mask, count_tensor, layout=_layout(spec), task=spec.task)
    ref_loss, ref_grads = _autograd(spec, params, x, y, counts)
    assert set(grads) == set(params)
    np.testing.assert_allclose(loss.numpy(), ref_loss, rtol=1e-5, atol=1e-6)
    for j in range(slots):
        for name in params:
            assert grads[name].shape == params[name].shape
            np.testing.assert_allclose(grads[name][j].numpy(), ref_grads[j][name].numpy(), rtol=1e-4, atol=1e-6)


@settings(deadline=None, max_examples=40)
@given(spec=dense_specs, slots=st.integers(1, 4), batch=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_padding_never_changes_the_dense_kernel(spec: ModelSpec, slots: int, batch: int, seed: int) -> None:
    """Rewriting the padded positions (inputs and targets) leaves the loss and gradient bit-identical."""
    params, x, y, counts = _stacked_case(spec, slots, batch, seed)
    mask, count_tensor = _mask(counts, batch)
    layout = _layout(spec)
    padding = mask == 0
    x2, y2 = x.clone(), y.clone()
    x2[padding] = 7.0
    y2[padding] = 1
    first = dense_loss_and_grads(params, x, y, mask, count_tensor, layout=layout, task=spec.task)
    second = dense_loss_and_grads(params, x2, y2, mask, count_tensor, layout=layout, task=spec.task)
    assert torch.equal(first[0], second[0])
    for name in params:
        assert torch.equal(first[1][name], second[1][name])


@settings(deadline=None, max_examples=40)
@given(
    spec=dense_specs,
    slots=st.integers(1, 4),
    batch=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    lr=st.floats(0.01, 1.0),
)
def test_dense_sgd_step_equals_an_autograd_sgd_step(
    spec: ModelSpec, slots: int, batch: int, seed: int, lr: float
) -> None:
    """The fused in-place step gives theta - lr * grad (autograd) for every slot and returns the loss at theta."""
    params, x, y, counts = _stacked_case(spec, slots, batch, seed)
    mask, count_tensor = _mask(counts, batch)
    ref_loss, ref_grads = _autograd(spec, params, x, y, counts)
    stepped = {n: v.clone() for n, v in params.items()}
    loss = dense_sgd_step(
        stepped,
        x,
        y,
        mask / count_tensor.unsqueeze(1),
        lr=lr,
        layout=_layout(spec),
        task=spec.task,
    )
    np.testing.assert_allclose(loss.numpy(), ref_loss, rtol=1e-5, atol=1e-6)
    for j in range(slots):
        for name in params:
            expected = params[name][j] - lr * ref_grads[j][name]
            np.testing.assert_allclose(stepped[name][j].numpy(), expected.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["linear", "softmax", "mlp"])
def test_dense_models_are_bound_to_the_bmm_kernels(kind: str) -> None:
    """The papers' dense models get the fused kernels' layout (layers.i.weight / .bias, in order); the
    CNN and the LSTM get none (the generic torch.func path)."""
    spec = ModelSpec(kind, (4,), 1 if kind == "linear" else 3, hidden=5)  # type: ignore[arg-type]
    layout = bind_model(spec, task=spec.task).dense
    assert layout is not None
    assert layout.weights == tuple(n for n in spec.init_params(torch.Generator()) if n.endswith("weight"))
    assert layout.squeeze_output == (kind == "linear")
    assert bind_model(ModelSpec("cnn", (1, 18, 18), 3), task="classification").dense is None
    assert bind_model(ModelSpec("lstm", (5,), 80), task="classification").dense is None


@pytest.mark.parametrize(
    ("spec", "slots", "batch"),
    [
        (ModelSpec("cnn", (1, 18, 18), 3), 3, 4),
        (ModelSpec("cnn", (3, 32, 32), 10), 2, 3),
        (ModelSpec("mlp", (2, 3), 4, hidden=6), 3, 5),  # the functional kernel serves any module
    ],
    ids=["cnn-18x18", "cnn-cifar", "mlp"],
)
def test_functional_kernel_equals_autograd(spec: ModelSpec, slots: int, batch: int) -> None:
    """torch.func's vmap(grad_and_value) kernel = autograd's loss and gradient on the real samples only."""
    params, x, y, counts = _stacked_case(spec, slots, batch, seed=2)
    counts[0] = 1  # at least one slot padded to the batch size
    mask, count_tensor = _mask(counts, batch)
    x[mask == 0] = 50.0  # padding far from the data: it must not leak into the result
    kernel = functional_kernel(bind_model(spec, task=spec.task))
    keys = torch.zeros(slots, dtype=torch.int64)
    loss, grads, _ = kernel(params, {}, x, y, mask, count_tensor, keys, 0)
    ref_loss, ref_grads = _autograd(spec, params, x, y, counts)
    np.testing.assert_allclose(loss.detach().numpy(), ref_loss, rtol=1e-5, atol=1e-6)
    for j in range(slots):
        for name in params:
            np.testing.assert_allclose(
                grads[name][j].detach().numpy(), ref_grads[j][name].numpy(), rtol=1e-4, atol=1e-6, err_msg=name
            )
