"""Exact moments of row designs (MD, clustered sampling, OSMD with replacement; 000, Section 3.2).

Rows ``r_u`` drawn ``c_u`` times, ``a_i`` per draw: ``E[w_i] = a_i sum_u c_u r_ui``,
``Var[w_i] = a_i^2 sum_u c_u r_ui (1 - r_ui)``, ``Cov[w_i, w_j] = -a_i a_j sum_u c_u r_ui r_uj``,
``P(i not in S) = prod_u (1 - r_ui)^c_u``; the variance of the number of distinct clients and the
probability of no repeat are computed exactly within work limits (``None`` beyond them).
"""

from __future__ import annotations

import math

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.designs import RowDesign
from fedsample.designs.moments import Moments, alpha_if_proportional, design_moments

__all__ = ["MAX_COVARIANCE_CLIENTS"]

# Work limits for the pairwise and dynamic-programming statistics; beyond them the statistic is
# reported as None and the Monte-Carlo estimator covers it.
_MAX_PAIR_WORK = 4e7
_MAX_DP_WORK = 2e8
_MAX_DP_STATES = 100_000
# Above this many clients no n x n matrix (covariances, pairwise terms) is built.
MAX_COVARIANCE_CLIENTS = 5000


@design_moments.register
def _(design: RowDesign, importances: FloatArray) -> Moments:
    n = design.num_clients
    a = design.draw_weights
    r = design.probabilities
    idx = design.indices
    if design.row_counts.size and (design.row_counts == design.row_counts[0]).all():  # MD, Algorithm 1
        counts: FloatArray | float = float(design.row_counts[0])
    else:
        counts = np.repeat(design.row_counts, np.diff(design.indptr)).astype(np.float64)
    # One row listing every client in order (MD): entries are clients, no scatter needed.
    identity = design.num_rows == 1 and idx.size == n and bool((idx == np.arange(n)).all())

    def per_client(values: FloatArray) -> FloatArray:
        return values if identity else np.bincount(idx, weights=values, minlength=n).astype(np.float64, copy=False)

    mean = a * per_client(counts * r)
    var = a * a * per_client(counts * r * (1 - r))
    with np.errstate(divide="ignore"):
        log_excluded = per_client(counts * np.log1p(-np.minimum(r, 1.0)))
    p_excluded = np.exp(log_excluded)
    # sum_{i != j} Cov = -sum_u c_u [(sum_i a_i r_ui)^2 - sum_i (a_i r_ui)^2]
    ar = (a if identity else a[idx]) * r
    nonempty = np.diff(design.indptr) > 0
    row_sum = np.zeros(design.num_rows)
    row_sq = np.zeros(design.num_rows)
    if ar.size:
        starts = design.indptr[:-1][nonempty]
        row_sum[nonempty] = np.add.reduceat(ar, starts)
        row_sq[nonempty] = np.add.reduceat(ar * ar, starts)
    offdiag = -float(np.sum(design.row_counts * (row_sum**2 - row_sq)))
    alpha = None
    if design.num_rows == 1:
        alpha = alpha_if_proportional(mean, importances, 1.0 / float(design.row_counts[0]))
    return Moments(
        mean=mean,
        var=var,
        p_included=1.0 - p_excluded,
        alpha=alpha,
        offdiag_cov_sum=offdiag,
        expected_distinct=float(np.sum(1.0 - p_excluded)),
        var_distinct=_row_var_distinct(design, p_excluded),
        p_all_distinct=_row_p_all_distinct(design),
    )


