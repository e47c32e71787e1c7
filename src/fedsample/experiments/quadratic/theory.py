"""Paper 003's quadratic clients (Sec. 4.1, App. D, App. E.1): expected distance, closed form and simulation.

``n`` clients with losses ``L_i(theta) = 1/2 ||theta - theta_i*||^2``, importances ``p_1 = r`` and
``p_i = (1 - r)/(n - 1)`` (eq. 15), ``theta* = sum_i p_i theta_i*`` (eq. 150). Each client runs
``K`` full-gradient steps of size ``eta_l`` from the global model, so that its update is
``phi (theta_i* - theta)`` with ``phi = 1 - (1 - eta_l)^K`` (eq. 153), and the server applies
eq. 3, ``theta^1 = theta^0 + eta_g sum_i w_i(S) (theta_i - theta^0)``. With ``c = eta_g phi``,
``e = theta^0 - theta*`` and ``u_i = theta_i* - theta^0``, ``theta^1 - theta* = e + c sum_i w_i u_i``:

    E_S ||theta^1 - theta*||^2 = ||e||^2 + 2c sum_i E[w_i] <e, u_i> + c^2 sum_ij E[w_i w_j] <u_i, u_j>,

exact for every design whose first and second weight moments are known, biased ones included
(:func:`expected_distance`). :func:`paper_expected_distance` is the paper's eq. 155 and
:func:`simulate_distances` the Monte-Carlo check. The experiment that compares them and reproduces
Fig. 1 (one round) and Fig. 4 (Uniform sampling diverging), :func:`run_quadratic_experiment` with
its :class:`QuadraticResult`, plot and report, lives in :mod:`fedsample.experiments.quadratic.run`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, readonly
from fedsample._validation import Interval, check_param, invalid
from fedsample.data.synthetic import QuadraticClients
from fedsample.designs.exact import ExactStatistics, exact_statistics, weight_covariance
from fedsample.rng import check_generator
from fedsample.samplers import Sampler

__all__ = [
    "WeightMoments",
    "effective_step",
    "expected_distance",
    "expected_distances",
    "growth_factor",
    "paper_expected_distance",
    "simulate_distances",
]


@dataclass(frozen=True, eq=False)
class WeightMoments:
    """First and second moments of the aggregation weights: ``mean[i] = E[w_i]``, ``second[i, j] = E[w_i w_j]``."""

    mean: FloatArray
    second: FloatArray

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float64)
        second = np.asarray(self.second, dtype=np.float64)
        if mean.ndim != 1 or mean.size == 0 or not np.all(np.isfinite(mean)):
            raise invalid("mean", "WeightMoments", "a finite non-empty 1-D array", self.mean)
        n = mean.size
        if second.shape != (n, n) or not np.all(np.isfinite(second)) or not np.allclose(second, second.T):
            raise invalid("second", "WeightMoments", f"a finite symmetric ({n}, {n}) array", self.second)
        object.__setattr__(self, "mean", readonly(mean))
        object.__setattr__(self, "second", readonly(second))

    @classmethod
    def from_design(cls, design: object, importances: npt.ArrayLike) -> WeightMoments:
        """The exact moments of a sampling design (``sampler.design(state)``), from :mod:`fedsample.stats`."""
        p = np.asarray(importances, dtype=np.float64)
        mean = exact_statistics(design, p).mean_weights
        return cls(mean=mean, second=weight_covariance(design, p) + np.outer(mean, mean))

    @property
    def num_clients(self) -> int:
        return int(self.mean.size)


# --- closed forms ------------------------------------------------------------------------------


def effective_step(owner: str, local_lr: float, local_steps: int, server_lr: float) -> float:
    """Validate the learning rates and steps (errors name ``owner``); return ``c = eta_g phi``, the
    fraction of the way to the clients' optima that one round's update moves the model."""
    check_param("local_lr", owner, local_lr, Interval(float, 0, None, closed="neither"))
    check_param("local_steps", owner, local_steps, Interval(int, 1, None, closed="left"))
    check_param("server_lr", owner, server_lr, Interval(float, 0, None, closed="neither"))
    return float(server_lr) * (1.0 - (1.0 - float(local_lr)) ** int(local_steps))


def _float_array(name: str, owner: str, value: object, constraint: str) -> FloatArray:
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise invalid(name, owner, constraint, value) from exc


def _check_problem(
    owner: str, clients: object, importances: object, initial: object
) -> tuple[QuadraticClients, FloatArray, FloatArray | None]:
    """Validate the clients, the importances (summing to one) and the initial model; return them as arrays."""
    if not isinstance(clients, QuadraticClients):
        raise invalid("clients", owner, "a QuadraticClients", clients)
    n, d = clients.num_clients, clients.dim
    constraint = f"{n} non-negative weights summing to 1"
    p = _float_array("importances", owner, importances, constraint)
    if p.shape != (n,) or not np.all(np.isfinite(p)) or np.any(p < 0) or not math.isclose(p.sum(), 1.0, abs_tol=1e-9):
        raise invalid("importances", owner, constraint, importances)
    if initial is None:
        return clients, p, None
    constraint = f"None (theta^0 ~ N(0, I_d)) or a finite vector of length {d}"
    start = _float_array("initial", owner, initial, constraint)
    if start.shape != (d,) or not np.all(np.isfinite(start)):
        raise invalid("initial", owner, constraint, initial)
    return clients, p, start


def _check_moments(owner: str, moments: object, n: int) -> WeightMoments:
    if not isinstance(moments, WeightMoments) or moments.num_clients != n:
        shown = f"WeightMoments of {moments.num_clients} clients" if isinstance(moments, WeightMoments) else moments
        raise invalid("moments", owner, f"WeightMoments of {n} clients", shown)
    return moments


def _mean_sq_distances(start: FloatArray | None, points: FloatArray, dim: int) -> FloatArray:
    """``E||theta^0 - x||^2`` for each row ``x``: ``||theta^0 - x||^2``, or ``d + ||x||^2`` over ``N(0, I_d)``."""
    if start is None:
        return np.asarray(dim + np.sum(points * points, axis=-1), dtype=np.float64)
    return np.asarray(np.sum((points - start) ** 2, axis=-1), dtype=np.float64)


def expected_distance(
    clients: QuadraticClients,
    importances: npt.ArrayLike,
    moments: WeightMoments,
    *,
    initial: npt.ArrayLike | None = None,
    local_lr: float,
    local_steps: int,
    server_lr: float,
) -> float:
    """``E||theta^1 - theta*||^2`` after one round, exact for any weight moments (module docstring).

    ``initial=None`` averages over ``theta^0 ~ N(0, I_d)`` drawn independently of the selection:
    ``E||e||^2 = d + ||theta*||^2``, ``E<e, u_i> = -<theta*, theta_i*> - d`` and
    ``E<u_i, u_j> = <theta_i*, theta_j*> + d``; a vector fixes ``theta^0``.

    >>> import numpy as np
    >>> from fedsample import Federation, make_sampler
    >>> from fedsample.data.synthetic import make_quadratic_clients
    >>> clients = make_quadratic_clients(num_clients=4, dim=3, iid=True, rng=np.random.default_rng(0))
    >>> fed = Federation.from_importances([0.7, 0.1, 0.1, 0.1])
    >>> md, full = (make_sampler(s) for s in ("md", "full"))
    >>> md_moments = WeightMoments.from_design(md.design(md.init(fed, 2)), fed.importances)
    >>> full_moments = WeightMoments.from_design(full.design(full.init(fed, 2)), fed.importances)
    >>> kw = dict(local_lr=0.1, local_steps=10, server_lr=1.0)
    >>> a = expected_distance(clients, fed.importances, md_moments, **kw)
    >>> b = expected_distance(clients, fed.importances, full_moments, **kw)
    >>> bool(abs(a - b) < 1e-12)  # iid: MD's covariance does not matter
    True
    """
    owner = "expected_distance"
    clients, p, start = _check_problem(owner, clients, importances, initial)
    moments = _check_moments(owner, moments, clients.num_clients)
    c = effective_step(owner, local_lr, local_steps, server_lr)
    optima, d = clients.optima, clients.dim
    theta_star = p @ optima
    if start is None:
        base = d + theta_star @ theta_star
        cross = -(optima @ theta_star) - d  # E<e, u_i>
        gram = optima @ optima.T + d  # E<u_i, u_j>
    else:
        e, u = start - theta_star, optima - start
        base, cross, gram = e @ e, u @ e, u @ u.T
    return float(base + 2.0 * c * (moments.mean @ cross) + c * c * np.sum(moments.second * gram))


def growth_factor(moments: WeightMoments, c: float) -> float:
    """``E[(1 - c W)^2]`` with ``W = sum_i w_i``: the per-round factor of the squared distance."""
    return float(1.0 - 2.0 * c * moments.mean.sum() + c * c * moments.second.sum())


def expected_distances(
    clients: QuadraticClients,
    importances: npt.ArrayLike,
    moments: WeightMoments,
    *,
    rounds: int,
    initial: npt.ArrayLike | None = None,
    local_lr: float,
    local_steps: int,
    server_lr: float,
) -> FloatArray:
    """``E||theta^t - theta*||^2`` for ``t = 0..rounds``, each round drawing a fresh independent selection.

    With ``delta_i = theta_i* - theta*`` and ``W = sum_i w_i``, a round maps
    ``e -> (1 - cW) e + c sum_i w_i delta_i``; the selection is independent of ``e``, so
    ``E||e'||^2 = E[(1 - cW)^2] E||e||^2 + 2c <sum_i E[(1 - cW) w_i] delta_i, E[e]>
    + c^2 sum_ij E[w_i w_j] <delta_i, delta_j>``
    and ``E[e'] = (1 - c E[W]) E[e] + c sum_i E[w_i] delta_i``: an exact recursion on ``(E||e||^2, E[e])``.
    Entry 1 equals :func:`expected_distance`. ``E[(1 - cW)^2] > 1`` makes the distance diverge.
    """
    owner = "expected_distances"
    clients, p, start = _check_problem(owner, clients, importances, initial)
    moments = _check_moments(owner, moments, clients.num_clients)
    c = effective_step(owner, local_lr, local_steps, server_lr)
    check_param("rounds", owner, rounds, Interval(int, 1, None, closed="left"))
    theta_star = p @ clients.optima
    delta = clients.optima - theta_star
    factor = growth_factor(moments, c)
    coupling = (moments.mean - c * moments.second.sum(axis=1)) @ delta  # sum_i E[(1 - cW) w_i] delta_i
    noise = float(np.sum(moments.second * (delta @ delta.T)))
    drift = c * (moments.mean @ delta)
    sq = float(_mean_sq_distances(start, theta_star, clients.dim))
    mean_error = -theta_star if start is None else start - theta_star
    out = np.empty(int(rounds) + 1)
    out[0] = sq
    for t in range(1, int(rounds) + 1):
        sq = factor * sq + 2.0 * c * float(coupling @ mean_error) + c * c * noise
        mean_error = (1.0 - c * moments.mean.sum()) * mean_error + drift
        out[t] = sq
    return out


def paper_expected_distance(
    clients: QuadraticClients,
    statistics: ExactStatistics,
    *,
    initial: npt.ArrayLike | None = None,
    local_lr: float,
    local_steps: int,
    server_lr: float,
    effective_lr: float | None = None,
) -> float:
    """Eq. 155 of 003: ``(1 - 2 eta~) E||theta^0 - theta*||^2 + eta_g^2 phi^2 sum_i gamma_i E||theta^0 - theta_i*||^2
    + eta_g^2 (1 - alpha) phi^2 E||theta^0 - theta*||^2``, with ``gamma_i = Var[w_i] + alpha p_i^2`` (Theorem 1).

    ``p``, ``Var[w_i]`` and ``alpha`` come from ``statistics`` (:func:`~fedsample.stats.exact_statistics`).
    Eq. 155 is Theorem 1 with eq. 154 substituted: the direction drift is
    ``-2 eta_g <phi (theta* - theta^0), theta* - theta^0> = -2 eta_g phi ||theta^0 - theta*||^2``, so
    ``eta~`` must be ``eta_g phi``, the default. Table 2 of 003 defines ``eta~ = eta_l eta_g``, which
    equals ``eta_g phi`` only when ``K = 1`` (then ``phi = eta_l``); pass ``effective_lr=eta_l * eta_g``
    to evaluate that reading (at ``eta_l = 0.1, K = 10`` it overstates the distance by
    ``2 eta_g (phi - eta_l) E||theta^0 - theta*||^2``).

    With ``eta~ = eta_g phi`` this equals :func:`expected_distance` exactly (to rounding) under the
    assumptions of Theorem 1 and Lemma 1: unbiased weights (``E[w_i] = p_i``), ``Cov[w_i, w_j] =
    -alpha p_i p_j`` for ``i != j`` and ``sum_i p_i = 1``; Full, MD and Uniform sampling satisfy
    them. For a biased design (FedAvg's uniform, ``E[w_i] = (m/n) p_i``) it is wrong, and for a design
    without an ``alpha`` (clustered sampling) it is undefined: an error.
    """
    owner = "paper_expected_distance"
    if not isinstance(statistics, ExactStatistics):
        raise invalid("statistics", owner, "an ExactStatistics", statistics)
    clients, p, start = _check_problem(owner, clients, statistics.importances, initial)
    c = effective_step(owner, local_lr, local_steps, server_lr)
    alpha = statistics.alpha
    if alpha is None:
        constraint = "statistics of a design with Cov[w_i, w_j] = -alpha p_i p_j"
        raise invalid("statistics", owner, constraint, "statistics with alpha = None")
    if effective_lr is None:
        eta_tilde = c
    else:
        check_param("effective_lr", owner, effective_lr, Interval(float, 0, None, closed="neither"))
        eta_tilde = float(effective_lr)
    gamma = statistics.var_weights + alpha * p**2
    to_optimum = float(_mean_sq_distances(start, p @ clients.optima, clients.dim))
    to_locals = _mean_sq_distances(start, clients.optima, clients.dim)
    return float(
        (1.0 - 2.0 * eta_tilde) * to_optimum + c * c * float(gamma @ to_locals) + c * c * (1.0 - alpha) * to_optimum
    )


# --- simulation --------------------------------------------------------------------------------


def _aggregated_updates(
    optima: FloatArray, thetas: FloatArray, weights: FloatArray, local_lr: float, local_steps: int
) -> FloatArray:
    """``sum_i w_i (theta_i - theta)`` per run, after ``K`` gradient steps ``y <- y - eta_l (y - theta_i*)``.

    Only the selected (run, client) pairs train. The local steps are run, not replaced by eq. 153's
    closed form, so that the Monte-Carlo check covers the local-training algebra as well as the
    sampling moments.
    """
    runs, selected = np.nonzero(weights)
    start = thetas[runs]
    local = start.copy()
    for _ in range(local_steps):
        local -= local_lr * (local - optima[selected])  # the gradient of L_i at y is y - theta_i*
    out = np.zeros_like(thetas)
    np.add.at(out, runs, weights[runs, selected][:, None] * (local - start))
    return out


def simulate_distances(
    clients: QuadraticClients,
    importances: npt.ArrayLike,
    sampler: Sampler[Any],
    state: object,
    *,
    simulations: int,
    rng: np.random.Generator,
    rounds: int = 1,
    initial: npt.ArrayLike | None = None,
    local_lr: float,
    local_steps: int,
    server_lr: float,
) -> FloatArray:
    """``||theta^t - theta*||^2`` of independent simulated runs, shape ``(simulations, rounds + 1)``.

    Each run draws ``theta^0 ~ N(0, I_d)`` from ``rng`` (unless ``initial`` fixes it), then per round
    a selection with ``sampler.sample(state, rng)``, trains the selected clients, and applies eq. 3
    with the selection's weights. Vectorised over the runs; only the draws loop in Python.
    """
    owner = "simulate_distances"
    clients, p, start = _check_problem(owner, clients, importances, initial)
    effective_step(owner, local_lr, local_steps, server_lr)
    check_param("simulations", owner, simulations, Interval(int, 1, None, closed="left"))
    check_param("rounds", owner, rounds, Interval(int, 1, None, closed="left"))
    if not isinstance(sampler, Sampler):
        raise invalid("sampler", owner, "a fedsample Sampler", sampler)
    check_generator(rng, owner)
    n, d, count = clients.num_clients, clients.dim, int(simulations)
    if sampler.importances(state).shape != (n,):
        raise invalid("state", owner, f"a sampler state for {n} clients", type(state).__name__)
    theta_star = p @ clients.optima
    thetas = rng.standard_normal((count, d)) if start is None else np.tile(start, (count, 1))
    out = np.empty((count, int(rounds) + 1))
    out[:, 0] = np.sum((thetas - theta_star) ** 2, axis=1)
    weights = np.empty((count, n))
    for t in range(1, int(rounds) + 1):
        for s in range(count):
            weights[s] = sampler.sample(state, rng).dense_weights(n)
        thetas = thetas + float(server_lr) * _aggregated_updates(
            clients.optima, thetas, weights, float(local_lr), int(local_steps)
        )
        out[:, t] = np.sum((thetas - theta_star) ** 2, axis=1)
    return out
