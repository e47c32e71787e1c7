"""The batch rule of local training, shared by every backend.

Each of the ``N`` local steps of a client draws a fresh mini-batch of ``min(B, n_i)`` *distinct*
local samples, uniformly (the papers draw ``B`` samples per step). A data-level sampler instead
keeps a subset for the round (the ``batch_size`` instruction of its selection: FedSampling's kept
count ``k_i``): that slot draws one uniform ``min(k_i, n_i)``-subset and every one of its ``N``
steps reads that same subset, so the client touches exactly its kept samples. A client with fewer
than ``B`` samples uses all of them at every step; its batch is padded to ``B`` with a mask, and
its loss is the mean over its real samples, so padding never changes the gradient.

The indices of client ``i`` in round ``t`` of a run with seed ``s`` come from the random stream
``(s, TRAINING, t, i)``: they do not depend on the other clients of the round, on the backend,
or on whether several runs are batched together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsample._arrays import BoolArray, IntArray
from fedsample.rng import Stream, stream_rng

__all__ = ["BatchPlan", "draw_client_batches", "plan_batches", "selection_batches"]


@dataclass(frozen=True, eq=False)
class BatchPlan:
    """Rows of the pooled training arrays that ``k`` slots read at each of ``steps`` local steps.

    ``rows[s, j, b]`` is the pooled row of the ``b``-th sample of slot ``j`` at step ``s``;
    ``counts[j]`` is the number of real samples per step (``min(B, n_i)``); positions ``b >=
    counts[j]`` are padding (they repeat a real row and carry zero weight).
    """

    rows: IntArray  # (steps, k, B)
    counts: IntArray  # (k,)
    batch_size: int | None = None  # the round's B (None: the width of rows)

    @property
    def mask(self) -> np.ndarray:
        """``(k, B)`` float32 weights: 1 for real samples, 0 for padding."""
        batch = self.rows.shape[2]
        return (np.arange(batch)[None, :] < self.counts[:, None]).astype(np.float32)


def draw_client_batches(rng: np.random.Generator, size: int, steps: int, batch_size: int) -> IntArray:
    """``(steps, min(batch_size, size))`` local indices: each row distinct, uniform without replacement."""
    b = min(batch_size, size)
    if b == size:
        return np.broadcast_to(np.arange(size, dtype=np.int64), (steps, size)).copy()
    keys = rng.random((steps, size), dtype=np.float32)
    # The b smallest of size i.i.d. uniform keys are a uniform b-subset.
    return np.argpartition(keys, b - 1, axis=1)[:, :b].astype(np.int64)


def plan_batches(
    *,
    seeds: IntArray,
    round_index: int,
    clients: IntArray,
    offsets: IntArray,
    steps: int,
    batch_size: int,
    slot_batch_sizes: IntArray | None = None,
    kept_subsets: BoolArray | None = None,
) -> BatchPlan:
    """The batches of one round for slots ``(seeds[j], clients[j])`` over pooled client ``offsets``.

    ``slot_batch_sizes`` (optional, one per slot, ``>= 1``) replaces ``batch_size`` for that slot:
    data-level samplers (FedSampling) tell each client how many of its samples to use. A slot's
    batch is still capped at the client's size. ``kept_subsets`` (optional, one bool per slot)
    marks the slots whose batch is the round's kept subset: drawn once (the draw of the first
    step) and read at every step, instead of a fresh draw per step.
    """
    k = clients.size
    sizes = np.full(k, batch_size, dtype=np.int64) if slot_batch_sizes is None else np.asarray(slot_batch_sizes)
    kept = np.zeros(k, dtype=bool) if kept_subsets is None else np.asarray(kept_subsets, dtype=bool)
    width = int(sizes.max()) if k else batch_size
    rows = np.empty((steps, k, width), dtype=np.int64)
    counts = np.empty(k, dtype=np.int64)
    for j in range(k):
        client = int(clients[j])
        start, size = int(offsets[client]), int(offsets[client + 1] - offsets[client])
        b = min(int(sizes[j]), size)
        if b == size:  # the whole client every step: no draw (and no generator to build)
            local = np.broadcast_to(np.arange(size, dtype=np.int64), (steps, size))
        else:
            rng = stream_rng(int(seeds[j]), Stream.TRAINING, round_index, client)
            # A kept subset is the first step's draw, so one local step gives the same batch either way.
            local = draw_client_batches(rng, size, 1 if kept[j] else steps, b)
            local = np.broadcast_to(local, (steps, b)) if kept[j] else local
        counts[j] = b
        rows[:, j, :b] = start + local
        rows[:, j, b:] = start  # padding: a real row with zero weight
    return BatchPlan(rows=rows, counts=counts, batch_size=batch_size)


def selection_batches(selection: Any, clients: IntArray, batch_size: int) -> tuple[IntArray, BoolArray]:
    """Each distinct client's batch size and whether it keeps one subset for the round.

    A data-level selection (its ``batch_size`` instruction: FedSampling's kept counts) gives each
    client its kept count, at least 1, read from the client's first entry, and a kept subset that
    every local step reads; any other selection gives every client ``B`` and a fresh batch per step.
    """
    sizes = selection.instructions.get("batch_size")
    if sizes is None:
        return np.full(clients.size, batch_size, dtype=np.int64), np.zeros(clients.size, dtype=bool)
    # The instruction of a client's first entry (data-level samplers list each client once).
    first = np.unique(selection.clients, return_index=True)[1]
    kept_sizes: IntArray = np.maximum(np.asarray(sizes)[first], 1).astype(np.int64)
    return kept_sizes, np.ones(clients.size, dtype=bool)
