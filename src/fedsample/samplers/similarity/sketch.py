"""Count sketch: a seeded random projection of representative gradients in O(d) memory.

Each input coordinate goes to one of ``d'`` buckets with a random sign; inner products are
preserved in expectation (feature hashing). The buckets and signs come from
``default_rng([seed, tag, d, d'])``, so a sketch is a pure function of its sizes and seed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._memory import check_fits_in_memory
from fedsample._validation import invalid
from fedsample.samplers._feedback import Feedback

__all__ = ["MAX_PROJECTION_DIM", "CountSketch", "check_sketch_memory", "count_sketch", "received_vectors"]

# The largest sketch width a sampler takes: 2**40 float32 columns a client are 4 TiB, beyond any machine
# (check_sketch_memory refuses far less), and 12 n d' bytes stays a float where 10**400 overflowed.
MAX_PROJECTION_DIM = 2**40

# A tag mixed into the count-sketch seed, so that its stream differs from any other seeded by
# the same integer.
_SKETCH_TAG = 0x5EED_C0DE


@dataclass(frozen=True, eq=False)
class CountSketch:
    """Feature hashing with random signs: ``y[b] = sum_{j : h(j) = b} s(j) x[j]``.

    Each of the ``d`` coordinates goes to one of ``d'`` buckets ``h(j)`` with a sign ``s(j) = +-1``.
    Inner products are preserved in expectation (``E[<Sx, Sy>] = <x, y>``, variance at most
    ``2 |x|^2 |y|^2 / d'``), so angles and Euclidean distances are approximately kept. It stores
    ``h`` and ``s`` only, ``9 d`` bytes, where a dense Gaussian projection would need ``8 d d'``.
    """

    input_dim: int
    output_dim: int
    buckets: IntArray
    signs: npt.NDArray[np.int8]

    def project(self, vectors: npt.ArrayLike) -> FloatArray:
        """Sketch each row of a ``(k, d)`` array: ``(k, d')``, in ``O(k d)`` time and ``O(d + k d')`` memory."""
        x = np.asarray(vectors, dtype=np.float64)
        out = np.empty((x.shape[0], self.output_dim))
        for a in range(x.shape[0]):
            out[a] = np.bincount(self.buckets, weights=x[a] * self.signs, minlength=self.output_dim)
        return out


@functools.lru_cache(maxsize=2)  # a run uses one sketch; each holds 9 d bytes
def count_sketch(input_dim: int, output_dim: int, seed: int) -> CountSketch:
    """The count sketch from ``d = input_dim`` to ``d' = output_dim`` dimensions drawn from ``seed``.

    Deterministic: the same arguments give the same sketch (it is drawn from
    ``default_rng([seed, tag, d, d'])``, and cached).
    """
    rng = np.random.default_rng([int(seed), _SKETCH_TAG, int(input_dim), int(output_dim)])
    buckets = rng.integers(0, output_dim, size=input_dim, dtype=np.int64)
    signs = (2 * rng.integers(0, 2, size=input_dim, dtype=np.int8) - 1).astype(np.int8)
    return CountSketch(
        input_dim=int(input_dim), output_dim=int(output_dim), buckets=readonly(buckets), signs=readonly(signs)
    )


# --- comparing clusterings ---------------------------------------------------------------------


def check_sketch_memory(projection_dim: int | None, num_clients: int, owner: str) -> None:
    """Refuse a ``projection_dim`` whose sketched gradients cannot fit in memory: the state keeps
    ``n x d'`` float32 and a round sketches into float64 rows, ``12 n d'`` bytes at least."""
    if projection_dim is not None:
        needed = 12.0 * num_clients * projection_dim
        what = f"the sketched gradients of {num_clients} clients (12 n d' bytes)"
        check_fits_in_memory("projection_dim", owner, projection_dim, needed, what)


def received_vectors(
    feedback: Feedback,
    *,
    update_dim: int,
    projection_dim: int | None,
    projection_seed: int,
    owner: str,
    field: str = "updates",
) -> tuple[IntArray, npt.NDArray[np.float32], int]:
    """The returned clients with finite update vectors, those vectors (sketched, float32) and ``d``.

    ``field``: the Feedback field holding the vectors (``"updates"``, or ``"gradients"`` for DivFL's
    full-batch gradients).

    Shared by the samplers that keep the clients' update vectors (clustered sampling by similarity,
    DivFL). ``update_dim`` is the ``d`` seen so far (0 before any update): a feedback with another
    ``d`` is refused. A vector with a non-finite entry, before or after the float32 conversion
    (values beyond float32's range become infinite), is dropped with its client. The feedback's
    clients and the rows of its updates are those :meth:`~fedsample.samplers.Sampler.update` checked.
    """
    updates = getattr(feedback, field)
    if updates is None:
        raise invalid("feedback", owner, f"a Feedback carrying the clients' vectors ({field})", None)
    clients = feedback.clients
    if clients.size and updates.shape[1] == 0:
        raise invalid("feedback", owner, f"a Feedback whose {field} have shape ({clients.size}, d)", updates.shape)
    dim = int(updates.shape[1]) if clients.size else update_dim
    if update_dim and dim != update_dim:
        raise invalid("feedback", owner, f"a Feedback whose {field} have d = {update_dim} columns", dim)
    finite = np.all(np.isfinite(updates), axis=1)
    clients, updates = clients[finite], updates[finite]
    if projection_dim is not None and clients.size:
        updates = count_sketch(dim, projection_dim, projection_seed).project(updates)
    with np.errstate(over="ignore"):
        vectors = updates.astype(np.float32)
    finite = np.all(np.isfinite(vectors), axis=1)
    return clients[finite], vectors[finite], dim
