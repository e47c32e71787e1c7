"""Optimal client sampling from the norms of the clients' updates or gradients.

* :class:`OptimalSampler` (Chen, Horvath and Richtarik, "Optimal Client Sampling for Federated
  Learning", TMLR 2022; paper 003, App. A.8): independent inclusions with
  ``q_i = min(1, c ||w_i U_i||)`` water-filled to ``sum q_i = m`` (:func:`capped_inclusion`), weights
  ``w_i / q_i``. Among the unbiased independent-inclusion schemes with ``m`` clients in
  expectation, these ``q`` minimise the variance of the aggregate ``sum_i (w_i / q_i) U_i 1{i in S}``.
* :class:`OptimalDistributionSampler` (paper 001's full-information *Optimal* reference): ``K``
  draws from ``p_m`` proportional to ``lambda_m ||g_m||``, the minimiser of paper 001's variance
  loss ``sum_m a_m / p_m`` with ``a_m = lambda_m^2 ||g_m||^2``.

Both are two-phase (``Sampler.two_phase``): the round's candidates report norms through
:meth:`~fedsample.samplers.Sampler.update` *before* :meth:`~fedsample.samplers.Sampler.sample`
draws the round from them. docs/samplers.md states what the engine must supply.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._invariants import FieldError, check_round, check_values
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.designs import BernoulliDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers._state import check_sampling_fields
from fedsample.samplers.adaptive._distribution import DistributionSampler, merge_constraints
from fedsample.samplers.adaptive.projection import project_truncated_simplex
from fedsample.samplers.schemes.bernoulli import capped_inclusion
from fedsample.samplers.two_phase import (
    EVERY_UPDATE,
    FirstPhase,
    check_report_round,
    check_reported,
    reported_round,
    uniform_candidates,
)
from fedsample.serialization import plain_data

__all__ = ["NormState", "OptimalDistributionSampler", "OptimalSampler", "optimal_distribution"]

# Paper 001's released code sets a probability of at most 1e-10 to zero (for numerical stability).
_ZERO_BELOW = 1e-10


def _reported(feedback: Feedback, kind: str) -> tuple[IntArray, FloatArray]:
    """The reporting clients and their norms, those with a NaN or infinite norm left out."""
    values = feedback.gradient_norms if kind == "gradient" else feedback.update_norms
    if values is None:
        field_name = "gradient_norms" if kind == "gradient" else "update_norms"
        raise FedsampleError(
            f"The 'feedback' parameter of the optimal sampler is {kind!r}, which needs Feedback.{field_name}. "
            "Got None instead.",
            parameter="feedback",
        )
    clients = np.asarray(feedback.clients, dtype=np.int64)
    norms = np.asarray(values, dtype=np.float64)
    if norms.shape != clients.shape:
        raise FedsampleError(
            f"The 'feedback' parameter of the optimal sampler must give one norm per reporting client "
            f"({clients.size}). Got {norms.size} norms instead.",
            parameter="feedback",
        )
    keep = np.isfinite(norms) & (norms >= 0)
    return clients[keep], norms[keep]


@plain_data
@dataclass(frozen=True, eq=False)
class NormState:
    """The candidates of the next round, their weights ``w_i`` and the norms ``||U_i||`` they reported."""

    importances: FloatArray
    num_sampled: int
    candidates: IntArray
    candidate_weights: FloatArray
    norms: FloatArray
    round: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", readonly(np.asarray(self.candidates, dtype=np.int64)))
        for name in ("importances", "candidate_weights", "norms"):
            object.__setattr__(self, name, readonly(np.asarray(getattr(self, name), dtype=np.float64)))

    def check_invariants(self) -> None:
        owner = "NormState"
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled)
        ids = check_values(owner, "candidates", self.candidates, shape=(None,), low=0, high=n - 1, integer=True)
        if ids.size == 0 or np.any(np.diff(ids) <= 0):
            raise FieldError(owner, "candidates", "distinct client ids in increasing order", f"{ids.tolist()!r:.60}")
        check_values(owner, "candidate_weights", self.candidate_weights, shape=ids.shape, low=0.0)
        check_values(owner, "norms", self.norms, shape=ids.shape, low=0.0)
        check_round(owner, "round", self.round)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class OptimalSampler(Sampler[NormState]):
    """Optimal client sampling (Chen et al., TMLR 2022): ``q_i = min(1, c ||w_i U_i||)``, ``sum q_i = m``.

    Client ``i`` joins independently with probability ``q_i`` and weight ``w_i / q_i`` (003, eq. 65),
    where ``w_i`` is its weight among the round's candidates and ``||U_i||`` the norm it reported.
    Two modes (``mode``):

    * ``"oracle"``: every client is a candidate with ``w_i = p_i``; a report updates the norms of
      the clients in it and the others keep their last reported norm (1 before any). Reporting every
      client each round gives the paper's full-information sampler, for analysis.
    * ``"protocol"``: the candidates report each round. The round's candidates are the clients of
      the report, drawn by :meth:`draw_candidates` among the available clients: every one of them
      (``candidates = None``), or ``K = candidates`` of the ``N_a`` available ones uniformly without
      replacement. With ``candidate_weighting="horvitz-thompson"`` (default, ours) their ``w_i`` are
      that candidate selection's weights (``Feedback.selection``: ``p_i N_a / K``, the inverse of the
      inclusion ``K / N_a``), so that the final weights ``w_i / q_i = p_i / (q_i K / N_a)`` stay
      unbiased for ``sum_i p_i U_i`` over both stages (Horvitz-Thompson, tower rule).
      ``"renormalized"`` is the authors' released code (``simple_fedavg_tff.py``: a federated mean
      weighted by ``n_i`` over the ``K`` candidates): ``w_i = p_i / sum_{j in C} p_j`` over the
      reporting candidates ``C``, unbiased given ``C`` for the candidates' own objective but not over
      the candidate draw (a ratio of random sums).
      Protocol mode refuses to draw from a state that read no report, and a second feedback for a
      round already reported (:mod:`fedsample.samplers.two_phase`).

    ``feedback`` picks the reported norm: ``"update"`` (``||theta_i - theta||``, the default) or
    ``"gradient"``. A client reporting a zero norm gets ``q_i = 0`` (its update contributes nothing)
    unless fewer than ``m`` candidates have a positive norm. Before any report, ``q`` is the
    water-filled ``min(1, c p_i)`` (``bernoulli``'s proportional rule).
    """

    name = "optimal"
    two_phase = True
    mode: Literal["oracle", "protocol"] = "oracle"
    feedback: Literal["update", "gradient"] = "update"
    candidates: int | None = None
    candidate_weighting: Literal["horvitz-thompson", "renormalized"] = "horvitz-thompson"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "mode": Options(("oracle", "protocol")),
        "feedback": Options(("update", "gradient")),
        "candidates": NoneOr(Interval(int, 1, None, closed="left")),
        "candidate_weighting": Options(("horvitz-thompson", "renormalized")),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.candidates is not None and self.mode != "protocol":
            raise invalid("candidates", type(self).__name__, "None unless mode='protocol'", self.candidates)
        if self.candidate_weighting != "horvitz-thompson" and self.mode != "protocol":
            constraint = "'horvitz-thompson' unless mode='protocol'"
            raise invalid("candidate_weighting", type(self).__name__, constraint, self.candidate_weighting)

    def init(self, federation: Federation, num_sampled: int) -> NormState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        if self.candidates is not None and not m <= self.candidates <= n:
            raise invalid(
                "candidates",
                f"{type(self).__name__}.init",
                f"an int in [num_sampled, num_clients] = [{m}, {n}]",
                self.candidates,
            )
        p = federation.importances
        return NormState(
            importances=p, num_sampled=m, candidates=np.arange(n, dtype=np.int64), candidate_weights=p, norms=np.ones(n)
        )

    def first_phase(self) -> FirstPhase:
        """The candidates train and report their norms."""
        return EVERY_UPDATE

    def draw_candidates(self, state: NormState, available: IntArray, rng: np.random.Generator) -> Selection:
        """The round's candidates among ``available``: all, or ``candidates`` uniformly (weights ``p_i N_a / K``)."""
        return uniform_candidates(state.importances, available, self.candidates, rng)

    def inclusion(self, state: NormState) -> FloatArray:
        """``q_i`` of every client (zero outside the candidates)."""
        q = np.zeros(state.importances.size)
        m = min(state.num_sampled, int(state.candidates.size))
        q[state.candidates] = capped_inclusion(state.candidate_weights * state.norms, m)
        return q

    def design(self, state: NormState) -> BernoulliDesign:
        if self.mode == "protocol":
            check_reported(state.round, f"{type(self).__name__}.sample", "mode 'protocol'")
        n = state.importances.size
        q = self.inclusion(state)
        w = np.zeros(n)
        w[state.candidates] = state.candidate_weights
        return BernoulliDesign(inclusion=q, weights=np.divide(w, q, out=np.zeros(n), where=q > 0))

    def update(self, state: NormState, feedback: Feedback) -> NormState:
        clients, norms = _reported(feedback, self.feedback)
        if self.mode == "oracle":
            known = np.array(state.norms, dtype=np.float64)
            known[clients] = norms  # oracle candidates are every client, in order
            return replace(state, norms=known, round=state.round + 1)
        check_report_round(state.round, feedback, f"{type(self).__name__}.update", "mode 'protocol'")
        round_after = reported_round(state.round, feedback)
        if clients.size == 0:  # nobody reported: the next round falls back to every client
            n = state.importances.size
            candidates, weights, norms = np.arange(n, dtype=np.int64), state.importances, np.ones(n)
        else:
            order = np.argsort(clients, kind="stable")
            candidates, norms = clients[order], norms[order]
            if self.candidate_weighting == "renormalized":  # the released code: n_i / sum_C n_j
                weights = state.importances[candidates] / state.importances[candidates].sum()
            else:
                weights = feedback.selection.dense_weights(state.importances.size)[candidates]
        return replace(state, candidates=candidates, candidate_weights=weights, norms=norms, round=round_after)


def optimal_distribution(scores: FloatArray, *, alpha: float) -> FloatArray:
    """The distribution minimising ``sum_m s_m^2 / p_m`` (paper 001's variance loss with ``s = sqrt(a)``).

    ``alpha = 0``: ``p`` proportional to ``s``, with probabilities of at most ``1e-10`` set to zero
    and the rest renormalised, as paper 001's released code does; all-zero scores give uniform.
    ``alpha > 0``: the minimiser over the truncated simplex ``{p_m >= alpha / M}`` of OSMD, which is
    ``max(alpha / M, c s_m)`` (the KL projection of ``s`` onto that set).
    """
    s = np.asarray(scores, dtype=np.float64)
    n = s.size
    total = float(s.sum())
    if total <= 0 or not np.isfinite(total):
        return np.full(n, 1.0 / n)
    if alpha > 0:
        return project_truncated_simplex(np.maximum(s / s.max(), 1e-300), alpha / n)
    p = s / total
    p[p <= _ZERO_BELOW] = 0.0
    out: FloatArray = p / p.sum()
    return out


@register_sampler
@dataclass(frozen=True, kw_only=True)
class OptimalDistributionSampler(DistributionSampler[NormState]):
    """Paper 001's *Optimal* sampler: ``K`` draws from ``p_m`` proportional to ``lambda_m ||g_m||``.

    The full-information reference of paper 001's experiments: every client's current gradient
    norm is reported before the round (``feedback="gradient"``, the mean mini-batch gradient at
    ``theta``; ``"update"`` scales update norms to gradients as OSMD does) and the round draws from
    :func:`optimal_distribution` of ``lambda_m ||g_m||``, with replacement (paper 001) or, with
    ``replace=False``, successively without (Prop. 11: the same optimal distribution). A client
    that did not report keeps its last norm (1 before any report, so the first round is MD).
    ``alpha = 0`` (default) zeroes probabilities of at most 1e-10 as the released code does: such a
    client is never drawn, so its weight has mean 0 instead of ``lambda_m`` (only a client with a
    vanishing gradient gets there); ``alpha > 0`` truncates to ``p_m >= alpha / M`` instead, the set
    over which paper 001's comparator is optimal.
    """

    name = "optimal-distribution"
    two_phase = True
    feedback: Literal["update", "gradient"] = "gradient"
    alpha: float = 0.0
    _parameter_constraints: ClassVar[dict[str, Constraint]] = merge_constraints(
        DistributionSampler._parameter_constraints, {"alpha": Interval(float, 0, 1, closed="both")}
    )

    def init(self, federation: Federation, num_sampled: int) -> NormState:
        n = federation.num_clients
        k = self._check_k(num_sampled, n)
        p = federation.importances
        return NormState(
            importances=p, num_sampled=k, candidates=np.arange(n, dtype=np.int64), candidate_weights=p, norms=np.ones(n)
        )

    def probabilities(self, state: NormState) -> FloatArray:
        return optimal_distribution(state.candidate_weights * state.norms, alpha=self.alpha)

    def update(self, state: NormState, feedback: Feedback) -> NormState:
        clients, norms = _reported(feedback, self.feedback)
        if self.feedback == "update":
            lr = feedback.local_lr if feedback.local_lr else 1.0
            steps = feedback.local_steps if feedback.local_steps else 1
            norms = norms / (lr * np.sqrt(steps))
        known = np.array(state.norms, dtype=np.float64)
        known[clients] = norms
        return replace(state, norms=known, round=state.round + 1)
