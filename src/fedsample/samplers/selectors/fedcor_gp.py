"""FedCor's Gaussian process over the clients' loss changes, in the low-rank form its kernel allows.

The model (Tang et al., CVPR 2022, with the kernel of the authors' released code): the change of the
clients' losses over one round, ``Delta in R^n``, is Gaussian with mean ``mu`` and covariance

    Sigma = X^T X + sigma^2 I,

``X`` a ``D x n`` matrix of learned client embeddings (a linear kernel, the released default
``--kernel Poly --poly_norm 0`` with ``--dimension 15``) and ``sigma`` a fixed noise level. ``D`` is
small (15), so nothing here builds the ``n x n`` matrix:

* **Selection** (:func:`greedy_selection`). The ``m`` clients are chosen one at a time; each step
  takes the candidate ``k`` with the largest ``beta_k * (sum_i p_i Sigma'_ik) / sqrt(Sigma'_kk)``, the
  covariance of the importance-weighted loss change with client ``k``'s standardised one under the
  posterior ``Sigma'`` given the clients already chosen (``beta_k`` is the annealing discount), and
  conditions on it. For an unchosen client ``Sigma'_ij = x_i^T P x_j + sigma^2 delta_ij`` with the
  ``D x D`` posterior ``P = (I + X_S X_S^T / sigma^2)^{-1}`` of the embedding weights (Bayesian linear
  regression), updated by Sherman-Morrison per step: a step costs ``O(n D)``, a round ``O(m n D)``.
  This equals the released code's rank-one downdates of the dense ``Sigma`` (``GPR.Select_Clients``),
  which cost ``O(m n^2)`` time and ``O(n^2)`` memory.
* **Fitting** (:func:`fit_embedding`). ``X`` maximises ``sum_e gamma^(t - e) log N(Delta_e; mu, Sigma)``
  over the stored loss-change vectors ``Delta_e`` (marginal likelihood, the released ``--train_method
  MML``) by Adam, as the released ``GPR.Train`` does. By Woodbury, ``Sigma^{-1} = sigma^{-2}(I - X^T A^{-1} X)``
  and ``log|Sigma| = (n - D) log sigma^2 + log|A|`` with ``A = sigma^2 I + X X^T`` (``D x D``), and the
  gradient with respect to ``X`` is ``sum_e w_e (A^{-1} X - (A^{-1} X r_e) alpha_e^T)`` with
  ``r_e = Delta_e - mu`` and ``alpha_e = Sigma^{-1} r_e``: ``O(n D (D + k))`` an iteration for ``k``
  vectors, where the dense form costs ``O(n^3)``.

``A`` and ``Sigma`` are positive definite (eigenvalues at least ``sigma^2``), but not always in floating
point: with ``noise = 1e-6`` (``sigma^2 = 1e-12``) and embeddings grown past about 1e2 by a large
learning rate, ``sigma^2`` is below the rounding of ``X X^T``, and Cholesky fails or gives a pivot
below ``sigma^2 / 2`` (which exact arithmetic never does). The fit then takes
``log|A|`` and ``A^{-1}`` from ``A``'s eigendecomposition with its eigenvalues raised to at least
``sigma^2`` (their exact lower bound), and the selection keeps every posterior variance ``Sigma'_kk``
at least ``sigma^2`` likewise; where Cholesky succeeds nothing changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedsample._arrays import BoolArray, FloatArray, IntArray

__all__ = [
    "ADAM_BETAS",
    "ADAM_EPSILON",
    "LossChanges",
    "fit_embedding",
    "greedy_selection",
    "negative_log_likelihood",
    "weighted_mean",
]

# Adam's defaults in torch.optim.Adam, which the released GPR.Train uses (weight decay 0).
ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8


@dataclass(frozen=True, eq=False)
class LossChanges:
    """Stored loss-change vectors: ``values[e, i]`` observed where ``observed[e, i]``, weighted ``weights[e]``."""

    values: FloatArray  # (k, n)
    observed: BoolArray  # (k, n)
    weights: FloatArray  # (k,)


def weighted_mean(changes: LossChanges) -> FloatArray:
    """``mu_i``: the weighted mean of client ``i``'s observed changes (0 for a client never observed;
    the released ``MLE_Mean`` divides by zero there)."""
    w = changes.weights[:, None] * changes.observed
    total = w.sum(axis=0)
    sums = (w * np.where(changes.observed, changes.values, 0.0)).sum(axis=0)
    out: FloatArray = np.divide(sums, total, out=np.zeros_like(sums), where=total > 0)
    return out


@dataclass(frozen=True, eq=False)
class _Block:
    """The vectors that observed the same clients (``None``: every client), their residuals and weights."""

    clients: IntArray | None
    residuals: FloatArray  # (k, |I|): Delta_e - mu on the observed clients
    weights: FloatArray  # (k,)


def _blocks(mean: FloatArray, changes: LossChanges) -> list[_Block]:
    """The stored vectors grouped by their observed set, with their residuals ``r_e = Delta_e - mu``."""
    groups: dict[bytes, list[int]] = {}
    for e in range(changes.observed.shape[0]):
        groups.setdefault(np.packbits(changes.observed[e]).tobytes(), []).append(e)
    out = []
    n = mean.size
    for members in groups.values():
        rows = np.asarray(members, dtype=np.int64)
        clients = np.flatnonzero(changes.observed[rows[0]]).astype(np.int64)
        if clients.size == n:
            out.append(_Block(None, changes.values[rows] - mean, changes.weights[rows]))
        elif clients.size:
            out.append(_Block(clients, changes.values[np.ix_(rows, clients)] - mean[clients], changes.weights[rows]))
    return out


def negative_log_likelihood(
    embedding: FloatArray, noise: float, mean: FloatArray, changes: LossChanges
) -> tuple[float, FloatArray]:
    """``-sum_e w_e log N(Delta_e; mu, Sigma)`` over each vector's observed clients, and its gradient
    with respect to the embedding ``X`` (``D x n``)."""
    return _likelihood(embedding, noise, _blocks(mean, changes))


def _likelihood(embedding: FloatArray, noise: float, blocks: list[_Block]) -> tuple[float, FloatArray]:
    variance = noise * noise
    dim = embedding.shape[0]
    loss = 0.0
    gradient = np.zeros_like(embedding)
    for block in blocks:
        x = embedding if block.clients is None else embedding[:, block.clients]  # (D, |I|)
        size = x.shape[1]
        # The products over the clients are einsum's: one thread, sums in an order fixed by the shapes
        # (a BLAS product's depend on its thread count), and faster than BLAS for these thin matrices
        # on a shared machine.
        a = variance * np.eye(dim) + np.einsum("ij,kj->ik", x, x)
        log_det_a, a_inv = _log_det_and_inverse(a, variance)
        log_det = log_det_a + (size - dim) * math.log(variance)
        a_inv_x = np.einsum("ij,jk->ik", a_inv, x)  # A^{-1} X = X Sigma^{-1}
        projected = np.einsum("ij,kj->ik", a_inv_x, block.residuals)  # (D, k): A^{-1} X r_e
        alphas = (block.residuals - np.einsum("ji,jk->ik", projected, x)) / variance  # (k, |I|): Sigma^{-1} r_e
        quadratic = np.einsum("ij,ij->i", block.residuals, alphas)
        log_p = -0.5 * (quadratic + log_det + size * math.log(2.0 * math.pi))
        loss -= float(block.weights @ log_p)
        part = block.weights.sum() * a_inv_x - np.einsum("ij,jk->ik", projected * block.weights, alphas)
        if block.clients is None:
            gradient += part
        else:
            gradient[:, block.clients] += part
    return loss, gradient


def _log_det_and_inverse(a: FloatArray, variance: float) -> tuple[float, FloatArray]:
    """``log|A|`` and ``A^{-1}`` of ``A = sigma^2 I + X X^T``, by Cholesky. ``A``'s eigenvalues, and so every
    pivot of its factorisation, are at least ``sigma^2``; in floating point the factorisation fails, or gives
    a pivot below ``sigma^2 / 2``, when ``sigma^2`` is below the rounding of ``X X^T`` (``noise = 1e-6``
    with embeddings grown past 1e2, fewer observed clients than ``D``). Then both come from ``A``'s
    eigendecomposition with its eigenvalues raised to at least ``sigma^2``, their exact bound."""
    try:
        cholesky = np.linalg.cholesky(a)
        pivots = np.diag(cholesky)
        if float(pivots.min()) ** 2 >= 0.5 * variance:
            inverse = np.asarray(np.linalg.inv(a), dtype=np.float64)
            return 2.0 * float(np.log(pivots).sum()), inverse
    except np.linalg.LinAlgError:
        pass
    values, vectors = np.linalg.eigh(a)
    values = np.maximum(values, variance)
    fallback: FloatArray = (vectors / values) @ vectors.T
    return float(np.log(values).sum()), fallback


def fit_embedding(
    embedding: FloatArray,
    noise: float,
    mean: FloatArray,
    changes: LossChanges,
    *,
    iterations: int,
    learning_rate: float,
) -> FloatArray:
    """``X`` after ``iterations`` Adam steps (fresh moments, as each released ``GPR.Train`` call) on
    :func:`negative_log_likelihood`."""
    blocks = _blocks(mean, changes)
    x = np.array(embedding, dtype=np.float64, copy=True)
    first = np.zeros_like(x)
    second = np.zeros_like(x)
    beta1, beta2 = ADAM_BETAS
    for step in range(1, iterations + 1):
        if not np.isfinite(x).all():  # diverged (the caller keeps the embedding it had)
            break
        _, gradient = _likelihood(x, noise, blocks)
        first = beta1 * first + (1.0 - beta1) * gradient
        second = beta2 * second + (1.0 - beta2) * gradient * gradient
        # torch.optim.Adam: theta -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
        denominator = np.sqrt(second) / math.sqrt(1.0 - beta2**step) + ADAM_EPSILON
        x -= (learning_rate / (1.0 - beta1**step)) * first / denominator
    return x


def greedy_selection(
    embedding: FloatArray,
    noise: float,
    importances: FloatArray,
    discount: FloatArray,
    candidates: IntArray,
    count: int,
) -> IntArray:
    """The ``count`` clients among ``candidates`` (increasing ids) chosen one at a time, each the
    largest ``discount_k (sum_i p_i Sigma'_ik) / sqrt(Sigma'_kk)`` under the posterior given those
    chosen before (ties to the lower id). ``O(count n D)`` time, ``O(n D)`` memory."""
    variance = noise * noise
    ids = np.asarray(candidates, dtype=np.int64)
    x = np.ascontiguousarray(embedding[:, ids])  # only the candidates' scores are ever needed
    # u = sum over every unchosen client of p_i x_i (candidates or not); nothing chosen: P = I. The
    # products over n are einsum's (one thread, an order fixed by the shapes): a BLAS product's sums
    # depend on its thread count, and near-ties in the choice could follow them.
    u = np.einsum("ij,j->i", embedding, importances)
    h = np.einsum("i,ij->j", u, x)  # h_k = u^T P x_k
    variances = np.einsum("ij,ij->j", x, x) + variance  # Sigma'_kk = x_k^T P x_k + sigma^2
    prior = variance * importances[ids]
    weights = np.asarray(discount, dtype=np.float64)[ids]
    p = np.eye(x.shape[0])
    scores = np.empty(ids.size)
    chosen: list[int] = []
    for _ in range(min(count, ids.size)):
        np.add(h, prior, out=scores)
        scores *= weights
        scores /= np.sqrt(variances)
        scores[chosen] = -np.inf
        k = int(np.argmax(scores))
        chosen.append(k)
        # Condition on the client at k: z = P x_k, s = x_k^T P x_k + sigma^2, g = X^T z.
        z = p @ x[:, k]
        s = max(float(variances[k]), variance)
        g = np.einsum("i,ij->j", z, x)
        u = u - importances[ids[k]] * x[:, k]
        h -= importances[ids[k]] * g + (float(u @ z) / s) * g
        variances -= g * g / s
        np.maximum(variances, variance, out=variances)  # Sigma'_kk >= sigma^2 exactly; rounding may cross it
        p = p - np.outer(z, z) / s
    return ids[np.asarray(chosen, dtype=np.int64)]
