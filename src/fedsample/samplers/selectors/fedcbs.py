"""Fed-CBS (Zhang, Li, Tang, Sun, Chen, Zhang, Chen, Chen and Li, "Fed-CBS: A Heterogeneity-Aware Client
Sampling Mechanism for Federated Learning via Class-Imbalance Reduction", ICML 2023).

The *quadratic class imbalance degree* of a group ``S`` of clients with label histograms ``h_i``
(``h_ic`` samples of class ``c``, ``n_i = sum_c h_ic``) is the squared distance of the group's pooled
label distribution from the uniform one over ``C`` classes::

    QCID(S) = sum_c (sum_{i in S} h_ic / sum_{i in S} n_i - 1/C)^2 = ||sum_S h_i||^2 / (sum_S n_i)^2 - 1/C.

Fed-CBS favours groups of small QCID (class-balanced unions) without enumerating groups: it draws
the ``m`` clients one after another,

* the first with probability ``∝ QCID({j})^(-beta_1) + lambda sqrt(3 ln t / (2 T_j))``, a
  combinatorial-UCB exploration bonus with ``T_j`` the times client ``j`` was selected and ``t`` the round;
* the ``k``-th among the clients not yet drawn with probability ``∝ QCID(S_{k-1} ∪ {j})^(-beta_k)``,
  the exponents ``beta_k`` increasing with ``k`` (here ``beta_k = beta_1 + (k - 1) beta_step``), so that
  a group's probability approaches ``QCID(S)^(-beta_m)`` up to normalisation.

Each step scores every remaining client in ``O(C)`` from the running class sums (``O(m n C)`` a round,
no ``n x n`` matrix). The server needs each client's label histogram (``label_counts``): see
docs/selection-systems.md for what it learns and the paper's remedy. The selected clients are
aggregated by FedAvg over the participants, so the scheme is biased (``E[w_i] != p_i``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fedsample._arrays import DTypeTable, FloatArray, IntArray
from fedsample._invariants import FieldError, check_mask, check_round, check_values
from fedsample._validation import Constraint, Interval, invalid
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.selectors.rules import (
    AGGREGATION_OPTIONS,
    Aggregation,
    RuleSampler,
    feedback_availability,
    participant_weights,
)
from fedsample.serialization import plain_data

__all__ = ["FROM_FEDERATION", "FedCBSSampler", "FedCBSState", "qcid"]

# The config value of ``label_counts`` that fedsample's experiment builder replaces by the data's histograms.
FROM_FEDERATION = "federation"
# A perfectly balanced group has QCID 0; its weight QCID^-beta is taken at this floor instead of infinity.
QCID_FLOOR = 1e-12


def qcid(label_counts: npt.ArrayLike) -> float:
    """The quadratic class imbalance degree of the group whose clients' histograms are the rows of ``label_counts``.

    >>> qcid([[5, 5], [0, 10]])  # pooled (5, 15) of 20: (0.25 - 0.5)^2 + (0.75 - 0.5)^2
    0.125
    """
    h = np.atleast_2d(np.asarray(label_counts, dtype=np.float64))
    pooled = h.sum(axis=0)
    return float(np.sum((pooled / pooled.sum() - 1.0 / h.shape[1]) ** 2))


@plain_data
@dataclass(frozen=True, eq=False)
class FedCBSState(SamplerState):
    """Each client's label histogram, the times each was selected (``T_j - 1``), who is available, the round."""

    label_counts: IntArray
    selected: IntArray
    available: np.ndarray
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {
        **SamplerState._array_dtypes,
        "label_counts": np.int64,
        "selected": np.int64,
        "available": np.bool_,
    }

    def check_invariants(self) -> None:
        owner = "FedCBSState"
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        counts = check_values(owner, "label_counts", self.label_counts, shape=(n, None), low=0, integer=True)
        if counts.shape[1] < 2 or np.any(counts.sum(axis=1) == 0):
            rule = "at least 2 classes and a sample on every client"
            raise FieldError(owner, "label_counts", rule, f"an array of shape {counts.shape}")
        check_values(owner, "selected", self.selected, shape=(n,), low=0, integer=True)
        check_mask(owner, "available", self.available, n)
        check_round(owner, "round", self.round)


def _check_counts(value: Any, num_clients: int | None, owner: str) -> IntArray:
    """``value`` as an ``(n, C)`` int64 array of label counts (``C >= 2``, a sample on every client)."""
    rule = "an (n, C) array of non-negative integer label counts, C >= 2, every client holding a sample"
    if num_clients is not None:
        rule = rule.replace("(n, C)", f"({num_clients}, C)")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise invalid("label_counts", owner, rule, value) from exc
    if raw.dtype.kind not in "iuf" or raw.ndim != 2 or raw.shape[1] < 2 or raw.size == 0:
        raise invalid("label_counts", owner, rule, value)
    if num_clients is not None and raw.shape[0] != num_clients:
        raise invalid("label_counts", owner, rule, f"an array of shape {raw.shape}")
    if not np.all(np.isfinite(raw)) or np.any(raw < 0) or np.any(raw != np.round(raw)):
        raise invalid("label_counts", owner, rule, value)
    counts = raw.astype(np.int64)
    if np.any(counts.sum(axis=1) == 0):
        raise invalid("label_counts", owner, rule, f"a client (row {int(np.argmin(counts.sum(axis=1)))}) with none")
    return counts


