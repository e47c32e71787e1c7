"""Successive sampling without replacement, with Des Raj's ordered weights."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._invariants import check_count, check_distribution
from fedsample.designs.base import MAX_DRAWS
from fedsample.errors import FedsampleError
from fedsample.rng import check_generator
from fedsample.serialization import plain_data

__all__ = ["SuccessiveDesign"]


@plain_data
@dataclass(frozen=True, eq=False)
class SuccessiveDesign:
    """``num_sampled`` distinct clients drawn one after another, each from ``probabilities``
    renormalised over the clients not drawn yet (successive sampling without replacement).

    Weights follow Des Raj's ordered estimator, unbiased for ``sum_i importances[i] y_i`` for any
    client values ``y``. The client drawn ``k``-th (``k = 1..K``), after clients of total
    probability ``S_{k-1}``, gets ``importances[i] * ((1 - S_{k-1}) / p_i + (K - k)) / K``. With
    ``K = 1`` this is ``importances[i] / p_i``, the with-replacement importance weight.

    A draw tries each position with a draw from the full distribution and redraws a client
    already taken (which samples exactly from the renormalised remainder); after too many redraws
    it switches to exponential keys (``E_i / p_i``, the ``K`` smallest in order), which have the
    same law. Exact moments have no closed form here: use the Monte-Carlo estimator.
    """

    probabilities: FloatArray
    num_sampled: int
    importances: FloatArray
    cumulative: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        p = readonly(np.asarray(self.probabilities, dtype=np.float64))
        object.__setattr__(self, "probabilities", p)
        object.__setattr__(self, "importances", readonly(np.asarray(self.importances, dtype=np.float64)))
        object.__setattr__(self, "num_sampled", int(self.num_sampled))
        if self.num_sampled > int(np.count_nonzero(p > 0)):
            raise FedsampleError(
                f"The 'num_sampled' parameter of SuccessiveDesign must be at most the number of clients with "
                f"positive probability ({int(np.count_nonzero(p > 0))}). Got {self.num_sampled} instead.",
                parameter="num_sampled",
            )
        cumulative = np.cumsum(p)
        object.__setattr__(self, "cumulative", readonly(cumulative / cumulative[-1]))

    def check_invariants(self) -> None:
        owner = "SuccessiveDesign"
        check_distribution(owner, "probabilities", self.probabilities)
        check_count(owner, "num_sampled", self.num_sampled, 1, min(self.num_clients, MAX_DRAWS))
        check_distribution(owner, "importances", self.importances, size=self.num_clients)

    @property
    def num_clients(self) -> int:
        return int(self.probabilities.size)

    def draw_order(self, rng: np.random.Generator) -> IntArray:
        """The ``K`` distinct clients in the order they were drawn."""
        check_generator(rng, "SuccessiveDesign.draw_order")
        k_total = self.num_sampled
        picks: list[int] = []
        taken: set[int] = set()
        budget = 32 * k_total + 64
        while len(picks) < k_total and budget > 0:
            batch = np.searchsorted(self.cumulative, rng.random(k_total - len(picks)), side="right")
            for client in np.minimum(batch, self.num_clients - 1).tolist():
                budget -= 1
                if client not in taken and self.probabilities[client] > 0:
                    taken.add(client)
                    picks.append(client)
                    # Later draws in this batch were made before this pick was excluded, so
                    # only the first untaken one counts; the rest are redrawn.
                    break
        if len(picks) < k_total:
            with np.errstate(divide="ignore"):
                keys = rng.exponential(size=self.num_clients) / self.probabilities
            keys[list(taken)] = -1.0  # keep the picks made so far, in their order
            order = np.argsort(keys, kind="stable")[:k_total]
            picks = picks + [int(c) for c in order if int(c) not in taken][: k_total - len(picks)]
        return np.asarray(picks, dtype=np.int64)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        check_generator(rng, "SuccessiveDesign.draw")
        clients = self.draw_order(rng)
        return clients, self.ordered_weights(clients)

    def ordered_weights(self, clients: IntArray) -> FloatArray:
        """Des Raj's weights of clients drawn in the order given."""
        k_total = clients.size
        p = self.probabilities[clients]
        before = np.concatenate([[0.0], np.cumsum(p)[:-1]])  # S_{k-1}
        position = np.arange(1, k_total + 1)
        return self.importances[clients] * ((1.0 - before) / p + (k_total - position)) / k_total
