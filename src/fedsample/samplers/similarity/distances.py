"""Stage 1 of Algorithm 2 of paper 000: distances between the clients' representative gradients.

Only the rows and columns of the clients that returned change in a round, so an update costs
``O(n k d)`` for ``k`` returned clients instead of ``O(n^2 d)`` (000, App. C.2). Used by the
similarity sampler (:mod:`fedsample.samplers.similarity.sampler`) and by DivFL.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray
from fedsample._invariants import FieldError

__all__ = ["Similarity", "check_squared_distances", "distance_rows", "pairwise_distances", "update_distances"]

Similarity = Literal["arccos", "l2", "l1"]
# Gradients are read in blocks of this many float64 elements (32 MiB), so that dot products are
# accumulated in double precision without a double copy of the whole (n, d) matrix.
_BLOCK_ELEMENTS = 1 << 22
# Dot products are summed over slices of this many coordinates (32 KiB of float64 per row, so a
# block's slice stays in cache while every probe reads it), the slices added in order.
_DOT_SLICE = 4096


# --- stage 1: distances ------------------------------------------------------------------------


def distance_rows(gradients: npt.ArrayLike, clients: npt.ArrayLike, *, similarity: Similarity) -> FloatArray:
    """Distances from each client in ``clients`` to every client: a ``(k, n)`` array.

    ``similarity`` is ``"arccos"`` (the angle ``arccos(cos(G_i, G_j))``, the cosine clipped to
    ``[-1, 1]``; a zero vector is orthogonal to every non-zero one and at angle 0 from another
    zero vector), ``"l2"`` (the *squared* Euclidean distance, as the authors used) or ``"l1"``.
    Dot products are accumulated in float64, in an order fixed by ``d`` alone
    (:func:`_fixed_order_dots`), so the distances have the same bits at any thread count. Cost
    ``O(n k d)``.
    """
    g = np.asarray(gradients)
    ids = np.asarray(clients, dtype=np.int64)
    n, d = g.shape
    out = np.zeros((ids.size, n))
    if d == 0 or ids.size == 0:
        return out
    probe = g[ids].astype(np.float64)
    probe_sq = np.einsum("ij,ij->i", probe, probe)
    step = max(1, _BLOCK_ELEMENTS // d)
    buffer = np.empty((min(step, n), d))  # reused: one allocation, not one per block
    for start in range(0, n, step):
        stop = min(n, start + step)
        chunk = buffer[: stop - start]
        np.copyto(chunk, g[start:stop])
        if similarity == "l1":
            for a in range(ids.size):
                out[a, start:stop] = np.abs(chunk - probe[a]).sum(axis=1)
            continue
        dots = _fixed_order_dots(probe, chunk)
        chunk_sq = np.einsum("ij,ij->i", chunk, chunk)
        if similarity == "l2":
            # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b; rounding can make it slightly negative.
            out[:, start:stop] = np.maximum(probe_sq[:, None] + chunk_sq[None, :] - 2.0 * dots, 0.0)
        else:
            norms = np.sqrt(probe_sq)[:, None] * np.sqrt(chunk_sq)[None, :]
            cosine = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
            angle = np.arccos(np.clip(cosine, -1.0, 1.0))
            angle[(probe_sq[:, None] == 0) & (chunk_sq[None, :] == 0)] = 0.0
            out[:, start:stop] = angle
    out[np.arange(ids.size), ids] = 0.0
    return out


def _fixed_order_dots(probe: FloatArray, chunk: FloatArray) -> FloatArray:
    """``probe @ chunk.T``, summed in an order that depends on the shapes alone.

    A BLAS matrix product splits its work over threads in a way that depends on the thread count,
    and with it the order of the sums: the distances of one run then differed in their last bits
    between 1 and 2 threads, and so could Ward's tree. numpy's ``einsum`` (without ``optimize``)
    does not call BLAS and runs on one thread.
    """
    out = np.zeros((probe.shape[0], chunk.shape[0]))
    for start in range(0, probe.shape[1], _DOT_SLICE):
        stop = start + _DOT_SLICE
        out += np.einsum("ij,kj->ik", probe[:, start:stop], chunk[:, start:stop])
    return out


def update_distances(
    distances: npt.ArrayLike, gradients: npt.ArrayLike, clients: npt.ArrayLike, *, similarity: Similarity
) -> FloatArray:
    """A copy of the ``(n, n)`` matrix ``distances`` with the rows and columns of ``clients``
    recomputed from ``gradients`` (000, App. C.2: ``O(n k d)`` per round).

    The block between two updated clients is symmetrised, so the result stays exactly symmetric.
    """
    ids = np.asarray(clients, dtype=np.int64)
    out = np.array(distances, dtype=np.float64, copy=True)
    if ids.size == 0:
        return out
    rows = distance_rows(gradients, ids, similarity=similarity)
    block = rows[:, ids]
    rows[:, ids] = 0.5 * (block + block.T)
    out[ids, :] = rows
    out[:, ids] = rows.T
    return out


def check_squared_distances(owner: str, gradients: npt.ArrayLike, distances: npt.ArrayLike, *, probes: int = 4) -> None:
    """Refuse a cached ``(n, n)`` matrix of squared Euclidean distances that ``gradients`` do not give.

    The cache is derived from the gradients (:func:`update_distances` with ``similarity="l2"``), so
    a saved state must agree with them. Recomputing it would cost ``O(n^2 d)``; instead ``probes``
    random sign vectors ``r`` compare ``D r`` with ``s (1.r) + (s.r) 1 - 2 G (G^T r)`` (``s`` the
    squared norms): ``O(n^2 + n d)`` per probe (Freivalds's check). Rounding moves each entry by at
    most ``(d + 4) eps (s_i + s_j)`` and the products by a like amount, so honest caches always pass;
    an entry off by more than that bound (about ``(n + d) eps`` of the norms) fails every probe,
    several entries off fail each probe with probability at least 1/2. The matrix must also be
    exactly symmetric with a zero diagonal, as :func:`update_distances` keeps it.
    """
    g = np.asarray(gradients, dtype=np.float64)
    cached = np.asarray(distances, dtype=np.float64)
    n, d = g.shape
    rule = "the squared distances between the rows of 'gradients' (a cache derived from them)"
    if n == 0:
        return
    if not np.array_equal(cached, cached.T) or np.any(np.diagonal(cached) != 0):
        raise FieldError(owner, "distances", rule, "a matrix that is not symmetric with a zero diagonal")
    squared = np.einsum("ij,ij->i", g, g)
    # Fresh entropy, not a fixed seed: a file cannot be crafted against signs it cannot know.
    signs = np.random.default_rng().choice(np.array([-1.0, 1.0]), size=(n, probes))
    expected = squared[:, None] * signs.sum(axis=0) + (squared @ signs)[None, :] - 2.0 * (g @ (g.T @ signs))
    eps = float(np.finfo(np.float64).eps)
    tolerance = 8.0 * (n + d + 8) * eps * (n * squared + squared.sum()) + 1e-300
    off = np.abs(cached @ signs - expected).max(axis=1)
    if np.any(off > tolerance):
        row = int(np.argmax(off / tolerance))
        got = f"row {row} off by {float(off[row]):.3g} in a probe (rounding allows {float(tolerance[row]):.3g})"
        raise FieldError(owner, "distances", rule, got)


def pairwise_distances(gradients: npt.ArrayLike, *, similarity: Similarity) -> FloatArray:
    """The full ``(n, n)`` distance matrix, ``O(n^2 d)``: every row recomputed (the naive way)."""
    g = np.asarray(gradients)
    n, d = g.shape
    out = np.zeros((n, n))
    # Probe blocks of about 256 MiB in float64 keep the matrix products large.
    step = max(1, (8 * _BLOCK_ELEMENTS) // max(d, 1))
    for start in range(0, n, step):
        ids = np.arange(start, min(n, start + step))
        out[ids] = distance_rows(g, ids, similarity=similarity)
    return 0.5 * (out + out.T)
