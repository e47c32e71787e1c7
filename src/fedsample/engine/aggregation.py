"""How the server combines what the kept clients of a round return, per run.

Parameters move by the server optimizer (:mod:`fedsample.engine.server`) along
``delta = sum_i w_i(S_t) (theta_i - theta)``. Buffers are not parameters: no gradient moves them, and
a pseudo-gradient step (momentum, Adam) means nothing for them. BatchNorm's running mean and
variance are estimates of the activations' statistics, so the server takes their *weighted mean*
over the kept clients, with the round's weights normalised to sum 1:

``b <- sum_i w_i b_i / sum_i w_i``.

A convex combination keeps every running variance positive, which the unbiased form
``b + sum_i w_i (b_i - b)`` would not when the weights sum to more than one (inverse-probability or
Poisson weights can); with weights summing to one (FedAvg, MD, uniform sampling) the two are equal.
Integer buffers (``num_batches_tracked``) take the same weighted mean, rounded to the nearest
integer. A run with no kept client, or whose kept weights sum to zero, keeps its buffers.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsample._arrays import IntArray
from fedsample.engine.models import Params

__all__ = ["combine_buffers"]


def combine_buffers(
    buffers: Params, slot_buffers: Params, run_of_slot: IntArray, weights: torch.Tensor, num_runs: int
) -> Params:
    """Each run's buffers ``(R, ...)`` after the round, from the kept slots' buffers and weights (see above).

    ``slot_buffers`` are stacked over the kept slots, slot ``j`` being a client of run ``run_of_slot[j]``
    with weight ``weights[j]``.
    """
    if not buffers:
        return buffers
    device = weights.device
    index = torch.as_tensor(np.asarray(run_of_slot), device=device, dtype=torch.long)
    w = weights.to(torch.float64)
    totals = torch.zeros(num_runs, dtype=torch.float64, device=device).index_add_(0, index, w)
    kept = totals > 0
    share = w / torch.where(kept, totals, torch.ones_like(totals)).index_select(0, index)
    out: Params = {}
    for name, current in buffers.items():
        values = slot_buffers[name].to(torch.float64)
        scaled = values * share.view(-1, *[1] * (values.dim() - 1))
        mean = torch.zeros((num_runs, *current.shape[1:]), dtype=torch.float64, device=device).index_add_(
            0, index, scaled
        )
        if not current.is_floating_point():
            mean = torch.round(mean)
        chosen = torch.where(kept.view(-1, *[1] * (mean.dim() - 1)), mean, current.to(torch.float64))
        out[name] = chosen.to(current.dtype)
    return out
