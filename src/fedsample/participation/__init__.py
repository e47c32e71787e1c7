"""Participation: who can be selected, who returns, and how a round's weights are settled.

- :mod:`~fedsample.participation.availability`: availability models (always, Bernoulli, traces),
  dropout, and the weight-correction policies for clients that do not return;
- :mod:`~fedsample.participation.rounds`: the round procedure shared by the engine, the statistics
  and the Flower strategy (``select_participants`` then ``settle_participants``).
"""

from fedsample.participation.availability import (
    AGGREGATION_POLICIES,
    AggregationPolicy,
    AlwaysAvailable,
    Availability,
    BernoulliAvailability,
    Dropout,
    ReturnRateEstimator,
    TraceAvailability,
    correct_weights,
    hashed_uniforms,
    load_availability_trace,
)
from fedsample.participation.rounds import (
    FAILURE_COUNTS,
    Participation,
    Selected,
    Settled,
    select_participants,
    settle_participants,
)

__all__ = [
    "AGGREGATION_POLICIES",
    "FAILURE_COUNTS",
    "AggregationPolicy",
    "AlwaysAvailable",
    "Availability",
    "BernoulliAvailability",
    "Dropout",
    "Participation",
    "ReturnRateEstimator",
    "Selected",
    "Settled",
    "TraceAvailability",
    "correct_weights",
    "hashed_uniforms",
    "load_availability_trace",
    "select_participants",
    "settle_participants",
]
