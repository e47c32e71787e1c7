"""FedSampling (paper 004): the private size estimate, the keep rate, the weights, the privacy budget.

Statistical checks use fixed seeds; each states its confidence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, exact_statistics
from fedsample.designs import DataLevelDesign
from fedsample.samplers import FedSamplingSampler, FixedRateSampler, estimate_total
from fedsample.samplers.schemes.fedsampling_ldp import (
    PrivacyReport,
    epsilon_of,
    randomized_response_matrix,
    response_probability,
)

SIZES = np.array([3, 1, 7, 2, 12, 5, 1, 9, 4, 40])


def _federation() -> Federation:
    return Federation.from_sizes(SIZES)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("threshold", [3, 10, 300])
def test_randomized_response_has_exactly_the_budget(epsilon: float, threshold: int) -> None:
    """With alpha = (e^eps - 1) / (e^eps + M - 2) (004, eq. 21), the worst-case likelihood ratio
    P(y | n) / P(y | n') over all reports y and true sizes n, n' in 1..M-1 is exactly e^eps: every
    pair is enumerated."""
    alpha = response_probability(epsilon, threshold)
    matrix = randomized_response_matrix(alpha, threshold)  # rows: reports y, columns: sizes n
    np.testing.assert_allclose(matrix.sum(axis=0), 1.0, rtol=1e-12)
    worst = max(float((row[:, None] / row[None, :]).max()) for row in matrix)
    assert worst == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert epsilon_of(alpha, threshold) == pytest.approx(epsilon, rel=1e-12)


@pytest.mark.parametrize("threshold", [3, 300, 10**12])
def test_a_budget_past_exp_overflow_gives_a_truth_probability(threshold: int) -> None:
    """e^eps overflows a float beyond eps = 709.78 (issue 32): the probability is still the ratio, which
    tends to 1, and is continuous across the switch to its form over e^-eps."""
    below, above = response_probability(699.999, threshold), response_probability(700.001, threshold)
    assert below == pytest.approx(above, rel=1e-12)
    for epsilon in (709.79, 1e4, 1e308, math.inf):
        assert response_probability(epsilon, threshold) == 1.0


def test_estimate_of_the_total_is_unbiased() -> None:
    """E[N~] = N (004, eqs. 5-7): the mean of 40000 rounds of estimates is within 4 standard errors
    of the true total (two-sided false-failure probability about 6e-5 under normality)."""
    federation = _federation()
    sampler = FedSamplingSampler()  # M = 300, eps = 3: alpha = 0.06, so the estimate is very noisy
    state = sampler.init(federation, 3)
    rng = np.random.default_rng(11)
    estimates = np.array(
        [estimate_total(sampler.answers(state, rng), state.response_probability, 300) for _ in range(40_000)]
    )
    error = abs(estimates.mean() - SIZES.sum())
    assert error < 4 * estimates.std(ddof=1) / math.sqrt(estimates.size)
    # and the noise is as large as the variance of randomized response predicts
    assert estimates.std() > 100 * SIZES.sum() / 10


def test_each_sample_is_kept_with_probability_k_over_n() -> None:
    """With truthful answers (alpha = 1) the rate is K / N, so a client keeps n_i K / N samples on
    average: the mean kept count of every client over 20000 rounds is within 4 standard errors
    (10 clients: family-wise false-failure bound about 6e-4)."""
    federation = _federation()
    sampler = FedSamplingSampler(probability=1.0, target_samples=20)
    state = sampler.init(federation, 3)
    rng = np.random.default_rng(3)
    kept = np.zeros((20_000, SIZES.size))
    for t in range(20_000):
        selection = sampler.sample(state, rng)
        kept[t, selection.clients] = selection.instructions["batch_size"]
    rate = 20 / SIZES.sum()
    expected = SIZES * rate
    se = np.sqrt(SIZES * rate * (1 - rate) / kept.shape[0])
    assert np.all(np.abs(kept.mean(axis=0) - expected) < 4 * se)


def test_selection_carries_the_client_instructions_and_weights() -> None:
    """Weights are k_i / K, the batch-size instruction is k_i, and the rate is the same for all."""
    sampler = FedSamplingSampler(probability=1.0, target_samples=20)
    state = sampler.init(_federation(), 3)
    selection = sampler.sample(state, np.random.default_rng(0))
    kept = selection.instructions["batch_size"]
    assert np.all(kept >= 1)
    np.testing.assert_allclose(selection.weights, kept / 20)
    np.testing.assert_allclose(selection.instructions["data_rate"], 20 / SIZES.sum())
    assert np.all(kept <= SIZES[selection.clients])


def test_design_statistics_are_exact_and_unbiased() -> None:
    """E[w_i] = n_i r / K = p_i when r = K / N; Var[w_i] = n_i r (1 - r) / K^2; P(i in S) = 1 - (1 - r)^n_i."""
    federation = _federation()
    sampler = FedSamplingSampler(probability=1.0, target_samples=20)
    state = sampler.init(federation, 3)
    stats = exact_statistics(sampler.design(state), federation.importances)
    r = 20 / SIZES.sum()
    np.testing.assert_allclose(stats.mean_weights, federation.importances, rtol=1e-12)
    np.testing.assert_allclose(stats.var_weights, SIZES * r * (1 - r) / 400, rtol=1e-12)
    np.testing.assert_allclose(stats.p_included, 1 - (1 - r) ** SIZES, rtol=1e-12)
    assert not stats.biased


def test_target_above_the_total_caps_the_rate_and_keeps_an_average() -> None:
    """K > N: every sample is kept and the divisor is N, so the weights sum to one (unbiased)."""
    sampler = FedSamplingSampler(probability=1.0, target_samples=10 * int(SIZES.sum()))
    state = sampler.init(_federation(), 3)
    selection = sampler.sample(state, np.random.default_rng(0))
    assert selection.clients.tolist() == list(range(SIZES.size))
    np.testing.assert_allclose(selection.weights.sum(), 1.0)


def test_estimate_below_the_number_of_clients_is_clamped() -> None:
    """An estimate below |C| (even negative) is clamped to |C|: the rate never exceeds K / |C|."""
    sampler = FedSamplingSampler()
    state = sampler.init(_federation(), 3)
    rate, divisor = sampler.rate(-1e6, state)
    assert rate == pytest.approx(min(1.0, state.target / SIZES.size))
    assert divisor == pytest.approx(rate * SIZES.size)
    high_rate, _ = sampler.rate(1e12, state)
    assert high_rate == pytest.approx(state.target / (299 * SIZES.size))


def test_cumulative_estimate_averages_the_rounds() -> None:
    """estimate='cumulative' divides the estimate's variance by the rounds: after 400 rounds the
    estimate in use is far closer to N than single-round estimates are."""
    federation = _federation()
    rng = np.random.default_rng(5)
    sampler = FedSamplingSampler(estimate="cumulative")
    state = sampler.init(federation, 3)
    from fedsample import Feedback

    for t in range(400):
        selection = sampler.sample(state, rng)
        ids, _ = selection.distinct()
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids))
    running = state.estimate_sum / state.estimate_count
    single = estimate_total(sampler.answers(state, rng), state.response_probability, 300)
    assert state.estimate_count == 400
    per_round_sd = math.sqrt(SIZES.size * (299**2 - 1) / 12) / state.response_probability
    assert abs(running - SIZES.sum()) < 4 * per_round_sd / math.sqrt(400)
    assert np.isfinite(single)


def test_privacy_report_composes_over_rounds() -> None:
    """Basic composition after T queries is T eps; the de-linked claim is eps, stated as an assumption."""
    sampler = FedSamplingSampler(epsilon=3.0)
    state = sampler.init(_federation(), 3)
    report = sampler.privacy(state)
    assert isinstance(report, PrivacyReport)
    assert report.epsilon_per_round == pytest.approx(3.0)
    assert report.rounds == 0
    from fedsample import Feedback

    rng = np.random.default_rng(0)
    for t in range(7):
        selection = sampler.sample(state, rng)
        ids, _ = selection.distinct()
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids))
    report = sampler.privacy(state)
    assert report.basic_composition == pytest.approx(21.0)
    assert report.delinked == pytest.approx(3.0)
    assert "assumption" in str(report.to_dict())


def test_fedsampling_needs_data_weighted_importances() -> None:
    """Data-level sampling optimises p_i = n_i / M only: importance 'uniform' with unequal sizes is rejected."""
    with pytest.raises(FedsampleError) as info:
        FedSamplingSampler().init(Federation.from_sizes(SIZES, importance="uniform"), 3)
    assert info.value.parameter == "federation"
    FedSamplingSampler().init(Federation.from_sizes([4, 4, 4], importance="uniform"), 2)  # equal sizes: fine


@pytest.mark.parametrize(("aggregation", "expected"), [("weighted", "kept / total"), ("average", "1 / count")])
def test_naive_variants(aggregation: str, expected: str) -> None:
    """004's naive variants: a fixed rate; weights proportional to the kept counts, or equal."""
    sampler = FixedRateSampler(rate=0.5, aggregation=aggregation)  # type: ignore[arg-type]
    state = sampler.init(_federation(), 3)
    selection = sampler.sample(state, np.random.default_rng(2))
    kept = selection.instructions["batch_size"]
    np.testing.assert_allclose(selection.weights.sum(), 1.0)
    if aggregation == "weighted":
        np.testing.assert_allclose(selection.weights, kept / kept.sum())
    else:
        np.testing.assert_allclose(selection.weights, 1.0 / kept.size)
    np.testing.assert_allclose(selection.instructions["data_rate"], 0.5)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"size_threshold": 2}, "size_threshold"),
        ({"probability": 0.0}, "probability"),
        ({"target_samples": 0}, "target_samples"),
        ({"estimate": "always"}, "estimate"),
    ],
)
def test_bad_hyperparameters(kwargs: dict[str, object], parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        FedSamplingSampler(**kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == parameter


def test_data_level_design_draws_binomial_counts() -> None:
    """k_i ~ Binomial(n_i, r): the mean count of each client over 20000 draws is within 4 standard errors."""
    design = DataLevelDesign(sizes=SIZES, rate=0.3, divisor=10.0)
    rng = np.random.default_rng(9)
    totals = np.zeros(SIZES.size)
    for _ in range(20_000):
        clients, kept = design.draw_counts(rng)
        totals[clients] += kept
    se = np.sqrt(SIZES * 0.3 * 0.7 / 20_000)
    assert np.all(np.abs(totals / 20_000 - SIZES * 0.3) < 4 * se)