def _row_var_distinct(design: RowDesign, p_excluded: FloatArray) -> float | None:
    """``Var[N]`` for ``N`` the number of distinct clients of a row design.

    With ``Z_i = 1{i not in S}`` and odds ``rho = r / (1 - r)``,
    ``Cov[Z_i, Z_j] = P(Z_i) P(Z_j) expm1(sum_u c_u log1p(-rho_ui rho_uj))`` over the rows that hold
    both clients. Clients present in a single row are grouped by their probability in it, so
    federations with few distinct sizes cost little whatever their size.
    """
    r, idx = design.probabilities, design.indices
    active = (r > 0) & (r < 1) & (p_excluded[idx] > 0)
    rows_per_client = np.bincount(idx[active], minlength=design.num_clients)
    multi_clients = np.flatnonzero(rows_per_client >= 2)
    slot = np.full(design.num_clients, -1, dtype=np.int64)
    slot[multi_clients] = np.arange(multi_clients.size)
    t = multi_clients.size
    total = float(np.sum(p_excluded * (1 - p_excluded)))

    plans = []
    work = float(t) * t
    for u in range(design.num_rows):
        lo, hi = design.indptr[u], design.indptr[u + 1]
        sel = active[lo:hi]
        ru, iu = r[lo:hi][sel], idx[lo:hi][sel]
        is_multi = slot[iu] >= 0 if t else np.zeros(iu.size, dtype=bool)
        c = float(design.row_counts[u])
        singles = ru[~is_multi]
        if c <= 2 and _polynomial_pairs(singles, c):
            # The expansion costs O(c) per client: for one or two draws a row, grouping equal
            # values (a sort) would cost more than it saves.
            values, group_counts = singles, np.ones(singles.size, dtype=np.int64)
            single_pairs = c * values.size
        else:
            values, group_counts = np.unique(singles, return_counts=True)
            single_pairs = c * values.size if _polynomial_pairs(values, c) else values.size * values.size
        plans.append((u, values, group_counts, iu[is_multi], ru[is_multi]))
        work += single_pairs + values.size * is_multi.sum()
    if work > _MAX_PAIR_WORK or t > MAX_COVARIANCE_CLIENTS:
        return None

    log_pair = np.zeros((t, t))
    for u, values, group_counts, multi_ids, multi_r in plans:
        c = float(design.row_counts[u])
        rho = values / (1 - values)
        pz = (1 - values) ** c  # P(Z_i) of a client present only in this row
        weighted = group_counts * pz
        # single x single, ordered pairs i != j
        if _polynomial_pairs(values, c):
            # (1 - x)^c - 1 = sum_k binom(c, k) (-x)^k with x = rho_a rho_b separable in a and b, so the
            # double sum is sum_k binom(c, k) (-1)^k (weighted . rho^k)^2: O(c V) instead of O(V^2).
            # The pairs i = j are removed with the same expansion (rho^2 may exceed 1 there, so the
            # clamp of the pairwise branch must not be applied to one side only).
            # scaled = sqrt(binom(c, k)) rho^k, updated in floats: binom(c, k) alone overflows a
            # float for c = 10^6 by k ~ 150. Since c rho^2 <= 1/2, scaled^2 <= 2^-k / k! and the
            # loop stops once every term has underflowed to zero (after a few hundred k at most).
            scaled = np.ones_like(rho)
            diagonal_weight = group_counts * pz * pz
            for k in range(1, int(c) + 1):
                scaled *= rho
                scaled *= math.sqrt((c - k + 1) / k)
                if not scaled.any():
                    break
                moment = float(weighted @ scaled)
                diagonal = float(diagonal_weight @ (scaled * scaled))
                total += (-1) ** k * (moment * moment - diagonal)
        else:
            for start in range(0, rho.size, 2048):
                blk = slice(start, start + 2048)
                prod = np.minimum(np.outer(rho[blk], rho), 1.0)
                with np.errstate(divide="ignore"):
                    e = np.expm1(c * np.log1p(-prod))
                total += float(weighted[blk] @ e @ weighted)
            with np.errstate(divide="ignore"):
                total -= float(np.sum(group_counts * pz * pz * np.expm1(c * np.log1p(-np.minimum(rho * rho, 1.0)))))
        if multi_ids.size:
            mrho = multi_r / (1 - multi_r)
            with np.errstate(divide="ignore"):
                e = np.expm1(c * np.log1p(-np.minimum(np.outer(rho, mrho), 1.0)))
            total += 2.0 * float(weighted @ e @ p_excluded[multi_ids])
            s = slot[multi_ids]
            with np.errstate(divide="ignore"):
                log_pair[np.ix_(s, s)] += c * np.log1p(-np.minimum(np.outer(mrho, mrho), 1.0))
    if t:
        pz_multi = p_excluded[multi_clients]
        e = np.expm1(log_pair)
        np.fill_diagonal(e, 0.0)
        total += float(pz_multi @ e @ pz_multi)
    return max(total, 0.0)


def _polynomial_pairs(values: FloatArray, draws: float) -> bool:
    """Whether a row's single-row pairs may be summed through the binomial expansion of ``(1 - x)^c``.

    With ``c x_max <= 1/2`` the terms ``binom(c, k) x^k`` shrink at least geometrically, so the
    alternating sum loses nothing to cancellation; ``c = 1`` is the exact identity ``(1 - x) - 1 = -x``.
    """
    if values.size == 0 or draws == 1:
        return True
    largest = float(values.max())
    if not draws.is_integer() or largest >= 1:
        return False
    rho_max = largest / (1 - largest)
    return draws * rho_max * rho_max <= 0.5


def _row_p_all_distinct(design: RowDesign) -> float | None:
    """Probability that the ``m`` draws of a row design are ``m`` different clients."""
    if design.num_rows == 1:
        return _single_row_all_distinct(design.probabilities, int(design.row_counts[0]))
    return _frontier_all_distinct(design)


