"""Loss and gradient of ``k`` clients' models at once, on their own mini-batches.

Parameters are *stacked*: every tensor has a leading axis of length ``k`` (one model per slot).
Two implementations:

* the dense kernels (:func:`dense_loss_and_grads`, :func:`dense_sgd_step`) for dense ReLU networks
  (a :class:`~fedsample.engine.user_model.DenseLayout`): the forward and backward passes written with
  batched matrix products (``bmm``), the fastest form on a CPU;
* :func:`functional_kernel` for any ``nn.Module``: ``torch.func``'s ``vmap(grad_and_value(...))``
  over ``functional_call``, with the slots' buffers passed in batched (BatchNorm updates each
  slot's running statistics in place) and each slot's dropout keyed by its own key
  (:mod:`fedsample.engine.dropout`).

The loss of a slot is the mean over its real samples: ``sum_b mask[b] l_b / counts``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import functional_call, grad_and_value, vmap

from fedsample.engine.dropout import dropout_keys
from fedsample.engine.losses import per_sample_loss
from fedsample.engine.paper_models import Params
from fedsample.engine.user_model import BoundModel, DenseLayout

__all__ = [
    "FunctionalKernel",
    "dense_forward",
    "dense_loss_and_grads",
    "dense_sgd_step",
    "functional_kernel",
    "per_sample_loss",
]

# (params, buffers, x, y, mask, counts, keys, step) -> (loss[k], grads, per-sample losses [k, B]);
# the buffers are updated in place.
FunctionalKernel = Callable[
    [Params, Params, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int],
    tuple[torch.Tensor, Params, torch.Tensor],
]


def dense_loss_and_grads(
    params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    counts: torch.Tensor,
    *,
    layout: DenseLayout,
    task: str,
) -> tuple[torch.Tensor, Params]:
    """Masked mean loss and its gradient for ``k`` stacked dense networks.

    Shapes: weights ``(k, out, in)``, biases ``(k, out)``, ``x (k, B, features)``, ``y (k, B)``,
    ``mask (k, B)``, ``counts (k,)``.
    """
    inputs, pre, out = dense_forward(params, x, layout)
    loss, dz = _output_gradient(out, y, mask / counts.unsqueeze(1), task)
    grads: Params = {}
    for i in reversed(range(layout.num_layers)):
        grads[layout.weights[i]] = torch.bmm(dz.transpose(1, 2), inputs[i])
        bias = layout.biases[i]
        if bias is not None:
            grads[bias] = dz.sum(1)
        if i > 0:  # no gradient for the input itself
            dz = torch.bmm(dz, params[layout.weights[i]]) * (pre[i - 1] > 0)
    return loss, grads


def dense_forward(
    params: Params, x: torch.Tensor, layout: DenseLayout
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
    last = layout.num_layers - 1
    for i, (weight, bias) in enumerate(zip(layout.weights, layout.biases, strict=True)):
        w = params[weight]
        b = params[bias] if bias is not None else None
        inputs.append(h)
        z = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2)) if b is not None else torch.bmm(h, w.transpose(1, 2))
        pre.append(z)
        h = torch.relu(z) if i < last else z
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
    layout: DenseLayout,
    task: str,
) -> torch.Tensor:
    """One plain SGD step of ``k`` stacked dense networks, updating ``params`` in place; returns the loss.

    The weight update is fused into the gradient product (``W <- W - lr dz^T h`` as one
    ``baddbmm_``), so no gradient tensor is materialised: with many slots the parameters no
    longer fit in cache and every pass over them counts. ``scale`` is ``mask / counts``.
    """
    inputs, pre, out = dense_forward(params, x, layout)
    loss, dz = _output_gradient(out, y, scale, task)
    for i in reversed(range(layout.num_layers)):
        w = params[layout.weights[i]]
        # The next layer's gradient needs this layer's weights before their update.
        dz_prev = torch.bmm(dz, w) * (pre[i - 1] > 0) if i > 0 else None
        w.baddbmm_(dz.transpose(1, 2), inputs[i], alpha=-lr)
        bias = layout.biases[i]
        if bias is not None:
            params[bias].sub_(dz.sum(1), alpha=lr)
        if dz_prev is not None:
            dz = dz_prev
    return loss


def dense_sample_losses(
    params: Params, x: torch.Tensor, y: torch.Tensor, layout: DenseLayout, task: str
) -> torch.Tensor:
    """Per-sample task losses ``(k, B)`` of ``k`` stacked dense networks on ``x (k, B, ...)``."""
    k, batch = y.shape
    out = dense_forward(params, x, layout)[2].reshape(k * batch, -1)
    if task == "regression":
        out = out.squeeze(-1)
    return per_sample_loss(out, y.reshape(-1), task).view(k, batch)


def functional_kernel(model: BoundModel) -> FunctionalKernel:
    """``vmap(grad_and_value(loss))`` over the slots' stacked parameters, buffers, batches and dropout keys.

    In a slot, the module (``model.train_module``, in ``train()`` mode) runs on its batch with the slot's
    parameters and buffers; its loss is the masked mean of the model's per-sample loss, and its
    gradient is taken with respect to the parameters only. Buffers are updated in place, slot by slot
    (BatchNorm's running statistics). Frozen parameters (``requires_grad=False``) are passed as constants
    and get no gradient: the gradients returned are the trainable parameters'. ``vmap``'s randomness is
    ``"error"``: a random operation other than the keyed dropout cannot be batched (the backend then
    falls back to the sequential one).
    """
    module = model.train_module
    loss_of = model.loss
    frozen = model.frozen

    def slot_loss(
        params: Params,
        constants: Params,
        buffers: Params,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        count: torch.Tensor,
        key: torch.Tensor,
        step: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with dropout_keys(key, step):
            out = functional_call(module, (params, constants, buffers), (x,))
        losses = loss_of(out, y)
        return (losses * mask).sum() / count, losses.detach()

    batched = vmap(grad_and_value(slot_loss, has_aux=True), in_dims=(0, 0, 0, 0, 0, 0, 0, 0, None))

    def kernel(
        params: Params,
        buffers: Params,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        counts: torch.Tensor,
        keys: torch.Tensor,
        step: int,
    ) -> tuple[torch.Tensor, Params, torch.Tensor]:
        # Frozen parameters go in as constants: no gradient is computed for them.
        trained = {n: v for n, v in params.items() if n not in frozen}
        constants = {n: v for n, v in params.items() if n in frozen}
        grads, (loss, losses) = batched(trained, constants, buffers, x, y, mask, counts, keys, step)
        return loss, grads, losses

    return kernel