@register_sampler
@dataclass(frozen=True, kw_only=True, eq=False)
class FedCBSSampler(RuleSampler[FedCBSState]):
    """Fed-CBS: ``m`` clients drawn one after another with probabilities from the QCID of the growing
    group (see the module doc). Biased.

    Hyperparameters
    ---------------
    label_counts:
        ``(n, C)`` label histograms of the clients (``FederatedDataset.label_counts``). In a config,
        ``"federation"`` (the default) is replaced by the run's data's histograms.
    exponent:
        ``beta_1 > 0``, the first step's exponent (default 1).
    exponent_step:
        ``beta_k - beta_{k-1} >= 0`` (default 1: ``beta_k = k``).
    exploration:
        ``lambda >= 0``, the weight of the first step's exploration bonus (default 10; 0: none).
    aggregation:
        ``"size"`` (default, FedAvg over the participants by sample counts) or ``"average"``.
    """

    name = "fedcbs"
    label_counts: npt.ArrayLike | Any = field(default=FROM_FEDERATION)
    exponent: float = 1.0
    exponent_step: float = 1.0
    exploration: float = 10.0
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "exponent": Interval(float, 0, 1e3, closed="right"),
        "exponent_step": Interval(float, 0, 1e3, closed="both"),
        "exploration": Interval(float, 0, 1e12, closed="both"),
        "aggregation": AGGREGATION_OPTIONS,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.label_counts, str) and self.label_counts == FROM_FEDERATION):
            _check_counts(self.label_counts, None, type(self).__name__)

    def init(self, federation: Federation, num_sampled: int) -> FedCBSState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        owner = f"{type(self).__name__}.init"
        if isinstance(self.label_counts, str):
            rule = (
                f"an ({n}, C) array of label counts (from Python: FederatedDataset.label_counts; a config's "
                f"{FROM_FEDERATION!r} is filled in from the run's data by fedsample run)"
            )
            raise invalid("label_counts", owner, rule, self.label_counts)
        counts = _check_counts(self.label_counts, n, owner)
        return FedCBSState(
            importances=federation.importances,
            num_sampled=m,
            label_counts=counts,
            selected=np.zeros(n, dtype=np.int64),
            available=np.ones(n, dtype=bool),
        )

    def exponents(self, num_steps: int) -> FloatArray:
        """``beta_1, ..., beta_m``."""
        steps: FloatArray = self.exponent + self.exponent_step * np.arange(num_steps, dtype=np.float64)
        return steps

    def first_log_weights(
        self, state: FedCBSState, ids: IntArray, sizes: FloatArray, squares: FloatArray
    ) -> FloatArray:
        """Log of the first step's weights ``QCID({j})^(-beta_1) + lambda sqrt(3 ln t / (2 T_j))`` over
        ``ids``, from their sizes ``n_j`` and squared histogram norms ``||h_j||^2``."""
        single = squares / (sizes * sizes) - 1.0 / state.label_counts.shape[1]
        balance: FloatArray = -self.exponent * np.log(np.maximum(single, QCID_FLOOR))
        t = state.round + 1
        if t == 1 or self.exploration == 0:  # ln 1 = 0: no bonus
            return balance
        bonus = self.exploration * np.sqrt(3.0 * math.log(t) / (2.0 * (1.0 + state.selected[ids])))
        out: FloatArray = np.logaddexp(balance, np.log(bonus))
        return out

    def select(self, state: FedCBSState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        ids = np.flatnonzero(state.available).astype(np.int64)
        m = min(state.num_sampled, ids.size)
        if m == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        counts = state.label_counts if ids.size == state.available.size else state.label_counts[ids]
        h = counts.astype(np.float64)
        sizes = h.sum(axis=1)
        squares = np.einsum("ij,ij->i", h, h)
        inverse_classes = 1.0 / h.shape[1]
        betas = self.exponents(m)
        chosen = np.empty(m, dtype=np.int64)
        pooled = np.zeros(h.shape[1])
        pooled_size = 0.0
        # cross[j] = h_j . pooled, kept up to date as clients join (O(n C) a step); buffers reused.
        cross = np.zeros(ids.size)
        total, log_w = np.empty(ids.size), np.empty(ids.size)
        for k in range(m):
            if k == 0:
                log_w[:] = self.first_log_weights(state, ids, sizes, squares)
            else:
                # QCID(S + {j}) = (||pooled||^2 + 2 h_j.pooled + ||h_j||^2) / (N_S + n_j)^2 - 1/C
                np.add(sizes, pooled_size, out=total)
                np.multiply(total, total, out=total)
                np.multiply(cross, 2.0, out=log_w)
                log_w += squares
                log_w += pooled @ pooled
                log_w /= total
                log_w -= inverse_classes
                np.maximum(log_w, QCID_FLOOR, out=log_w)
                np.log(log_w, out=log_w)
                log_w *= -betas[k]
            log_w[chosen[:k]] = -np.inf
            pick = _draw_one(log_w, rng)
            chosen[k] = pick
            pooled += h[pick]
            pooled_size += sizes[pick]
            if k + 1 < m:  # einsum's own loop: a BLAS matrix-vector product spins threads for 4x the time
                cross += np.einsum("ij,j->i", h, h[pick])
        clients = ids[chosen]
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: FedCBSState, feedback: Feedback) -> FedCBSState:
        """Count the round's selected clients (``T_j``), and keep the availability the feedback carries."""
        selected = state.selected.copy()
        selected[np.unique(feedback.selection.clients)] += 1
        available = feedback_availability(feedback, state.available)
        return replace(state, selected=selected, available=available, round=state.round + 1)


def _draw_one(log_weights: FloatArray, rng: np.random.Generator) -> int:
    """One position drawn with probability ``∝ exp(log_weights)`` (``-inf``: never); overwrites them."""
    log_weights -= log_weights.max()
    np.exp(log_weights, out=log_weights)
    cumulative = np.cumsum(log_weights, out=log_weights)
    position = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(position, cumulative.size - 1)
