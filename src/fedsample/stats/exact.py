"""Exact moments of the aggregation weights, computed from a sampling design.

For a design and the importances ``p`` it targets, :func:`exact_statistics` returns the per-client
mean and variance of ``w_i(S)``, the inclusion probabilities ``P(i in S)``, the covariance
structure (paper 003's ``alpha`` when ``Cov[w_i, w_j] = -alpha p_i p_j``, always the sum of the
off-diagonal covariances), ``Var[sum_i w_i]``, the mean and variance of the number of distinct
clients, the probability that no client is drawn twice, and the ``Sigma`` and ``gamma`` of
003's eq. 11. :func:`weight_covariance` gives the full matrix for small populations.

The formulas (003, App. A, and 000, Section 3.2) in terms of the designs of :mod:`fedsample.designs`:

* rows ``r_u`` drawn ``c_u`` times, ``a_i`` per draw: ``E[w_i] = a_i sum_u c_u r_ui``,
  ``Var[w_i] = a_i^2 sum_u c_u r_ui (1 - r_ui)``, ``Cov[w_i, w_j] = -a_i a_j sum_u c_u r_ui r_uj``,
  ``P(i not in S) = prod_u (1 - r_ui)^c_u``;
* fixed size ``m`` of ``n``, weight ``c_i``: ``P(i in S) = m/n``, ``P(i, j in S) = m(m-1)/(n(n-1))``;
* independent inclusions ``q_i``, weight ``c_i``: ``Var[w_i] = c_i^2 q_i (1 - q_i)``, no covariance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import singledispatch

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.designs import BernoulliDesign, DataLevelDesign, FixedSizeDesign, FullDesign, RowDesign

__all__ = ["ExactStatistics", "design_moments", "exact_statistics", "weight_covariance"]

# Work limits for the pairwise and dynamic-programming statistics; beyond them the statistic is
# reported as None and the Monte-Carlo estimator covers it.
_MAX_PAIR_WORK = 4e7
_MAX_DP_WORK = 2e8
_MAX_DP_STATES = 100_000
_MAX_COVARIANCE_CLIENTS = 5000


@dataclass(frozen=True, eq=False)
class ExactStatistics:
    """Exact statistics of a design's aggregation weights against importances ``p``.

    ``alpha`` is ``None`` when the covariance is not of the form ``-alpha p_i p_j`` (clustered
    sampling); ``alpha_effective`` is always eq. 24 of 003,
    ``(sum_i Var[w_i] - Var[sum_i w_i]) / (1 - sum_i p_i^2)``, and equals ``alpha`` when that exists.
    ``gamma = sum_i Var[w_i] + alpha_effective * sum_i p_i^2`` (003, eq. 11) and ``sigma`` is
    ``sum_i Var[w_i]``. ``var_distinct`` and ``p_all_distinct`` are ``None`` when their exact
    computation would be too large.
    """

    importances: FloatArray
    mean_weights: FloatArray
    var_weights: FloatArray
    p_included: FloatArray
    alpha: float | None
    alpha_effective: float
    offdiag_cov_sum: float
    var_sum_weights: float
    expected_distinct: float
    var_distinct: float | None
    p_all_distinct: float | None

    @property
    def sigma(self) -> float:
        """``Sigma = sum_i Var[w_i]`` (003, eq. 11)."""
        return float(self.var_weights.sum())

    @property
    def gamma(self) -> float:
        """``gamma = Sigma + alpha sum_i p_i^2`` (003, eq. 11), with ``alpha_effective``."""
        return self.sigma + self.alpha_effective * float(np.sum(self.importances**2))

    @property
    def max_bias(self) -> float:
        """``max_i |E[w_i] - p_i|``."""
        return float(np.max(np.abs(self.mean_weights - self.importances)))

    @property
    def biased(self) -> bool:
        """Whether some ``E[w_i]`` differs from ``p_i`` beyond floating-point error."""
        return bool(self.max_bias > 1e-9 * max(1.0, float(self.importances.max())))


@dataclass(frozen=True)
class _Moments:
    mean: FloatArray
    var: FloatArray
    p_included: FloatArray
    alpha: float | None
    offdiag_cov_sum: float
    expected_distinct: float
    var_distinct: float | None
    p_all_distinct: float | None


def exact_statistics(design: object, importances: FloatArray) -> ExactStatistics:
    """Exact statistics of ``design``'s weights against importances ``p`` (a sampler state's ``importances``)."""
    p = np.asarray(importances, dtype=np.float64)
    mo = design_moments(design, p)
    sigma = float(mo.var.sum())
    var_sum = max(sigma + mo.offdiag_cov_sum, 0.0)
    one_minus = 1.0 - float(np.sum(p**2))
    alpha_eff = -mo.offdiag_cov_sum / one_minus if one_minus > 1e-15 else (mo.alpha or 0.0)
    if mo.alpha is not None:
        alpha_eff = mo.alpha
    return ExactStatistics(
        importances=p,
        mean_weights=mo.mean,
        var_weights=mo.var,
        p_included=mo.p_included,
        alpha=mo.alpha,
        alpha_effective=float(alpha_eff),
        offdiag_cov_sum=float(mo.offdiag_cov_sum),
        var_sum_weights=var_sum if var_sum > 1e-14 * max(1.0, sigma) else 0.0,
        expected_distinct=mo.expected_distinct,
        var_distinct=mo.var_distinct,
        p_all_distinct=mo.p_all_distinct,
    )


@singledispatch
def design_moments(design: object, importances: FloatArray) -> _Moments:
    """Per-design moments; register an implementation for each new design type."""
    raise TypeError(f"no exact statistics for designs of type {type(design).__name__}")


def _alpha_if_proportional(mean: FloatArray, p: FloatArray, factor: float) -> float | None:
    """``factor * s^2`` when ``mean = s p`` for one scalar ``s`` (then ``Cov = -alpha p_i p_j``)."""
    s = float(mean.sum() / p.sum())
    if np.allclose(mean, s * p, rtol=1e-9, atol=1e-15):
        return max(factor * s * s, 0.0)
    return None


@design_moments.register
def _(design: FullDesign, importances: FloatArray) -> _Moments:
    n = design.num_clients
    return _Moments(
        mean=np.array(design.weights, dtype=np.float64),
        var=np.zeros(n),
        p_included=np.ones(n),
        alpha=0.0,
        offdiag_cov_sum=0.0,
        expected_distinct=float(n),
        var_distinct=0.0,
        p_all_distinct=1.0,
    )


@design_moments.register
def _(design: FixedSizeDesign, importances: FloatArray) -> _Moments:
    n, m = design.num_clients, design.num_sampled
    c = design.weights
    pi1 = m / n
    pi2 = m * (m - 1) / (n * (n - 1)) if n > 1 else 0.0
    kappa = pi2 - pi1 * pi1  # Cov[1{i in S}, 1{j in S}] for i != j
    mean = c * pi1
    alpha = _alpha_if_proportional(mean, importances, -kappa / (pi1 * pi1)) if n > 1 else 0.0
    return _Moments(
        mean=mean,
        var=c * c * pi1 * (1 - pi1),
        p_included=np.full(n, pi1),
        alpha=alpha,
        offdiag_cov_sum=float(kappa * (c.sum() ** 2 - np.sum(c * c))),
        expected_distinct=float(m),
        var_distinct=0.0,
        p_all_distinct=1.0,
    )


@design_moments.register
def _(design: BernoulliDesign, importances: FloatArray) -> _Moments:
    q, c = design.inclusion, design.weights
    mean = c * q
    return _Moments(
        mean=mean,
        var=c * c * q * (1 - q),
        p_included=np.array(q, dtype=np.float64),
        alpha=0.0,
        offdiag_cov_sum=0.0,
        expected_distinct=float(q.sum()),
        var_distinct=float(np.sum(q * (1 - q))),
        p_all_distinct=1.0,
    )


@design_moments.register
def _(design: DataLevelDesign, importances: FloatArray) -> _Moments:
    # Only FedSampling's fixed divisor has a closed form: w_i = k_i / K with independent
    # k_i ~ Binomial(n_i, r). The naive variants divide by random totals (Monte Carlo covers them).
    if design.aggregation != "fixed":
        raise TypeError(f"no exact statistics for data-level sampling with {design.aggregation!r} aggregation")
    n, r, k = design.sizes.astype(np.float64), design.rate, design.divisor
    p_in = -np.expm1(n * np.log1p(-r)) if r < 1 else np.ones_like(n)
    return _Moments(
        mean=n * r / k,
        var=n * r * (1 - r) / (k * k),
        p_included=p_in,
        alpha=0.0,
        offdiag_cov_sum=0.0,
        expected_distinct=float(p_in.sum()),
        var_distinct=float(np.sum(p_in * (1 - p_in))),
        p_all_distinct=1.0,
    )


@design_moments.register
def _(design: RowDesign, importances: FloatArray) -> _Moments:
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
        alpha = _alpha_if_proportional(mean, importances, 1.0 / float(design.row_counts[0]))
    return _Moments(
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
    if work > _MAX_PAIR_WORK or t > _MAX_COVARIANCE_CLIENTS:
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


def weight_covariance(design: object, importances: FloatArray) -> FloatArray:
    """The full ``n x n`` covariance matrix of the weights (for ``n`` up to 5000)."""
    mo = design_moments(design, np.asarray(importances, dtype=np.float64))
    n = mo.mean.size
    if n > _MAX_COVARIANCE_CLIENTS:
        raise ValueError(f"the covariance matrix of {n} clients is too large; use offdiag_cov_sum")
    if isinstance(design, RowDesign):
        dense = design.dense_rows() * design.draw_weights[None, :]
        cov = -(dense.T * design.row_counts.astype(np.float64)) @ dense
    elif isinstance(design, FixedSizeDesign):
        m = design.num_sampled
        pi1 = m / n
        pi2 = m * (m - 1) / (n * (n - 1)) if n > 1 else 0.0
        cov = (pi2 - pi1 * pi1) * np.outer(design.weights, design.weights)
    elif isinstance(design, (FullDesign, BernoulliDesign, DataLevelDesign)):
        cov = np.zeros((n, n))  # independent (or deterministic) weights
    else:
        raise TypeError(f"no covariance matrix for designs of type {type(design).__name__}")
    np.fill_diagonal(cov, mo.var)
    return cov