# Above this many draws the O(c^2) Newton recursion is not worth it; the recurrence is used.
_NEWTON_MAX_DRAWS = 64


def _single_row_all_distinct(r: FloatArray, draws: int) -> float | None:
    """``c! e_c(r)``: the chance that ``c`` i.i.d. draws from ``r`` are all different.

    ``F_k[j] = k! e_k(r_1..r_j)`` obeys ``F_k[j] = F_k[j-1] + k r_j F_{k-1}[j-1]``, a cumulative sum
    per ``k``; every ``F_k`` is a probability, so nothing underflows until the answer itself does.
    """
    r = r[r > 0]
    if draws > r.size:
        return 0.0
    if draws <= _NEWTON_MAX_DRAWS:
        newton = _all_distinct_from_power_sums(r, draws)
        if newton is not None:
            return newton
    if draws * r.size > _MAX_DP_WORK:
        return None
    f = np.ones(r.size + 1)  # F_0 over prefixes 0..L
    for k in range(1, draws + 1):
        g = np.zeros(r.size + 1)
        g[1:] = k * np.cumsum(r * f[:-1])
        f = g
    return float(min(f[-1], 1.0))


def _all_distinct_from_power_sums(r: FloatArray, draws: int) -> float | None:
    """``c! e_c(r)`` from the power sums ``p_j = sum r^j`` (Newton's identities), or None if unsafe.

    With ``E_k = k! e_k``, ``E_k = sum_{j=1..k} (-1)^(j-1) (k-1)!/(k-j)! E_{k-j} p_j``: ``c`` passes over
    ``r`` instead of the ``c`` cumulative sums of the recurrence. The signs alternate, so the same
    recursion is run on absolute values; its ratio to the result bounds the loss to cancellation,
    and above ``1e3`` (more than about 3 of 16 digits lost) the caller uses the recurrence instead.
    """
    power = r.copy()
    sums = [1.0, float(r.sum())]
    for _ in range(2, draws + 1):
        power *= r
        sums.append(float(power.sum()))
    value = [1.0]
    bound = [1.0]
    for k in range(1, draws + 1):
        signed, absolute, falling = 0.0, 0.0, 1.0
        for j in range(1, k + 1):
            term = falling * sums[j]
            signed += term * value[k - j] if j % 2 else -term * value[k - j]
            absolute += term * bound[k - j]
            falling *= k - j
        value.append(signed)
        bound.append(absolute)
    if not value[-1] > 0 or bound[-1] > 1e3 * value[-1]:
        return None
    return float(min(value[-1], 1.0))


def _frontier_all_distinct(design: RowDesign) -> float | None:
    """Dynamic programme over rows whose state is the set of drawn clients that later rows can draw again.

    Exact for any rows; cheap when few clients straddle rows (Algorithm 1 has at most one).
    """
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    for u in range(design.num_rows):
        lo, hi = design.indptr[u], design.indptr[u + 1]
        entry = (design.indices[lo:hi], design.probabilities[lo:hi])
        keep = entry[1] > 0
        rows.extend([(entry[0][keep], entry[1][keep])] * int(design.row_counts[u]))
    last_row = np.full(design.num_clients, -1, dtype=np.int64)
    for k, (ids, _) in enumerate(rows):
        last_row[ids] = k
    states: dict[frozenset[int], float] = {frozenset(): 1.0}
    work = 0.0
    in_row = np.zeros(design.num_clients)
    for k, (ids, probs) in enumerate(rows):
        ends_here = last_row[ids] == k
        lump_total = float(probs[ends_here].sum())
        carry_ids = ids[~ends_here]
        carry_probs = probs[~ends_here]
        # This row's probabilities. Entries of earlier rows stay behind, but they are never read: a
        # client with last_row == k is in this row, so its entry was just written.
        in_row[ids] = probs
        new_states: dict[frozenset[int], float] = {}
        for drawn, prob in states.items():
            alive = frozenset(i for i in drawn if last_row[i] > k)
            # a client already drawn and present in this row with its last appearance here
            lump = lump_total - sum(float(in_row[i]) for i in drawn if last_row[i] == k)
            if lump > 0:
                new_states[alive] = new_states.get(alive, 0.0) + prob * lump
            for i, pi in zip(carry_ids.tolist(), carry_probs.tolist(), strict=True):
                if i in drawn:
                    continue
                key = alive | {i}
                new_states[key] = new_states.get(key, 0.0) + prob * pi
            work += carry_ids.size + len(drawn)
        states = new_states
        if len(states) > _MAX_DP_STATES or work > _MAX_DP_WORK:
            return None
    return float(min(sum(states.values()), 1.0))
