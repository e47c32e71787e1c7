"""Participation: who can be selected, who returns, and how a round's weights are settled.

- :mod:`~fedsample.participation.availability`: availability models (always, Bernoulli, traces)
  and dropout;
- :mod:`~fedsample.participation.processes`: availability with memory across rounds (Markov chains,
  periodic windows) and FedAU's label-correlated rates;
- :mod:`~fedsample.participation.policies`: the weight-correction policies for clients that do not
  return, the return-rate estimator, and the policies for unknown participation rates (FedAU's
  interval estimator; MIFA's and FedVARP's remembered updates);
- :mod:`~fedsample.participation.procedure`: the round procedure shared by the engine, the statistics
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
from fedsample.participation.estimators import IntervalEstimator, ReturnRateEstimator
from fedsample.participation.policies import (
    AGGREGATION_POLICIES,
    MEMORY_POLICIES,
    POLICIES,
    POLICY_CLASSES,
    UNKNOWN_PARTICIPATION_POLICIES,
    AggregationPolicy,
    Policy,
    build_policy,
    correct_weights,
)
from fedsample.participation.procedure import (
    FAILURE_COUNTS,
    Selected,
    Settled,
    select_participants,
    settle_participants,
)
from fedsample.participation.processes import CyclicAvailability, MarkovAvailability, label_correlated_rates
from fedsample.participation.setting import Participation

__all__ = [
    "AGGREGATION_POLICIES",
    "FAILURE_COUNTS",
    "MEMORY_POLICIES",
    "POLICIES",
    "POLICY_CLASSES",
    "UNKNOWN_PARTICIPATION_POLICIES",
    "AggregationPolicy",
    "AlwaysAvailable",
    "Availability",
    "BernoulliAvailability",
    "CyclicAvailability",
    "Dropout",
    "IntervalEstimator",
    "MarkovAvailability",
    "Participation",
    "Policy",
    "ReturnRateEstimator",
    "Selected",
    "Settled",
    "TraceAvailability",
    "build_policy",
    "correct_weights",
    "hashed_uniforms",
    "label_correlated_rates",
    "load_availability_trace",
    "select_participants",
    "settle_participants",
]
