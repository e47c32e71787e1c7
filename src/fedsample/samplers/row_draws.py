"""Independent draws from rows, and the one loop that redraws the entries landing on unavailable clients.

A round of a *row design* is a list of entries, entry ``k`` an independent draw from row
``draw_rows[k]``: MD sampling (one row ``p``, drawn ``m`` times), clustered sampling (``m`` rows,
one draw each), OSMD and the bandits drawing with replacement. Both the engine's designs
(:class:`~fedsample.designs.RowDesign`) and the population samplers' states
(:mod:`fedsample.samplers.population.samplers`) implement the :class:`RowDraws` protocol, and both go
through :func:`redraw_unavailable` when some clients cannot take part in a round: the engine's
:func:`~fedsample.participation.procedure.select_participants` (and so the statistics and the Flower
strategy), and the population samplers' ``sample(..., availability=...)``.

The redraw loop and its stopping rule
-------------------------------------
An entry whose client is unavailable in round ``t`` is replaced by fresh draws from its own row
until one lands on an available client. Try ``j = 1, 2, ...`` gives each still-unavailable entry a
batch of ``2^j`` candidates (fewer when the round's pending entries would ask more than ``64`` per
entry of the round, and at least one) and keeps its first available candidate. The candidates of a
row are i.i.d. draws from the row, and the availability of a round is fixed, so the first available
one has exactly the row's law conditioned on the available set ``A_t``; batching only groups the
stream of candidates. **Stopping rule:** after ``redraws`` tries the entries still unavailable are
returned as *pending*; what becomes of them is the caller's choice (the engine skips them like
failed clients; a population sampler scans a clustered row exactly, or raises). ``redraws = 0``
skips the loop. With ``10`` tries an entry asks up to ``2 + 4 + ... + 1024 = 2046`` candidates, so
it stays pending with probability ``(1 - a)^2047`` where ``a`` is its row's available mass.

Availability is asked about candidates only: ``O(m)`` per try, never ``O(n)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fedsample._arrays import BoolArray, FloatArray, IntArray

__all__ = ["MAX_BATCH", "Availability", "Redrawn", "RowDraws", "redraw_unavailable"]

# Candidates asked about in one try are at most this many per entry of the round: O(m) memory.
MAX_BATCH = 64


@runtime_checkable
class RowDraws(Protocol):
    """A design whose round is one independent draw per entry, entry ``k`` from row ``draw_rows[k]``."""

    @property
    def draw_rows(self) -> IntArray:
        """The row of each entry of a round, in draw order."""
        ...

    def draw_from_rows(self, rows: IntArray, rng: np.random.Generator) -> IntArray:
        """One independent draw from each of ``rows`` (row ids, repeats allowed): the clients drawn."""
        ...

    def entry_weights(self, clients: IntArray) -> FloatArray:
        """The aggregation weight of each entry, given the client it drew."""
        ...


@runtime_checkable
class Availability(Protocol):
    """What the redraw loop asks of an availability model: which of ``clients`` can join ``round``.

    :class:`fedsample.participation.availability.Availability` and its subclasses satisfy it; the
    samplers layer states the protocol itself so that it imports nothing from the participation
    layer above it. A model must answer the same for the same ``(round, client)``, as fedsample's
    models do (they hash it).
    """

    def available(self, round: int, clients: npt.ArrayLike) -> BoolArray: ...


@dataclass(frozen=True, eq=False)
class Redrawn:
    """The entries after the redraw loop.

    ``clients``: the client of each entry (an available one, but for the pending entries);
    ``pending``: the entries still on an unavailable client after the last try (indices, increasing);
    ``unavailable``: the draws that hit an unavailable client (the first draws and the rejected
    candidates before each entry's first available one, all of them for a pending entry).
    """

    clients: IntArray
    pending: IntArray
    unavailable: int


def redraw_unavailable(
    design: RowDraws,
    rows: IntArray,
    clients: IntArray,
    availability: Availability,
    round: int,
    rng: np.random.Generator,
    *,
    redraws: int,
) -> Redrawn:
    """Replace the entries of ``clients`` (drawn from ``rows``) that are unavailable in ``round``.

    ``design.draw_from_rows`` draws the candidates with ``rng``; the loop stops after ``redraws``
    tries (the module documentation states the rule). ``clients`` is not modified.
    """
    out = np.array(clients, dtype=np.int64, copy=True)
    pending = np.flatnonzero(~availability.available(round, out))
    unavailable = int(pending.size)
    per_row = 1
    for _ in range(redraws):
        if pending.size == 0:
            break
        per_row = max(1, min(2 * per_row, (MAX_BATCH * rows.size) // pending.size))
        candidates = design.draw_from_rows(np.repeat(rows[pending], per_row), rng).reshape(pending.size, per_row)
        ok = availability.available(round, candidates.ravel()).reshape(candidates.shape)
        found = ok.any(axis=1)
        first = ok.argmax(axis=1)
        out[pending[found]] = candidates[found, first[found]]
        unavailable += int(first[found].sum()) + per_row * int((~found).sum())
        pending = pending[~found]
    return Redrawn(clients=out, pending=pending, unavailable=unavailable)
