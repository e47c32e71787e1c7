"""Participation: who can be selected, who returns, and how a round's weights are settled.

- :mod:`~fedsample.participation.availability`: availability models (always, Bernoulli, traces)
  and dropout;
- :mod:`~fedsample.participation.policies`: the weight-correction policies for clients that do not
  return, and the return-rate estimator;
- :mod:`~fedsample.participation.rounds`: the round procedure shared by the engine, the statistics
  and the Flower strategy (``select_participants`` then ``settle_participants``).
"""

from fedsample.participation.availability import (
    AlwaysAvailable,
    Availability,
    BernoulliAvailability,
    Dropout,
    TraceAvailability,
    hashed_uniforms,
    load_availability_trace,
)
from fedsample.participation.policies import (
    AGGREGATION_POLICIES,
    AggregationPolicy,
    ReturnRateEstimator,
    correct_weights,
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
