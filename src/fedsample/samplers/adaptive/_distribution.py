"""Samplers that learn a distribution ``p`` over clients from bandit feedback (paper 001's setting).

A round draws ``K`` clients from ``p`` (``K`` is ``num_sampled``). The aggregate
``sum_m lambda_m c_m g_m`` estimates ``sum_m lambda_m g_m`` without bias, with ``lambda`` the
importances and ``c_m`` a per-client coefficient:

* **with replacement** (``replace=True``): ``K`` i.i.d. draws; a client drawn ``N_m`` times gets
  ``c_m = N_m / (K p_m)``. The aggregation weight ``lambda_m / (K p_m)`` per draw is paper 001's.
* **without replacement** (``replace=False``): successive draws from ``p`` renormalised over the
  clients not yet drawn. Des Raj's ordered estimator gives the client drawn ``k``-th, after
  clients of total probability ``S_{k-1}``, ``c = ((1 - S_{k-1}) / p_m + (K - k)) / K``
  (:class:`~fedsample.designs.SuccessiveDesign`).

Either way ``E[c_m 1{m drawn}] = 1``, and the weight the selection carries is ``lambda_m c_m``.
Learning samplers therefore read ``c_m`` back from the selection. The feedback is paper 001's
``a_m = lambda_m^2 ||g_m||^2``, where ``g_m`` is:

* ``feedback="update"`` (default): the client's update scaled to a gradient,
  ``||theta_m - theta|| / (eta_l sqrt(N))``. Paper 001 uses this for FedAvg; with one local
  step it is the stochastic gradient itself (mini-batch SGD);
* ``feedback="gradient"``: the norm of the mean mini-batch gradient at ``theta`` on the client's
  first batch.

A client whose feedback is NaN or infinite counts as one that did not return.

The unbiased estimate of the gradient of the variance loss ``l(p) = (1/K) sum_m a_m / p_m`` is
then ``-a_m c_m / (K p_m^2)`` on the clients that returned, and zero elsewhere.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Boolean, Constraint, Interval, Options
from fedsample.designs import RowDesign, SuccessiveDesign
from fedsample.errors import FedsampleError
from fedsample.samplers._base import Sampler, StateT
from fedsample.samplers._feedback import Feedback

__all__ = [
    "FEEDBACK_BOUND_RANGE",
    "MAX_STEP",
    "DistributionSampler",
    "distribution_design",
    "observed_feedback",
    "step_size",
]

# The largest learning rate or step of the samplers that learn from the variance loss (OSMD's eta,
# MABS's delta, Adaptive-OSMD's gamma). A step moves a returned client's log-weight by
# step * a_m c_m / (K p_m^2): at 1e12 any feedback above 1e-9 already moves it beyond exp's range
# (about 700), that is, puts all the learnable mass on the returned clients; a larger step only
# overflows (1e308 turned the distribution into NaN). The updates keep that limit when a step does.
MAX_STEP = 1e12
# The range of a known bound on the feedback a_m (Adaptive-OSMD's a_max): the learning rates are
# about K^2 / (M^3 a_max), finite for every a_max in it (1e-320 made them infinite).
FEEDBACK_BOUND_RANGE = Interval(float, 1e-150, 1e150, closed="both")


def distribution_design(
    probabilities: FloatArray, importances: FloatArray, num_sampled: int, *, replace: bool
) -> RowDesign | SuccessiveDesign:
    """The design of ``K`` draws from ``p`` with the importance weights above."""
    n = probabilities.size
    if not replace:
        return SuccessiveDesign(probabilities=probabilities, num_sampled=num_sampled, importances=importances)
    return RowDesign.from_probabilities(
        num_clients=n,
        indptr=np.array([0, n], dtype=np.int64),
        indices=np.arange(n, dtype=np.int64),
        probabilities=probabilities,
        row_counts=np.array([num_sampled], dtype=np.int64),
        # lambda_m / (K p_m) per draw; a client with p_m = 0 is never drawn (weight 0).
        draw_weights=np.divide(importances, num_sampled * probabilities, out=np.zeros(n), where=probabilities > 0),
    )


def observed_feedback(
    feedback: Feedback, importances: FloatArray, *, kind: str
) -> tuple[IntArray, FloatArray, FloatArray]:
    """``(clients, a, c)`` for the clients that returned: the feedback ``a_m`` and the coefficient ``c_m``."""
    clients = np.asarray(feedback.clients, dtype=np.int64)
    if clients.size == 0:
        return clients, np.zeros(0), np.zeros(0)
    lam = importances[clients]
    if kind == "gradient":
        if feedback.gradient_norms is None:
            raise FedsampleError(
                "The 'feedback' parameter of the sampler is 'gradient', which needs Feedback.gradient_norms. "
                "Got None instead.",
                parameter="feedback",
            )
        scale = np.asarray(feedback.gradient_norms, dtype=np.float64)
    elif kind == "loss":
        if feedback.losses is None:
            raise FedsampleError(
                "The 'feedback' parameter of the sampler is 'loss', which needs Feedback.losses. Got None instead.",
                parameter="feedback",
            )
        scale = np.asarray(feedback.losses, dtype=np.float64)
    else:
        if feedback.update_norms is None:
            raise FedsampleError(
                "The 'feedback' parameter of the sampler is 'update', which needs Feedback.update_norms. "
                "Got None instead.",
                parameter="feedback",
            )
        lr = feedback.local_lr if feedback.local_lr else 1.0
        steps = feedback.local_steps if feedback.local_steps else 1
        scale = np.asarray(feedback.update_norms, dtype=np.float64) / (lr * np.sqrt(steps))
    with np.errstate(over="ignore"):  # an overflow gives inf, dropped below
        a = lam * lam * scale * scale
    # A client whose result is NaN or infinite (diverged training) told us nothing: treat it like
    # one that did not return, rather than spreading NaN through the distribution.
    finite = np.isfinite(a)
    if not finite.all():
        clients, a = clients[finite], a[finite]
    ids, summed = feedback.selection.distinct()
    position = np.searchsorted(ids, clients)
    found = (position < ids.size) & (ids[np.minimum(position, ids.size - 1)] == clients)
    c = np.where(found, summed[np.minimum(position, ids.size - 1)], 0.0) / importances[clients]
    return clients, a, c


@dataclass(frozen=True, kw_only=True)
class DistributionSampler(Sampler[StateT]):
    """Base of the samplers that draw ``K`` clients from a learned distribution (see the module doc)."""

    replace: bool = True
    feedback: Literal["update", "gradient"] = "update"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "replace": Boolean(),
        "feedback": Options(("update", "gradient")),
    }

    @abstractmethod
    def probabilities(self, state: StateT) -> FloatArray:
        """The distribution ``p`` the next round draws from."""

    def design(self, state: StateT) -> RowDesign | SuccessiveDesign:
        p = self.probabilities(state)
        return distribution_design(p, self.importances(state), self._num_sampled(state), replace=self.replace)

    def _num_sampled(self, state: StateT) -> int:
        return int(state.num_sampled)  # type: ignore[attr-defined]

    def _check_k(self, num_sampled: object, num_clients: int) -> int:
        return self._check_num_sampled(num_sampled, upper=None if self.replace else num_clients)

    def _observed(self, state: StateT, feedback: Feedback) -> tuple[IntArray, FloatArray, FloatArray]:
        return observed_feedback(feedback, self.importances(state), kind=self.feedback)


def positive_float(closed: str = "neither") -> Interval:
    # A finite bound, so that inf is rejected: an infinite step or rate turns the distribution into NaN.
    return Interval(float, 0, math.inf, closed=closed)


def step_size() -> Interval:
    """A learning rate or step: a float in ``(0, MAX_STEP]``."""
    return Interval(float, 0, MAX_STEP, closed="right")


def unit_interval(closed: str = "right") -> Interval:
    return Interval(float, 0, 1, closed=closed)


def merge_constraints(*tables: dict[str, Any]) -> dict[str, Constraint]:
    out: dict[str, Constraint] = {}
    for table in tables:
        out.update(table)
    return out
