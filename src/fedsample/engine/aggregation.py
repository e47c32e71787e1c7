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

Under the memory policies ``"mifa"`` and ``"fedvarp"`` (docs/failures.md) the server remembers every
client's latest update ``y_i`` (zero before its first) in an :class:`UpdateMemory`, and
:func:`memory_step` gives the direction ``delta = Y + sum_{i in K} c_i (Delta_i - y_i)`` with
``Y = sum_j p_j y_j``, then stores ``y_i = Delta_i`` and ``Y <- Y + sum_{i in K} p_i (Delta_i - y_i)``.
``c_i`` are the round's settled weights (``p_i`` for MIFA, so that ``delta`` is the new ``Y``). ``Y``
is kept in float64 and moved by the kept clients only, so a round costs ``O(|K| d)``, not ``O(n d)``.
MIFA as its authors released it (:mod:`fedsample.participation.mifa`) stores ``Delta_i / eta_t``, the
update over the round's local learning rate, and moves along ``eta_t`` times the direction, so that a
stale update is rescaled by the learning rate's decay; a run filling its memory does not move.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from fedsample._arrays import IntArray
from fedsample.engine.paper_models import Params

__all__ = ["UpdateMemory", "combine_buffers", "memory_step", "new_memory"]


@dataclass(eq=False)
class UpdateMemory:
    """Each run's remembered updates of a memory policy: ``updates[name]`` is ``(runs, clients, ...)``
    (the parameters' dtype; zero for a client never kept) and ``average[name]`` is
    ``sum_j p_j y_j``, ``(runs, ...)`` in float64."""

    updates: Params
    average: Params


def new_memory(globals: Params, num_clients: int) -> UpdateMemory:
    """An empty memory (every ``y_i = 0``) for the stacked global models ``globals`` ``(runs, ...)``."""
    updates = {n: v.new_zeros((v.shape[0], num_clients, *v.shape[1:])) for n, v in globals.items()}
    average = {n: torch.zeros(v.shape, dtype=torch.float64, device=v.device) for n, v in globals.items()}
    return UpdateMemory(updates, average)


def memory_step(
    memory: UpdateMemory,
    updates: Params | None,
    run_of_slot: IntArray,
    clients: IntArray,
    weights: npt.ArrayLike,
    importances: npt.ArrayLike,
    *,
    still_without_kept: bool,
    still_runs: npt.ArrayLike | None = None,
    learning_rate: float = 1.0,
) -> tuple[Params, UpdateMemory]:
    """The round's direction per run and the memory after it (module doc).

    Slot ``j`` is kept client ``clients[j]`` of run ``run_of_slot[j]``, with update ``updates[name][j]``
    and correction weight ``weights[j]``; ``importances`` are those clients' ``p_i``. ``updates`` is
    ``None`` when no slot was kept. With ``still_without_kept`` (FedVARP, as its authors' code does) a
    run without a kept client does not move; otherwise it moves along ``Y``. The runs flagged in
    ``still_runs`` do not move either (a released MIFA filling its memory). ``learning_rate`` ``eta``
    (the released MIFA's, 1 otherwise): the memory stores ``Delta_i / eta`` and the direction is ``eta``
    times the memory's. The remembered updates are written in place (a copy would cost ``O(n d)`` a
    round); the average is new.
    """
    some = next(iter(memory.updates.values()))
    device, num_runs = some.device, some.shape[0]
    runs = torch.as_tensor(np.asarray(run_of_slot, dtype=np.int64), device=device)
    ids = torch.as_tensor(np.asarray(clients, dtype=np.int64), device=device)
    c = torch.as_tensor(np.asarray(weights, dtype=np.float64), device=device)
    p = torch.as_tensor(np.asarray(importances, dtype=np.float64), device=device)
    moving = torch.ones(num_runs, dtype=torch.bool, device=device)
    if still_without_kept:
        moving = torch.bincount(runs, minlength=num_runs) > 0
    if still_runs is not None:
        moving &= ~torch.as_tensor(np.asarray(still_runs, dtype=bool), device=device)
    # Per-run weighted sums of the slots as one product with a (runs, slots) matrix: index_add into a
    # few rows serialises over the slots.
    slots = torch.arange(runs.numel(), device=device)
    by_run_c = torch.zeros((num_runs, runs.numel()), dtype=torch.float64, device=device).index_put_((runs, slots), c)
    by_run_p = torch.zeros((num_runs, runs.numel()), dtype=torch.float64, device=device).index_put_((runs, slots), p)
    delta: Params = {}
    average: Params = {}
    for name, stored in memory.updates.items():
        fresh = updates[name] if updates is not None else stored.new_zeros((0, *stored.shape[2:]))
        fresh = fresh.to(torch.float64) / learning_rate  # exact at 1
        shape = memory.average[name].shape
        width = int(np.prod(shape[1:]))
        difference = (fresh - stored[runs, ids].to(torch.float64)).reshape(runs.numel(), width)
        moved = (memory.average[name] + (by_run_c @ difference).reshape(shape)) * learning_rate
        delta[name] = torch.where(moving.view(-1, *[1] * (len(shape) - 1)), moved, 0.0).to(stored.dtype)
        average[name] = memory.average[name] + (by_run_p @ difference).reshape(shape)
        stored[runs, ids] = fresh.to(stored.dtype)
    return delta, UpdateMemory(memory.updates, average)


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
