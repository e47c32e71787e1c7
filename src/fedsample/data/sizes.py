"""Client-size generators: the skewed sizes of paper 001 and the log-normal sizes of paper 004."""

from __future__ import annotations

import math

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._memory import check_fits_in_memory
from fedsample._validation import Interval, check_param
from fedsample.data._checks import check_int
from fedsample.federation import draw_osmd_skewed_sizes
from fedsample.rng import check_generator

__all__ = ["largest_remainder", "lognormal_sizes", "osmd_skewed_sizes"]


def osmd_skewed_sizes(num_clients: int, *, rng: np.random.Generator) -> IntArray:
    """Sizes 1, 10, 30 or 100 drawn i.i.d. with probabilities 0.65, 0.2, 0.1, 0.05 (paper 001).

    The built-in federation ``"osmd-skewed"`` is this draw for 500 clients.

    >>> osmd_skewed_sizes(5, rng=np.random.default_rng(0)).tolist()
    [1, 1, 1, 1, 10]
    """
    owner = "osmd_skewed_sizes"
    n = check_int("num_clients", owner, num_clients, 1)
    check_fits_in_memory("num_clients", owner, num_clients, 24.0 * n, f"the sizes of {n} clients")  # measured 24 B
    return draw_osmd_skewed_sizes(n, check_generator(rng, owner))


def largest_remainder(shares: FloatArray, total: int) -> IntArray:
    """Non-negative integers proportional to ``shares`` that sum to exactly ``total``.

    Each entry gets the floor of its quota; the units left go to the largest fractional parts
    (ties to the lower index), the Hamilton apportionment rule.
    """
    weights = np.asarray(shares, dtype=np.float64)
    quota = weights / weights.sum() * total
    base: IntArray = np.floor(quota).astype(np.int64)
    missing = int(total - base.sum())
    if missing > 0:
        order = np.argsort(-(quota - base), kind="stable")
        base[order[:missing]] += 1
    elif missing < 0:  # float rounding pushed a floor up; take back from the smallest remainders
        order = np.argsort(quota - base, kind="stable")
        order = order[base[order] > 0]
        base[order[:-missing]] -= 1
    return base


def lognormal_sizes(
    num_clients: int,
    *,
    mean: float = 2.0,
    sigma: float = 4.0,
    total: int | None = None,
    rng: np.random.Generator,
) -> IntArray:
    """Long-tailed client sizes shaped by a log-normal law, each at least 1 (paper 004, Sec. 4.1).

    Paper 004 partitions MIND with "a log-normal distribution" of "average size 2" and
    "variance sigma = 4". We read ``mean`` as the arithmetic mean client size and ``sigma`` as the
    standard deviation of the underlying normal (the paper's "variance" is the log-normal's
    shape parameter, as numpy's ``lognormal(0, sigma)`` takes it). Every client first gets one
    sample (an empty client is not a client); the other ``total - n`` samples are shared in
    proportion to weights ``r_i ~ LogNormal(0, sigma^2)`` with exact integer rounding
    (:func:`largest_remainder`), so the sizes sum to exactly ``total``. With ``sigma = 4`` most
    clients keep one or two samples and a handful hold most of the data.

    Parameters
    ----------
    num_clients:
        ``n``, the number of clients.
    mean:
        Average client size, at least 1. Ignored when ``total`` is given.
    sigma:
        Shape of the log-normal weights; larger is more imbalanced; 0 gives (nearly) equal sizes.
    total:
        Exact total number of samples ``M >= n``; defaults to ``round(mean * n)``.
    rng:
        Source of the log-normal weights.

    >>> sizes = lognormal_sizes(1000, rng=np.random.default_rng(0))
    >>> int(sizes.sum()), int(sizes.min()), bool(np.median(sizes) <= 2)
    (2000, 1, True)
    """
    owner = "lognormal_sizes"
    n = check_int("num_clients", owner, num_clients, 1)
    check_param("sigma", owner, sigma, Interval(float, 0, 50, closed="both"))
    if total is None:
        check_param("mean", owner, mean, Interval(float, 1, None, closed="left"))
        count = round(float(mean) * n)
    else:
        count = check_int("total", owner, total, n)
    check_fits_in_memory("num_clients", owner, num_clients, 56.0 * n, f"the sizes of {n} clients")  # measured 49 B
    rng = check_generator(rng, owner)
    # Work with log-weights shifted by their maximum so sigma up to 50 cannot overflow exp().
    log_weights = rng.normal(0.0, float(sigma), size=n)
    weights = np.exp(log_weights - log_weights.max())
    if not math.isfinite(float(weights.sum())):  # pragma: no cover - guarded by the shift above
        weights = np.ones(n)
    return 1 + largest_remainder(weights, count - n)
