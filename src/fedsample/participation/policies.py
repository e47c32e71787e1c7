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

The policies for participation rates nobody knows (:data:`UNKNOWN_PARTICIPATION_POLICIES`, docs/failures.md)
carry state across rounds, so they are settled by
:func:`~fedsample.participation.procedure.settle_participants` with that state, not by
:func:`correct_weights`:

``"fedau"`` (Wang & Ji, ICLR 2024)
    ``w'_i = w_i * omega_i`` where ``omega_i`` is the mean of client ``i``'s recorded participation
    intervals (:class:`IntervalEstimator`), an online estimate of ``1 / r_i``.
``"mifa"`` (Gu et al., NeurIPS 2021) and ``"fedvarp"`` (Jhunjhunwala et al., UAI 2022)
    the server remembers every client's latest update ``y_i`` (zero before its first) and moves along
    ``sum_j p_j y_j + sum_{i in K} c_i (Delta_i - y_i)``, then stores ``y_i = Delta_i`` for ``i`` in ``K``:
    ``c_i = p_i`` for MIFA (the average of the memory), ``c_i`` the renormalised weights for FedVARP
    (its SAGA-style correction). The weights these policies report are the ``c_i``. MIFA as its
    authors released it (``mifa_variant="released"``, :mod:`fedsample.participation.mifa`) waits until
    every client has taken part, fills the memory then, and averages with ``c_i = 1/N``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray
from fedsample._validation import Interval, Options, check_param, invalid

__all__ = [
    "AGGREGATION_POLICIES",
    "MEMORY_POLICIES",
    "POLICIES",
    "UNKNOWN_PARTICIPATION_POLICIES",
    "AggregationPolicy",
    "IntervalEstimator",
    "ReturnRateEstimator",
    "correct_weights",
    "unknown_rate_weights",
]

AggregationPolicy = Literal["renormalise", "inverse-probability", "ignore", "fedau", "mifa", "fedvarp"]
# The weight corrections of one round (correct_weights; the Flower strategy's policies).
AGGREGATION_POLICIES: tuple[str, ...] = ("renormalise", "inverse-probability", "ignore")
# The policies with state across rounds, for participation rates nobody knows.
UNKNOWN_PARTICIPATION_POLICIES: tuple[str, ...] = ("fedau", "mifa", "fedvarp")
# Those whose state is every client's latest update (the engine keeps it, docs/failures.md).
MEMORY_POLICIES: tuple[str, ...] = ("mifa", "fedvarp")
POLICIES: tuple[str, ...] = AGGREGATION_POLICIES + UNKNOWN_PARTICIPATION_POLICIES


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


def remembered_weights(
    policy: str, importances: npt.ArrayLike, seen: npt.NDArray[np.bool_], clients: npt.ArrayLike, weights: npt.ArrayLike
) -> FloatArray:
    """The weight each client's update gets in a round of a memory policy when every client's update is fixed.

    With fixed updates ``u_i``, ``Delta_i - y_i`` is ``u_i`` for a client kept for the first time and 0
    after, so the aggregate is ``sum_i e_i u_i`` with ``e_i = p_i`` for the clients seen before the round,
    plus ``c_i`` (``weights``, the round's correction weights of the kept ``clients``) for those kept for
    the first time; under ``"mifa"`` ``c_i = p_i``, so ``e_i = p_i`` for every client seen by the end of the
    round. ``"fedvarp"`` moves nowhere in a round in which nobody is kept (the authors' code). ``seen``
    (one flag per client) is updated in place. Dense: one value per client.
    """
    check_param("policy", "remembered_weights", policy, Options(MEMORY_POLICIES))
    p = np.asarray(importances, dtype=np.float64)
    ids = np.asarray(clients, dtype=np.int64)
    c = np.asarray(weights, dtype=np.float64)
    if policy == "fedvarp" and ids.size == 0:
        return np.zeros(p.size)
    out = np.where(seen, p, 0.0)
    fresh = ~seen[ids]
    out[ids[fresh]] += c[fresh]
    seen[ids] = True
    return out


def unknown_rate_weights(
    policy: str,
    kept: npt.NDArray[np.bool_],
    clients: npt.NDArray[np.int64],
    weights: FloatArray,
    factors: FloatArray | None,
    keep_probability: float,
    importances: FloatArray | None,
    *,
    mifa_variant: str = "zeros",
) -> FloatArray:
    """The weights of a policy for unknown rates for the distinct selected ``clients`` (zero off ``kept``).

    ``"fedau"``: ``w_i omega_i / min(1, m / R)`` (``factors`` are the ``omega_i``); ``"mifa"``: ``p_i``
    (``importances``, every client's), or ``1/N`` under ``mifa_variant="released"``; ``"fedvarp"``: the
    renormalised ``w_i``.
    """
    if policy == "fedau":
        assert factors is not None
        out: FloatArray = np.where(kept, weights * factors / keep_probability, 0.0)
        return out
    if policy == "mifa":
        if importances is None:
            raise invalid("importances", "settle_participants", "every client's p_i under 'mifa'", None)
        p = np.asarray(importances, dtype=np.float64)
        average = np.full(clients.size, 1.0 / p.size) if mifa_variant == "released" else p[clients]
        out = np.where(kept, average, 0.0)
        return out
    return correct_weights(weights, kept, "renormalise")
