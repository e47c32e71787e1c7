"""DELTA (Wang, Guo, Lin and Tang, "DELTA: Diverse Client Sampling for Fasting Federated Learning",
NeurIPS 2023; released code github.com/L3030/DELTA_FL).

DELTA draws ``K`` clients from a distribution ``p`` and aggregates them with inverse-probability
weights, so the aggregate is unbiased for ``sum_i lambda_i Delta_i`` whatever ``p``. Its ``p`` trades
the clients' *gradient diversity* ``zeta_i = ||g_i - g_bar||`` (distance of client ``i``'s gradient
from the mean gradient) against their *local variance* ``sigma_i^2``: the variance-optimal
probabilities of the paper are ``p_i ∝ lambda_i sqrt(a1 zeta_i^2 + a2 sigma_i^2)``.

The practical DELTA cannot ask every client for its gradient each round. It keeps the probability
each client got from the statistics it sent the last time it took part; a client never seen keeps
the initial ``1/n``. After a round, the returned clients' probabilities are replaced by their new
scores, rescaled so that together they keep the mass they had (``reweight_prac`` of the released
``local_update.py``). Scores (``form``):

* ``"released"`` (default): the released code's ``lambda_i ((1 - beta) ||g_i|| + beta ||g_i - g_bar||)``,
  ``g_bar`` the plain mean of the round's returned clients' gradients (``beta = 0.5``, its default);
* ``"paper"``: ``lambda_i sqrt(a1 ||g_i - g_bar||^2 + a2 sigma_i^2)`` with ``a1 = diversity_weight``,
  ``a2 = variance_weight`` and ``sigma_i^2`` estimated from the round (below).

``g_i`` is the client's mean local gradient, ``-(theta_i - theta) / (eta_l N)`` from its update
(``Feedback.updates``: exact for plain local SGD, as the released code's average of the mini-batch
gradients of its local steps). ``sigma_i^2`` is estimated by ``max(0, ||b_i||^2 - ||g_i||^2)`` with
``||b_i||`` the norm of the first mini-batch gradient at ``theta`` (``Feedback.gradient_norms``):
``E ||b_i||^2 = ||grad F_i||^2 + sigma_i^2``. With one local step ``b_i = g_i`` and the estimate is 0.

The draw and its weights are a design of :mod:`fedsample.designs`: ``K`` draws with replacement
(:class:`~fedsample.designs.RowDesign`, weight ``lambda_i / (K p_i)`` per draw, exact statistics), or
successive draws without replacement (``replace=False``, the released code's ``torch.multinomial``,
with Des Raj's unbiased weights; Monte-Carlo statistics).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Boolean, Constraint, Interval, NoneOr, Options, invalid
from fedsample.designs import RowDesign, SuccessiveDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers.adaptive._distribution import distribution_design
from fedsample.samplers.adaptive.osmd import DistributionState
from fedsample.samplers.adaptive.projection import project_truncated_simplex

__all__ = ["DeltaSampler", "delta_scores", "mass_preserving_update"]

# The released code's default (``--beta 0.5``) and the paper form's default weights.
_BETA = 0.5
_WEIGHT = 1.0


def delta_scores(
    gradients: FloatArray,
    importances: FloatArray,
    *,
    form: str,
    beta: float = _BETA,
    diversity_weight: float = _WEIGHT,
    variance_weight: float = _WEIGHT,
    batch_norms: FloatArray | None = None,
) -> FloatArray:
    """DELTA's score of each of the round's clients from their gradients ``g_i`` (one row each).

    ``"released"``: ``lambda_i ((1 - beta) ||g_i|| + beta ||g_i - g_bar||)``; ``"paper"``:
    ``lambda_i sqrt(a1 ||g_i - g_bar||^2 + a2 sigma_i^2)``, ``sigma_i^2 = max(0, b_i^2 - ||g_i||^2)``
    from the first mini-batch gradient norms ``b_i`` (``batch_norms``; ``None``: no variance term).
    ``g_bar`` is the plain mean of the rows.
    """
    diversity = np.linalg.norm(gradients - gradients.mean(axis=0), axis=1)
    if form == "released":
        norms = np.linalg.norm(gradients, axis=1)
        scores: FloatArray = importances * ((1.0 - beta) * norms + beta * diversity)
        return scores
    variance = np.zeros(diversity.size)
    if batch_norms is not None:
        variance = np.maximum(batch_norms**2 - np.einsum("ij,ij->i", gradients, gradients), 0.0)
    out: FloatArray = importances * np.sqrt(diversity_weight * diversity**2 + variance_weight * variance)
    return out


def mass_preserving_update(probabilities: FloatArray, clients: IntArray, scores: FloatArray) -> FloatArray:
    """``probabilities`` with those of ``clients`` replaced by ``scores`` rescaled to the mass the
    clients had (the released ``reweight_prac``); unchanged when the scores are all zero."""
    total = float(scores.sum())
    if clients.size == 0 or not np.isfinite(total) or total <= 0:
        return probabilities
    p = np.array(probabilities, dtype=np.float64)
    p[clients] = scores / total * float(probabilities[clients].sum())
    normalised: FloatArray = p / p.sum()
    return normalised


@register_sampler
@dataclass(frozen=True, kw_only=True)
class DeltaSampler(Sampler[DistributionState]):
    """DELTA's practical sampler: ``K`` draws from ``p``, ``p_i`` from each client's last-seen gradient
    diversity (and local variance), inverse-probability weights (unbiased). See the module doc.

    Hyperparameters
    ---------------
    form:
        ``"released"`` (default: the released code's score) or ``"paper"`` (the paper's
        ``sqrt(a1 zeta^2 + a2 sigma^2)``).
    beta:
        The released score's weight of the diversity term against the gradient norm, in ``[0, 1]``;
        ``None`` takes the released default 0.5. Only with ``form="released"``.
    diversity_weight, variance_weight:
        The paper's ``a1`` and ``a2`` (``None``: 1 each). Only with ``form="paper"``.
    alpha:
        A floor ``alpha / n`` under every probability (the KL projection of OSMD), in ``[0, 1]``;
        0 (default, the released code) has none, so a client reporting a zero score is not drawn again.
    replace:
        ``True`` (default): ``K`` draws with replacement, weight ``lambda_i / (K p_i)`` per draw (the
        paper's design; exact statistics). ``False``: successive draws without replacement (the
        released code's draw) with Des Raj's unbiased weights.
    """

    name = "delta"
    needs_updates = True
    form: Literal["released", "paper"] = "released"
    beta: float | None = None
    diversity_weight: float | None = None
    variance_weight: float | None = None
    alpha: float = 0.0
    replace: bool = True
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "form": Options(("released", "paper")),
        "beta": NoneOr(Interval(float, 0, 1, closed="both")),
        "diversity_weight": NoneOr(Interval(float, 0, 1e12, closed="both")),
        "variance_weight": NoneOr(Interval(float, 0, 1e12, closed="both")),
        "alpha": Interval(float, 0, 1, closed="both"),
        "replace": Boolean(),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = type(self).__name__
        if self.beta is not None and self.form != "released":
            raise invalid("beta", owner, "None unless form='released'", self.beta)
        for key in ("diversity_weight", "variance_weight"):
            if getattr(self, key) is not None and self.form != "paper":
                raise invalid(key, owner, "None unless form='paper'", getattr(self, key))
        if self.diversity_weight == 0 and self.variance_weight == 0:  # every score would be 0
            raise invalid("variance_weight", owner, "a float > 0 when diversity_weight is 0", self.variance_weight)

    def init(self, federation: Federation, num_sampled: int) -> DistributionState:
        n = federation.num_clients
        k = self._check_num_sampled(num_sampled, upper=None if self.replace else n)
        # Every client starts at 1/n, as the released code's P (a client never seen keeps it).
        p = np.full(n, 1.0 / n)
        if self.alpha > 0:
            p = project_truncated_simplex(p, self.alpha / n)
        return DistributionState(importances=federation.importances, num_sampled=k, probabilities=p, round=0)

    def probabilities(self, state: DistributionState) -> FloatArray:
        """The distribution ``p`` the next round draws from."""
        p: FloatArray = state.probabilities
        return p

    def design(self, state: DistributionState) -> RowDesign | SuccessiveDesign:
        return distribution_design(state.probabilities, state.importances, state.num_sampled, replace=self.replace)

    def update(self, state: DistributionState, feedback: Feedback) -> DistributionState:
        """Replace the returned clients' probabilities by their DELTA scores, rescaled to their mass."""
        clients, gradients, batch_norms = self._gradients(feedback)
        p = state.probabilities
        if clients.size:
            scores = delta_scores(
                gradients,
                state.importances[clients],
                form=self.form,
                beta=_BETA if self.beta is None else self.beta,
                diversity_weight=_WEIGHT if self.diversity_weight is None else self.diversity_weight,
                variance_weight=_WEIGHT if self.variance_weight is None else self.variance_weight,
                batch_norms=batch_norms,
            )
            p = mass_preserving_update(p, clients, scores)
            if self.alpha > 0:
                p = project_truncated_simplex(np.maximum(p, 1e-300), self.alpha / p.size)
        return replace(state, probabilities=p, round=state.round + 1)

    def _gradients(self, feedback: Feedback) -> tuple[IntArray, FloatArray, FloatArray | None]:
        """The returned clients with a finite update (and, for the paper form, a finite first
        mini-batch gradient norm), their mean local gradients and those norms (a round in which
        nobody returned needs no field)."""
        if feedback.clients.size == 0:
            return feedback.clients, np.zeros((0, 0)), None
        if feedback.updates is None:
            raise FedsampleError(
                "The 'feedback' parameter of DeltaSampler.update must carry Feedback.updates (each returned "
                "client's update, from which DELTA reads its gradient). Got None instead.",
                parameter="feedback",
            )
        batch = None
        if self.form == "paper":
            if feedback.gradient_norms is None:
                raise FedsampleError(
                    "The 'feedback' parameter of DeltaSampler.update must carry Feedback.gradient_norms with "
                    "form='paper' (the local variance estimate). Got None instead.",
                    parameter="feedback",
                )
            batch = np.asarray(feedback.gradient_norms, dtype=np.float64)
        updates = np.asarray(feedback.updates, dtype=np.float64)
        keep = np.all(np.isfinite(updates), axis=1)
        if batch is not None:
            keep &= np.isfinite(batch)
            batch = batch[keep]
        lr = feedback.local_lr if feedback.local_lr else 1.0
        steps = feedback.local_steps if feedback.local_steps else 1
        return feedback.clients[keep], updates[keep] / (lr * steps), batch
