"""FedSampling's size estimate N~: its exact mean and variance against Monte Carlo, and the
normalised aggregation option.

Each statistical check uses a fixed seed and states its confidence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsample import Federation, FedsampleError
from fedsample.samplers import FedSamplingSampler, estimate_moments, estimate_total

# Two clients hold M = 300 samples or more, so the estimate's mean is the clipped total, not N.
SIZES = np.array([3, 1, 7, 2, 12, 5, 1, 9, 4, 40, 299, 300, 1000])
ROUNDS = 40_000


def _mean_deviation(draws: np.ndarray, exact: float) -> float:
    """|sample mean - exact| in standard errors of the mean."""
    return abs(draws.mean() - exact) / (draws.std(ddof=1) / math.sqrt(draws.size))


def _variance_deviation(draws: np.ndarray, exact: float) -> float:
    """|sample variance - exact| in standard errors of a sample variance over R draws,
    ``sqrt((mu_4 - mu_2^2 (R - 3) / (R - 1)) / R)`` with the plug-in central moments."""
    d = draws - draws.mean()
    mu2, mu4, rounds = float(np.mean(d**2)), float(np.mean(d**4)), draws.size
    stderr = math.sqrt((mu4 - mu2 * mu2 * (rounds - 3) / (rounds - 1)) / rounds)
    return abs(float(draws.var(ddof=1)) - exact) / stderr


def _estimates(sampler: FedSamplingSampler, seed: int) -> tuple[np.ndarray, float]:
    state = sampler.init(Federation.from_sizes(SIZES), 1)
    rng = np.random.default_rng(seed)
    draws = np.array(
        [
            estimate_total(sampler.answers(state, rng), state.response_probability, state.size_threshold)
            for _ in range(ROUNDS)
        ]
    )
    return draws, state.response_probability


@pytest.mark.parametrize(
    ("sampler", "seed"),
    [
        (FedSamplingSampler(epsilon=3.0), 1),  # the paper's M = 300, eps = 3: alpha = 0.06
        (FedSamplingSampler(epsilon=10.0), 2),  # alpha = 0.987: the truthful answers' spread dominates
        (FedSamplingSampler(probability=0.4, size_threshold=20), 3),  # most clients clipped to 19
    ],
)
def test_estimate_mean_and_variance_are_exact(sampler: FedSamplingSampler, seed: int) -> None:
    """Over 40000 rounds the sample mean and sample variance of N~ lie within 4.5 standard errors of
    estimate_moments (the variance's SE is the exact finite-sample one with plug-in moments); over the
    6 checks the false-failure rate is below 1e-4 under normality of the two estimators."""
    draws, alpha = _estimates(sampler, seed)
    mean, variance = estimate_moments(SIZES, alpha, sampler.size_threshold)
    assert mean == float(np.minimum(SIZES, sampler.size_threshold - 1).sum())
    assert mean < SIZES.sum()  # clipping: E[N~] = N fails when a client holds M or more samples
    assert _mean_deviation(draws, mean) < 4.5
    assert _variance_deviation(draws, variance) < 4.5


def test_the_uniform_answers_alone_underestimate_the_variance() -> None:
    """The approximation |C| (1 - alpha) M^2 / (12 alpha^2), which leaves out the truthful answers'
    spread, is rejected by the same Monte Carlo at eps = 10 (its sd is about half the exact one), and
    is about 8% low in sd at eps = 3 for clients much smaller than M."""
    draws, alpha = _estimates(FedSamplingSampler(epsilon=10.0), 2)
    approximate = SIZES.size * (1 - alpha) * 300**2 / (12 * alpha**2)
    assert _variance_deviation(draws, approximate) > 20
    small = np.full(10_000, 2)
    alpha3 = FedSamplingSampler(epsilon=3.0).init(Federation.from_sizes(small), 1).response_probability
    exact = estimate_moments(small, alpha3, 300)[1]
    ratio = math.sqrt(small.size * (1 - alpha3) * 300**2 / (12 * alpha3**2) / exact)
    assert 0.90 < ratio < 0.94


def test_truthful_answers_give_the_clipped_total_exactly() -> None:
    assert estimate_moments(SIZES, 1.0, 300) == (float(np.minimum(SIZES, 299).sum()), 0.0)
    assert estimate_moments(SIZES, 1.0, 2000) == (float(SIZES.sum()), 0.0)  # M above every client: N~ = N


def test_normalized_weights_are_kept_counts_over_their_sum() -> None:
    """normalize=True: w_c = k_c / sum_j k_j (the weights sum to one whatever N~ is); the kept counts
    and the rate are those of the unnormalised sampler on the same generator."""
    federation = Federation.from_sizes(SIZES)
    plain, normalized = FedSamplingSampler(epsilon=3.0), FedSamplingSampler(epsilon=3.0, normalize=True)
    for seed in range(5):
        a = plain.sample(plain.init(federation, 2), np.random.default_rng(seed))
        b = normalized.sample(normalized.init(federation, 2), np.random.default_rng(seed))
        np.testing.assert_array_equal(a.clients, b.clients)
        np.testing.assert_array_equal(a.instructions["batch_size"], b.instructions["batch_size"])
        kept = b.instructions["batch_size"]
        np.testing.assert_allclose(b.weights, kept / kept.sum(), rtol=1e-15)
        assert b.weights.sum() == pytest.approx(1.0, rel=1e-12)
    design = normalized.design(normalized.init(federation, 2))
    assert design.aggregation == "weighted"


def test_normalize_must_be_a_bool() -> None:
    with pytest.raises(FedsampleError, match="normalize"):
        FedSamplingSampler(normalize="yes")  # type: ignore[arg-type]
