"""Synthetic federations of the papers: OSMD's heterogeneous linear regression (001) and quadratic clients (003)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray
from fedsample._memory import check_fits_in_memory
from fedsample._validation import Boolean, Interval, check_param, invalid
from fedsample.data._checks import check_int, frozen_view
from fedsample.data.federated import FederatedDataset
from fedsample.rng import check_generator

__all__ = ["QuadraticClients", "heavy_first_importances", "make_osmd_linear_regression", "make_quadratic_clients"]


def make_osmd_linear_regression(
    *,
    num_clients: int = 100,
    samples_per_client: int = 100,
    dim: int = 10,
    sigma: float = 1.0,
    condition_number: float = 25.0,
    noise_std: float = 0.1,
    rng: np.random.Generator,
) -> FederatedDataset:
    """The heterogeneous linear regression of the OSMD experiments (paper 001, simulations).

    Data model, for ``M = num_clients`` clients of ``n = samples_per_client`` rows in dimension ``d``:

    - true weights ``w* ~ N(10, 3^2 I_d)``, shared by all clients;
    - feature scales ``D = diag(kappa^(j/(d-1) - 1))``, ``j = 0..d-1``, from ``1/kappa`` to 1, so
      that the condition number of ``D`` is ``kappa = condition_number``;
    - client scales ``s_m = exp(sigma z_m)``, ``z_m ~ N(0, 1)`` (log-normal with parameter
      ``sigma``; 001 uses 1, 3 and 10), rescaled so that ``max_m s_m = 10``;
    - features ``x_{m,i} = s_m D g`` with ``g ~ N(0, I_d)``, i.e. coordinate ``j`` has standard
      deviation ``s_m D_jj``;
    - targets ``y = <x, w*> + e`` with ``e ~ N(0, noise_std^2)``.

    Larger ``sigma`` spreads the client scales over more orders of magnitude, which makes the
    clients' gradient norms (and so the best sampling distribution) more heterogeneous. We follow
    the authors' released generator, where ``s_m D_jj`` is a standard deviation; the article's
    code listing uses ``s_m D`` as a covariance instead, a detail we do not take from it.

    Returns a regression :class:`FederatedDataset` (float32 features and targets, no test rows)
    whose ``metadata`` holds ``"true_weights"`` (``w*``), ``"client_scales"`` (``s``) and
    ``"feature_scales"`` (the diagonal of ``D``), all float64.

    >>> data = make_osmd_linear_regression(num_clients=4, samples_per_client=3, rng=np.random.default_rng(0))
    >>> data.num_clients, data.train_features.shape, data.task
    (4, (12, 10), 'regression')
    """
    owner = "make_osmd_linear_regression"
    n_clients = check_int("num_clients", owner, num_clients, 1)
    per_client = check_int("samples_per_client", owner, samples_per_client, 1)
    d = check_int("dim", owner, dim, 1)
    check_param("sigma", owner, sigma, Interval(float, 0, 50, closed="both"))
    check_param("condition_number", owner, condition_number, Interval(float, 1, None, closed="left"))
    check_param("noise_std", owner, noise_std, Interval(float, 0, None, closed="left"))
    rng = check_generator(rng, owner)
    # The Gaussian draw, the scaled features and their float32 copy: three arrays of rows x d
    # (measured peak 3.0 float64 copies, tracemalloc), refused before any is drawn.
    rows = n_clients * per_client
    what = f"{rows} rows of dimension {d} ({n_clients} clients x {per_client} samples)"
    check_fits_in_memory("num_clients", owner, num_clients, rows * (24.0 * d + 24.0), what)

    true_weights = rng.normal(10.0, 3.0, size=d)
    exponents = np.arange(d) / (d - 1) - 1.0 if d > 1 else np.zeros(1)
    feature_scales = float(condition_number) ** exponents
    log_scales = float(sigma) * rng.standard_normal(n_clients)
    # Rescale in log space (max becomes log 10) so that sigma = 10 cannot overflow exp().
    client_scales = np.exp(log_scales - log_scales.max() + np.log(10.0))
    gaussian = rng.standard_normal((n_clients, per_client, d))
    features = (gaussian * client_scales[:, None, None] * feature_scales).reshape(-1, d)
    targets = features @ true_weights + float(noise_std) * rng.standard_normal(n_clients * per_client)
    return FederatedDataset(
        train_features=features.astype(np.float32),
        train_targets=targets.astype(np.float32),
        train_indptr=np.arange(n_clients + 1, dtype=np.int64) * per_client,
        test_features=np.zeros((0, d), dtype=np.float32),
        test_targets=np.zeros(0, dtype=np.float32),
        test_indptr=np.zeros(n_clients + 1, dtype=np.int64),
        num_classes=None,
        task="regression",
        name=f"osmd-linear-regression(sigma={float(sigma):g})",
        metadata={"true_weights": true_weights, "client_scales": client_scales, "feature_scales": feature_scales},
    )


@dataclass(frozen=True, eq=False)
class QuadraticClients:
    """Clients with local losses ``L_i(theta) = 1/2 ||theta - theta_i*||^2`` (paper 003, Sec. 4.1, eq. 149).

    Attributes
    ----------
    optima:
        ``(n, d)`` float64, row ``i`` is ``theta_i*``.
    """

    optima: FloatArray

    def __post_init__(self) -> None:
        optima = np.asarray(self.optima, dtype=np.float64)
        if optima.ndim != 2 or optima.shape[0] < 1 or not np.all(np.isfinite(optima)):
            raise invalid("optima", "QuadraticClients", "a finite (n, d) array with n >= 1", self.optima)
        object.__setattr__(self, "optima", frozen_view(optima))

    @property
    def num_clients(self) -> int:
        return int(self.optima.shape[0])

    @property
    def dim(self) -> int:
        return int(self.optima.shape[1])

    def _importances(self, importances: npt.ArrayLike, owner: str) -> FloatArray:
        p = np.asarray(importances, dtype=np.float64)
        if p.shape != (self.num_clients,) or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
            raise invalid("importances", owner, f"{self.num_clients} non-negative finite weights", importances)
        return np.asarray(p / p.sum(), dtype=np.float64)

    def _theta(self, theta: npt.ArrayLike, owner: str) -> FloatArray:
        t = np.asarray(theta, dtype=np.float64)
        if t.shape != (self.dim,) or not np.all(np.isfinite(t)):
            raise invalid("theta", owner, f"a finite vector of length {self.dim}", theta)
        return t

    def global_optimum(self, importances: npt.ArrayLike) -> FloatArray:
        """``theta* = sum_i p_i theta_i*``, the minimiser of ``sum_i p_i L_i`` (003, eq. 150); ``p`` is normalised."""
        p = self._importances(importances, "QuadraticClients.global_optimum")
        return np.asarray(p @ self.optima, dtype=np.float64)

    def global_loss(self, theta: npt.ArrayLike, importances: npt.ArrayLike) -> float:
        """``sum_i p_i 1/2 ||theta - theta_i*||^2``."""
        p = self._importances(importances, "QuadraticClients.global_loss")
        t = self._theta(theta, "QuadraticClients.global_loss")
        return float(0.5 * p @ np.sum((t - self.optima) ** 2, axis=1))

    def local_updates(self, theta: npt.ArrayLike, *, local_lr: float, local_steps: int) -> FloatArray:
        """``theta_i - theta`` after ``K`` full-gradient steps of size ``eta_l`` from ``theta``, for every client.

        Closed form of 003, eq. 153: ``phi (theta_i* - theta)`` with ``phi = 1 - (1 - eta_l)^K``.
        """
        owner = "QuadraticClients.local_updates"
        t = self._theta(theta, owner)
        check_param("local_lr", owner, local_lr, Interval(float, 0, None, closed="neither"))
        steps = check_int("local_steps", owner, local_steps, 0)
        phi = 1.0 - (1.0 - float(local_lr)) ** steps
        return np.asarray(phi * (self.optima - t), dtype=np.float64)


def make_quadratic_clients(
    *, num_clients: int = 10, dim: int = 20, iid: bool, rng: np.random.Generator
) -> QuadraticClients:
    """Draw the local optima ``theta_i* ~ N(0, I_d)`` of 003's synthetic experiment (Sec. 4.1, App. D).

    ``iid=True`` gives every client the same optimum ``theta_1*`` (one draw); ``iid=False`` draws
    each client's independently. 003 uses ``n = 10`` and ``d = 20``.

    >>> clients = make_quadratic_clients(iid=True, rng=np.random.default_rng(0))
    >>> clients.optima.shape, bool(np.all(clients.optima == clients.optima[0]))
    ((10, 20), True)
    """
    owner = "make_quadratic_clients"
    n = check_int("num_clients", owner, num_clients, 1)
    d = check_int("dim", owner, dim, 1)
    check_param("iid", owner, iid, Boolean())
    rng = check_generator(rng, owner)
    check_fits_in_memory("num_clients", owner, num_clients, 8.0 * n * d, f"{n} optima of dimension {d}")
    # iid: one draw shared by every client (003 sets theta_i* = theta_1*).
    optima = np.repeat(rng.standard_normal((1, d)), n, axis=0) if iid else rng.standard_normal((n, d))
    return QuadraticClients(optima=optima)


def heavy_first_importances(num_clients: int, *, first: float) -> FloatArray:
    """``p_1 = r`` and ``p_i = (1 - r) / (n - 1)`` for the others (003, eq. 15).

    >>> heavy_first_importances(5, first=0.6).tolist()
    [0.6, 0.1, 0.1, 0.1, 0.1]
    """
    owner = "heavy_first_importances"
    n = check_int("num_clients", owner, num_clients, 2)
    check_param("first", owner, first, Interval(float, 0, 1, closed="neither"))
    p = np.full(n, (1.0 - float(first)) / (n - 1))
    p[0] = float(first)
    return p
