"""Exact and Monte-Carlo statistics of aggregation weights (DESIGN.md, layer 2)."""

from fedsample.designs.exact import ExactStatistics, design_moments, exact_statistics, weight_covariance
from fedsample.stats.agreement import adjusted_rand_index
from fedsample.stats.compare import Comparison, compare_samplers, comparison_to_json, format_comparison
from fedsample.stats.montecarlo import (
    BiasEstimate,
    Estimate,
    MonteCarloStatistics,
    monte_carlo_bias,
    monte_carlo_statistics,
)
from fedsample.stats.participation import ParticipationStatistics, PolicyStatistics, participation_statistics

__all__ = [
    "BiasEstimate",
    "Comparison",
    "Estimate",
    "ExactStatistics",
    "MonteCarloStatistics",
    "ParticipationStatistics",
    "PolicyStatistics",
    "adjusted_rand_index",
    "compare_samplers",
    "comparison_to_json",
    "design_moments",
    "exact_statistics",
    "format_comparison",
    "monte_carlo_bias",
    "monte_carlo_statistics",
    "participation_statistics",
    "weight_covariance",
]
