"""Local differential privacy of FedSampling's size query (paper 004, Section 3.3 and Lemma 3.2).

Each client answers the server's size query by randomized response. With probability ``alpha``
it reports its true size clipped to ``M - 1``; otherwise it reports an integer drawn uniformly
from ``1..M-1``. For reports ``y`` and true sizes ``n``,
``P(y | n) = alpha 1{y = n} + (1 - alpha) / (M - 1)``. The worst-case likelihood ratio over two
sizes and a report is ``((M - 2) alpha + 1) / (1 - alpha)``, so the mechanism is
``epsilon``-LDP with ``epsilon = ln(((M - 2) alpha + 1) / (1 - alpha))``. Conversely,
``alpha = (e^epsilon - 1) / (e^epsilon + M - 2)`` (eq. 21).

Over ``T`` rounds the same client answers ``T`` times. Under basic sequential composition the
total budget is ``T epsilon``. Paper 004 claims ``epsilon`` for the whole training, provided the
server cannot link a client's answers across rounds (client anonymity). That is an assumption
about the deployment, not a property of the mechanism, and :class:`PrivacyReport` states it as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Interval, check_param

# Above this, math.exp overflows (its limit is log(max float) = 709.78); inf is above it too.
_EXP_LIMIT = 700.0

__all__ = [
    "PrivacyReport",
    "epsilon_of",
    "randomized_response_matrix",
    "response_probability",
]


def response_probability(epsilon: float, size_threshold: int) -> float:
    """``alpha = (e^eps - 1) / (e^eps + M - 2)``: the truth probability that gives ``epsilon``-LDP (004, eq. 21).

    >>> round(response_probability(3.0, 300), 6)
    0.060001
    """
    check_param("epsilon", "response_probability", epsilon, Interval(float, 0, None, closed="left"))
    check_param("size_threshold", "response_probability", size_threshold, Interval(int, 3, None, closed="left"))
    if epsilon > _EXP_LIMIT:  # e^eps overflows a float: the same ratio over e^-eps, which cannot
        r = math.exp(-epsilon)  # (kept for large eps only, so that every smaller eps gives the same bits)
        return (1.0 - r) / (1.0 + (size_threshold - 2.0) * r)
    e = math.exp(epsilon)
    return (e - 1.0) / (e + size_threshold - 2.0)


def epsilon_of(probability: float, size_threshold: int) -> float:
    """The LDP budget of randomized response with truth probability ``alpha`` (004, eq. 20)."""
    check_param("probability", "epsilon_of", probability, Interval(float, 0, 1, closed="both"))
    check_param("size_threshold", "epsilon_of", size_threshold, Interval(int, 3, None, closed="left"))
    if probability >= 1.0:
        return math.inf
    return math.log(((size_threshold - 2) * probability + 1.0) / (1.0 - probability))


def randomized_response_matrix(probability: float, size_threshold: int) -> FloatArray:
    """``P[y - 1, n - 1]``: the probability of report ``y`` for true (clipped) size ``n``, both in ``1..M-1``."""
    values = size_threshold - 1
    matrix = np.full((values, values), (1.0 - probability) / values)
    matrix[np.diag_indices(values)] += probability
    return matrix


@dataclass(frozen=True)
class PrivacyReport:
    """Privacy accounting of the size queries of a run.

    ``epsilon_per_round`` is the LDP budget of one answer. ``basic_composition`` is the budget
    after ``rounds`` answers by the same client (sequential composition). ``delinked`` is the
    budget paper 004 claims for the whole training, which holds *only under the assumption*
    that answers cannot be linked to a client across rounds.
    """

    epsilon_per_round: float
    rounds: int
    size_threshold: int
    response_probability: float

    @property
    def basic_composition(self) -> float:
        return 0.0 if self.rounds == 0 else self.rounds * self.epsilon_per_round

    @property
    def delinked(self) -> float:
        return self.epsilon_per_round

    @property
    def private(self) -> bool:
        """False when answers are always truthful (``alpha = 1``): no finite budget holds."""
        return math.isfinite(self.epsilon_per_round)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready accounting; an infinite budget (no privacy) is written as ``null``."""

        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        return {
            "mechanism": "randomized response on the clipped client size (paper 004, eq. 1)",
            "private": self.private,
            "size_threshold": self.size_threshold,
            "response_probability": self.response_probability,
            "epsilon_per_round": finite(self.epsilon_per_round),
            "rounds": self.rounds,
            "epsilon_basic_composition": finite(self.basic_composition),
            "epsilon_if_delinked": finite(self.delinked),
            "delinked_assumption": "answers of a client cannot be linked across rounds (client anonymity)",
        }
