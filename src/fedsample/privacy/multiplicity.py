"""The number of times a row design draws each client in one round: its law, from the design's rows.

A :class:`~fedsample.designs.RowDesign` draws row ``u`` ``row_counts[u]`` times, independently, and
row ``u`` gives client ``i`` probability ``r[u, i]``. Client ``i``'s multiplicity is therefore the
sum of independent ``Binomial(row_counts[u], r[u, i])`` over the rows that hold it: a binomial for MD
(one row ``p`` drawn ``m`` times), a Poisson-binomial for clustered sampling (``m`` rows drawn once).
"""

from __future__ import annotations

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample.designs import RowDesign

__all__ = ["multiplicity_laws", "row_columns"]

# Laws over at most this many draws are computed whole; beyond, each binomial is cut where its upper
# tail falls below TAIL, and the mass cut off is returned (the accountant counts it as a total loss).
EXACT_DRAWS = 4096
TAIL = 1e-18


def row_columns(design: RowDesign) -> tuple[IntArray, FloatArray]:
    """Each client's entries ``(row_counts[u], r[u, i])`` over the rows that can draw it, as two
    ``(n, E)`` arrays padded with zeros (``E``: the most rows any client sits in), sorted within a client
    so that clients with the same rows have the same row of each array."""
    num_rows = design.row_counts.size
    row_of_entry = np.repeat(np.arange(num_rows, dtype=np.int64), np.diff(design.indptr))
    count = design.row_counts[row_of_entry]
    keep = (design.probabilities > 0) & (count > 0)
    client, count, probability = design.indices[keep], count[keep], design.probabilities[keep]
    order = np.lexsort((probability, count, client))
    client, count, probability = client[order], count[order], probability[order]
    first = np.searchsorted(client, client, side="left")
    position = np.arange(client.size) - first
    width = int(position.max()) + 1 if position.size else 1
    counts = np.zeros((design.num_clients, width), dtype=np.int64)
    probabilities = np.zeros((design.num_clients, width))
    counts[client, position] = count
    probabilities[client, position] = probability
    return counts, probabilities


def multiplicity_laws(counts: IntArray, probabilities: FloatArray) -> tuple[list[FloatArray], list[float]]:
    """For each row of ``counts`` and ``probabilities`` (one client's entries), the law of its
    multiplicity ``P(K = 0), P(K = 1), ...`` and the mass beyond the last value kept (0 when exact)."""
    from scipy import stats  # here, not at import: the CLI's config sections import this package

    laws: list[FloatArray] = []
    tails: list[float] = []
    for row_counts, row_probabilities in zip(counts, probabilities, strict=True):
        used = (row_counts > 0) & (row_probabilities > 0)
        law = np.ones(1)
        exact = int(row_counts[used].sum()) <= EXACT_DRAWS
        for draws, rate in zip(row_counts[used].tolist(), row_probabilities[used].tolist(), strict=True):
            top = draws if exact else _cutoff(draws, rate)
            law = np.convolve(law, stats.binom.pmf(np.arange(top + 1), draws, rate))
        law = np.maximum(law, 0.0)
        tail = 0.0 if exact else max(0.0, 1.0 - float(law.sum()))
        laws.append(law / max(float(law.sum()), 1.0))
        tails.append(tail)
    return laws, tails


def _cutoff(draws: int, rate: float) -> int:
    """The least ``k`` with ``P(Binomial(draws, rate) > k) <= TAIL``, by bisection (scipy's ``isf`` loses
    its way that far in the tail)."""
    from scipy import stats

    low, high = -1, draws  # sf(low) > TAIL, sf(high) = 0
    while high - low > 1:
        middle = (low + high) // 2
        if stats.binom.sf(middle, draws, rate) <= TAIL:
            high = middle
        else:
            low = middle
    return high
