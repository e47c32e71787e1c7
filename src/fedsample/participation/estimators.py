"""The states of the policies that learn across rounds: estimated return rates, FedAU's participation intervals.

:class:`ReturnRateEstimator` feeds the ``"inverse-probability"`` policy with ``return_rates="estimated"``;
:class:`IntervalEstimator` is FedAU's online estimate of ``1 / r_i`` (:mod:`fedsample.participation.policies`).
Each is plain counts per client that a checkpoint stores and :func:`restored_counts` checks on the way back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray
from fedsample._validation import Interval, check_param, invalid

__all__ = ["IntervalEstimator", "ReturnRateEstimator", "restored_counts"]


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

    def counts(self) -> dict[str, npt.NDArray[np.int64]]:
        """The state, as named arrays (what a checkpoint stores)."""
        return {"return_selected": self.selected, "return_returned": self.returned}

    def load_counts(self, counts: Mapping[str, npt.ArrayLike]) -> None:
        """Continue from :meth:`counts` (of a checkpoint), checked first."""
        selected = restored_counts(counts, "return_selected", self.selected, "ReturnRateEstimator")
        returned = restored_counts(counts, "return_returned", self.returned, "ReturnRateEstimator")
        if np.any(returned > selected):
            raise invalid("return_returned", "ReturnRateEstimator", "at most return_selected, client by client", "more")
        self.selected[...], self.returned[...] = selected, returned


@dataclass
class IntervalEstimator:
    """FedAU's online estimate of ``1 / r_i`` from the intervals between a client's returns.

    Counted in the rounds client ``i`` is asked (every round, in FedAU's setting where every client is
    asked): ``gap_i`` grows by one each such round; when the client returns, or when ``gap_i`` reaches
    the cutoff ``K`` without a return, the interval ``gap_i`` is recorded and ``gap_i`` restarts at 0.
    The weight factor ``omega_i`` is the mean of the recorded intervals, 1 before the first one; the
    round's factor is read before the round is recorded. Under Bernoulli returns with probability
    ``r``, the intervals are independent ``min(Geometric(r), K)``, so ``omega_i`` converges to
    ``(1 - (1 - r)^K) / r`` (``1 / r`` as ``K`` grows); the mean recurrence time of any stationary
    ergodic pattern (Markov, cyclic) is ``1 / r`` too. Memory: three counts per client.
    """

    num_clients: int
    cutoff: int = 100_000
    gap: npt.NDArray[np.int64] = field(init=False)
    total: npt.NDArray[np.int64] = field(init=False)
    count: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        owner = "IntervalEstimator"
        check_param("num_clients", owner, self.num_clients, Interval(int, 1, None, closed="left"))
        check_param("cutoff", owner, self.cutoff, Interval(int, 1, 10**9, closed="both"))
        self.gap = np.zeros(self.num_clients, dtype=np.int64)
        self.total = np.zeros(self.num_clients, dtype=np.int64)
        self.count = np.zeros(self.num_clients, dtype=np.int64)

    def factors(self, clients: npt.ArrayLike) -> FloatArray:
        """``omega_i`` of each of ``clients``: the mean recorded interval, 1 before the first."""
        ids = np.asarray(clients, dtype=np.int64)
        count = self.count[ids]
        return np.divide(self.total[ids], count, out=np.ones(ids.shape), where=count > 0)

    def observe(self, clients: npt.ArrayLike, returned: npt.ArrayLike) -> None:
        """Record a round in which the distinct ``clients`` were asked and ``returned`` says who returned."""
        ids = np.asarray(clients, dtype=np.int64)
        back = np.asarray(returned, dtype=bool)
        gap = self.gap[ids] + 1
        closed = back | (gap >= self.cutoff)
        self.total[ids[closed]] += gap[closed]
        self.count[ids[closed]] += 1
        self.gap[ids] = np.where(closed, 0, gap)

    def counts(self) -> dict[str, npt.NDArray[np.int64]]:
        """The state, as named arrays (what a checkpoint stores)."""
        return {"interval_gap": self.gap, "interval_total": self.total, "interval_count": self.count}

    def load_counts(self, counts: Mapping[str, npt.ArrayLike]) -> None:
        """Continue from :meth:`counts` (of a checkpoint), checked first."""
        gap = restored_counts(counts, "interval_gap", self.gap, "IntervalEstimator")
        total = restored_counts(counts, "interval_total", self.total, "IntervalEstimator")
        count = restored_counts(counts, "interval_count", self.count, "IntervalEstimator")
        if np.any(gap >= self.cutoff) or np.any(total < count):
            rule = f"gaps below the cutoff {self.cutoff} and totals of at least one round per interval"
            raise invalid("interval_gap", "IntervalEstimator", rule, "counts that break them")
        self.gap[...], self.total[...], self.count[...] = gap, total, count


def restored_counts(
    counts: Mapping[str, npt.ArrayLike], name: str, like: npt.NDArray[np.int64], owner: str
) -> npt.NDArray[np.int64]:
    """``counts[name]`` as an estimator's counts like ``like``: one non-negative integer per client (a
    checkpoint's arrays are data from outside: a wrong shape is not broadcast, a negative count refused)."""
    values = np.asarray(counts[name]) if name in counts else None
    ok = (
        values is not None
        and values.shape == like.shape
        and np.issubdtype(values.dtype, np.integer)
        and not np.any(values < 0)
    )
    if not ok:
        shown = "absent" if values is None else f"shape {values.shape}, dtype {values.dtype}"
        raise invalid(name, owner, f"{like.size} non-negative integer counts", shown)
    return np.asarray(values, dtype=np.int64)
