"""What the server does with the weights of a round in which some selected clients did not return.

For a selection with weights ``w_i`` and kept set ``K`` (the clients that returned, less the late
ones of over-selection), :func:`correct_weights` applies one of :data:`AGGREGATION_POLICIES`:

``"renormalise"`` (the engine's and the Flower strategy's default)
    ``w'_i = w_i * sum_j w_j / sum_{j in K} w_j`` for ``i`` in ``K``: the weights keep their sum.
    Simple, but biased whenever the return probability differs between clients (the clients that
    fail more often are under-represented).
``"inverse-probability"``
    ``w'_i = w_i / r_i`` for ``i`` in ``K``, where ``r_i`` is the probability that client ``i``
    is kept once selected (known, or estimated by :class:`ReturnRateEstimator`). Since
    ``E[1{i in K} / r_i | S] = 1``, ``E[w'_i] = E[w_i]``: an unbiased sampler stays unbiased.
``"ignore"``
    ``w'_i = w_i`` for ``i`` in ``K``: the failed clients' weight is lost (the update shrinks by
    the expected return rate). Without failures this is the sampler's own aggregation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray
from fedsample._validation import Interval, Options, check_param, invalid

__all__ = ["AGGREGATION_POLICIES", "AggregationPolicy", "ReturnRateEstimator", "correct_weights"]

AggregationPolicy = Literal["renormalise", "inverse-probability", "ignore"]
AGGREGATION_POLICIES: tuple[str, ...] = ("renormalise", "inverse-probability", "ignore")


def correct_weights(
    weights: npt.ArrayLike,
    returned: npt.ArrayLike,
    policy: str,
    return_probabilities: npt.ArrayLike | None = None,
) -> FloatArray:
    """The weights of a round's entries after failures: zero for the entries that did not return.

    ``weights``, ``returned`` and ``return_probabilities`` are aligned per entry of the selection
    (a client drawn twice has two entries with the same fate). A round in which nobody returned
    gets all-zero weights (the server keeps its model), under every policy.
    """
    owner = "correct_weights"
    check_param("policy", owner, policy, Options(AGGREGATION_POLICIES))
    w = np.asarray(weights, dtype=np.float64)
    back = np.asarray(returned, dtype=bool)
    if back.shape != w.shape:
        raise invalid("returned", owner, f"one flag per entry, shape {w.shape}", back.shape)
    out = np.where(back, w, 0.0)
    if policy == "renormalise":
        kept = float(out.sum())
        total = float(w.sum())
        if kept > 0 and math.isfinite(total):
            out *= total / kept
        return out
    if policy == "inverse-probability":
        if return_probabilities is None:
            raise invalid("return_probabilities", owner, "given for the 'inverse-probability' policy", None)
        r = np.asarray(return_probabilities, dtype=np.float64)
        if r.shape != w.shape or not np.all((r > 0) & (r <= 1)):
            shown = r.shape if r.shape != w.shape else r[~((r > 0) & (r <= 1))][0]
            raise invalid("return_probabilities", owner, f"probabilities in (0, 1] of shape {w.shape}", shown)
        return np.divide(out, r, out=np.zeros_like(out), where=back)
    return out


@dataclass
class ReturnRateEstimator:
    """Estimates each client's return probability from the rounds it was selected in.

    ``r_i ~ (returns_i + prior * r) / (selected_i + prior)``: a client seen rarely is shrunk
    towards the pooled rate ``r`` of all clients, so that one failure does not give a weight of
    infinity and a new client gets the population's rate. Memory is two counts per client.
    """

    num_clients: int
    prior: float = 2.0
    selected: npt.NDArray[np.int64] = field(init=False)
    returned: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        check_param("num_clients", "ReturnRateEstimator", self.num_clients, Interval(int, 1, None, closed="left"))
        check_param("prior", "ReturnRateEstimator", self.prior, Interval(float, 0, None, closed="neither"))
        self.selected = np.zeros(self.num_clients, dtype=np.int64)
        self.returned = np.zeros(self.num_clients, dtype=np.int64)

    def observe(self, clients: npt.ArrayLike, returned: npt.ArrayLike) -> None:
        ids = np.asarray(clients, dtype=np.int64)
        back = np.asarray(returned, dtype=bool)
        np.add.at(self.selected, ids, 1)
        np.add.at(self.returned, ids[back], 1)

    def pooled_rate(self) -> float:
        total = int(self.selected.sum())
        return 1.0 if total == 0 else max(int(self.returned.sum()) / total, 1e-6)

    def rates(self, clients: npt.ArrayLike) -> FloatArray:
        ids = np.asarray(clients, dtype=np.int64)
        pooled = self.pooled_rate()
        estimate = (self.returned[ids] + self.prior * pooled) / (self.selected[ids] + self.prior)
        return np.clip(estimate, 1e-6, 1.0)
