"""Loss and gradient of ``k`` clients' models at once, on their own mini-batches.

Parameters are *stacked*: every tensor has a leading axis of length ``k`` (one model per slot).
Two implementations share one signature ``(params, x, y, mask, counts) -> (loss[k], grads)``:

* :func:`dense_loss_and_grads` for the dense models (linear, softmax, MLP): the forward and
  backward passes written with batched matrix products (``bmm``), the fastest form on a CPU;
* :func:`functional_loss_and_grads` for any ``nn.Module`` (the CNN): ``torch.func``'s
  ``vmap(grad_and_value(...))`` over ``functional_call``.

The loss of a slot is the mean over its real samples: ``sum_b mask[b] l_b / counts``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedsample.engine.models import ModelSpec, Params

__all__ = ["KernelFn", "dense_forward", "dense_loss_and_grads", "dense_sgd_step", "make_kernel", "per_sample_loss"]

KernelFn = Callable[[Params, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, Params]]


def per_sample_loss(output: torch.Tensor, target: torch.Tensor, task: str) -> torch.Tensor:
    """Cross-entropy for classification, squared error for regression, one value per sample."""
    if task == "regression":
        return (output - target) ** 2
    return torch.nn.functional.cross_entropy(output, target, reduction="none")


def dense_loss_and_grads(
    params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    counts: torch.Tensor,
    *,
    num_layers: int,
    task: str,
) -> tuple[torch.Tensor, Params]:
    """Masked mean loss and its gradient for ``k`` stacked dense networks.

    Shapes: weights ``(k, out, in)``, biases ``(k, out)``, ``x (k, B, features)``, ``y (k, B)``,
    ``mask (k, B)``, ``counts (k,)``.
    """
    inputs, pre, out = dense_forward(params, x, num_layers)
    loss, dz = _output_gradient(out, y, mask / counts.unsqueeze(1), task)
    grads: Params = {}
    for i in reversed(range(num_layers)):
        grads[f"layers.{i}.weight"] = torch.bmm(dz.transpose(1, 2), inputs[i])
        if f"layers.{i}.bias" in params:
            grads[f"layers.{i}.bias"] = dz.sum(1)
        if i > 0:  # no gradient for the input itself
            dz = torch.bmm(dz, params[f"layers.{i}.weight"]) * (pre[i - 1] > 0)
    return loss, grads


def dense_forward(
    params: Params, x: torch.Tensor, num_layers: int
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """The forward pass of ``k`` stacked dense networks on ``x (k, B, ...)``: each layer's input, each
    layer's pre-activation (which the backward pass reads) and the output ``(k, B, out)``.

    The one dense forward pass of the engine: training (:func:`dense_loss_and_grads`,
    :func:`dense_sgd_step`) and evaluation (:mod:`fedsample.engine.evaluation`) both run it.
    """
    k, batch = x.shape[0], x.shape[1]
    h = x.reshape(k, batch, -1)
    inputs: list[torch.Tensor] = []
    pre: list[torch.Tensor] = []
    for i in range(num_layers):
        w = params[f"layers.{i}.weight"]
        b = params.get(f"layers.{i}.bias")
        inputs.append(h)
        z = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2)) if b is not None else torch.bmm(h, w.transpose(1, 2))
        pre.append(z)
        h = torch.relu(z) if i + 1 < num_layers else z
    return inputs, pre, h


def _output_gradient(
    out: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, task: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-slot masked mean loss and its gradient with respect to the network's output."""
    if task == "regression":
        residual = out.squeeze(-1) - y
        return (scale * residual * residual).sum(1), (2.0 * scale * residual).unsqueeze(-1)
    logp = torch.log_softmax(out, dim=-1)
    loss = -(scale * logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)).sum(1)
    dz = torch.exp(logp)
    dz.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(logp[..., :1], -1.0))
    dz.mul_(scale.unsqueeze(-1))
    return loss, dz


def dense_sgd_step(
    params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    *,
    lr: float,
    num_layers: int,
    task: str,
) -> torch.Tensor:
    """One plain SGD step of ``k`` stacked dense networks, updating ``params`` in place; returns the loss.

    The weight update is fused into the gradient product (``W <- W - lr dz^T h`` as one
    ``baddbmm_``), so no gradient tensor is materialised: with many slots the parameters no
    longer fit in cache and every pass over them counts. ``scale`` is ``mask / counts``.
    """
    inputs, pre, out = dense_forward(params, x, num_layers)
    loss, dz = _output_gradient(out, y, scale, task)
    for i in reversed(range(num_layers)):
        w = params[f"layers.{i}.weight"]
        # The next layer's gradient needs this layer's weights before their update.
        dz_prev = torch.bmm(dz, w) * (pre[i - 1] > 0) if i > 0 else None
        w.baddbmm_(dz.transpose(1, 2), inputs[i], alpha=-lr)
        bias = params.get(f"layers.{i}.bias")
        if bias is not None:
            bias.sub_(dz.sum(1), alpha=lr)
        if dz_prev is not None:
            dz = dz_prev
    return loss


def make_kernel(spec: ModelSpec) -> KernelFn:
    """The stacked loss-and-gradient function of ``spec``'s model."""
    if spec.is_dense:
        num_layers = len(spec.dense_widths) - 1
        task = spec.task

        def dense(params: Params, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor):  # type: ignore[no-untyped-def]
            return dense_loss_and_grads(params, x, y, mask, counts, num_layers=num_layers, task=task)

        return dense
    return functional_loss_and_grads(spec.build(), spec.task)


def functional_loss_and_grads(module: nn.Module, task: str) -> KernelFn:
    """``vmap(grad_and_value(loss))`` over stacked parameters for any module."""

    def slot_loss(
        params: Params, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, count: torch.Tensor
    ) -> torch.Tensor:
        out = functional_call(module, params, (x,))
        return (per_sample_loss(out, y, task) * mask).sum() / count

    batched = vmap(grad_and_value(slot_loss))

    def kernel(
        params: Params, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor
    ) -> tuple[torch.Tensor, Params]:
        grads, loss = batched(params, x, y, mask, counts)
        return loss, grads

    return kernel
