"""Side-by-side comparison of samplers (the engine of `fedsample stats`)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, MDSampler, PoissonSampler, SizeClusteredSampler, compare_samplers
from fedsample.stats import comparison_to_json, format_comparison


def test_compare_samplers_raises_on_infeasible_sampler_by_default() -> None:
    federation = Federation.from_sizes([100, 1, 1, 1])
    with pytest.raises(FedsampleError, match="'num_sampled'"):
        compare_samplers(federation, 2, [MDSampler(), PoissonSampler()])


def test_compare_samplers_can_skip_infeasible_samplers() -> None:
    """skip_infeasible lists the rejected sampler with its reason and keeps the others."""
    federation = Federation.from_sizes([100, 1, 1, 1])
    comparison = compare_samplers(federation, 2, [MDSampler(), PoissonSampler()], skip_infeasible=True)
    assert list(comparison.exact) == ["md"]
    assert "num_sampled" in comparison.skipped["poisson"]
    assert "poisson skipped" in format_comparison(comparison)
    assert "skipped" in comparison_to_json(comparison)


def test_compare_samplers_raises_when_every_sampler_is_infeasible() -> None:
    with pytest.raises(FedsampleError):
        compare_samplers(Federation.from_sizes([100, 1]), 2, [PoissonSampler()], skip_infeasible=True)


def test_format_comparison_marks_effective_alpha() -> None:
    """Clustered sampling has no alpha: the table shows 003's eq. 24 in parentheses, with a note."""
    federation = Federation.from_sizes([5, 1, 3, 8])
    comparison = compare_samplers(
        federation, 2, [MDSampler(), SizeClusteredSampler()], monte_carlo_rounds=200, rng=np.random.default_rng(0)
    )
    text = format_comparison(comparison)
    assert "alpha in parentheses" in text
    assert "Monte Carlo check" in text
    payload = comparison_to_json(comparison)
    assert payload["samplers"]["clustered-size"]["alpha"] is None
    assert payload["samplers"]["md"]["monte_carlo"]["num_rounds"] == 200
