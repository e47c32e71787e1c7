"""FedSampling (paper 004), exactly: the law of the randomized answers to the size query (support
``1..M-1``, sizes clipped to ``M - 1``, the truthful share ``alpha``), the mean of the size estimate
with a band far narrower than the shift a half-unit error in the fake answers' mean causes, and the
keep rate that ``sample`` applies under the cumulative estimate.

Each statistical check uses a fixed seed and states its confidence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from fedsample import Federation, Feedback
from fedsample.samplers import FedSamplingSampler, estimate_total

# --- the answers' law ------------------------------------------------------------------------------

THRESHOLD = 10  # M: answers live in 1..9
ALPHA = 0.3
# Sizes below, at and above M - 1: a client of n >= M answers as one of M - 1 when truthful.
SIZE_TYPES = (1, 4, 9, 10, 57)
CLIENTS_PER_TYPE = 4_000
ROUNDS = 10  # 40000 answers per size type


def _answers_by_type() -> dict[int, np.ndarray]:
    """``ROUNDS`` rounds of answers of ``CLIENTS_PER_TYPE`` clients of each size type, pooled by type."""
    sizes = np.repeat(SIZE_TYPES, CLIENTS_PER_TYPE)
    sampler = FedSamplingSampler(probability=ALPHA, size_threshold=THRESHOLD)
    state = sampler.init(Federation.from_sizes(sizes), 1)
    rng = np.random.default_rng(2026)
    answers = np.stack([sampler.answers(state, rng) for _ in range(ROUNDS)])
    return {n: answers[:, sizes == n].ravel() for n in SIZE_TYPES}


def _law(size: int) -> np.ndarray:
    """P(answer = y) for y = 0..M: alpha on the clipped size, (1 - alpha) / (M - 1) on each of 1..M-1."""
    p = np.zeros(THRESHOLD + 1)
    p[1:THRESHOLD] = (1.0 - ALPHA) / (THRESHOLD - 1)
    p[min(size, THRESHOLD - 1)] += ALPHA
    return p


def test_answers_lie_in_one_to_m_minus_one_and_reach_both_ends() -> None:
    """No answer is 0 or M (fake answers are drawn from 1..M-1, sizes clipped to M - 1), and both ends
    occur (each end has probability at least (1 - alpha) / 9 = 0.078 per answer: missing one in
    40000 answers has probability below 1e-1400)."""
    for size, answers in _answers_by_type().items():
        assert answers.min() == 1, size
        assert answers.max() == THRESHOLD - 1, size


def test_answers_follow_the_randomized_response_law() -> None:
    """A chi-square goodness-of-fit test of the 40000 answers of each size type against the exact law
    (9 cells, 8 degrees of freedom), each at p > 1e-6: over the 5 types the false-failure rate is below
    5e-6. Clipping at M instead of M - 1 would put mass on the cell M (no expected count there), fake
    answers from 0..M-1 would put (1 - alpha) / M on 0, and a wrong truthful share moves the clipped
    size's cell by thousands of counts."""
    for size, answers in _answers_by_type().items():
        counts = np.bincount(answers, minlength=THRESHOLD + 1)
        assert counts.size == THRESHOLD + 1, f"an answer above M - 1 for size {size}"
        law = _law(size)
        assert counts[law == 0].sum() == 0, f"answers outside 1..M-1 for size {size}: {counts.tolist()}"
        cells = law > 0
        expected = answers.size * law[cells]
        statistic = float(np.sum((counts[cells] - expected) ** 2 / expected))
        p_value = float(chi2.sf(statistic, df=int(cells.sum()) - 1))
        assert p_value > 1e-6, f"size {size}: chi-square {statistic:.1f}, p = {p_value:.2e}, counts {counts.tolist()}"


def test_truthful_share_is_alpha_plus_the_fake_share() -> None:
    """P(answer = min(n, M - 1)) = alpha + (1 - alpha) / (M - 1) = 0.3778 for every size type, within
    4.5 standard errors of a proportion over 40000 answers (5 types: false-failure rate below 4e-5);
    the clients of 10 and 57 samples answer 9 as often as a client of 9 does."""
    target = ALPHA + (1.0 - ALPHA) / (THRESHOLD - 1)
    se = math.sqrt(target * (1.0 - target) / (CLIENTS_PER_TYPE * ROUNDS))
    for size, answers in _answers_by_type().items():
        share = float(np.mean(answers == min(size, THRESHOLD - 1)))
        assert abs(share - target) < 4.5 * se, (size, share, target)


# --- the estimate's mean, with a narrow band ---------------------------------------------------------


def test_estimate_mean_is_the_clipped_total_within_a_narrow_band() -> None:
    """The paper's setting (M = 300, eps = 3: alpha = 0.06) on 1000 clients, some holding M samples or
    more: over 20000 rounds the mean of N~ lies within 4 standard errors of sum_c min(n_c, M - 1)
    (two-sided false-failure rate 6e-5 under normality; the SE is the exact one, from the law of the
    answers). Fake answers whose mean is off by half a unit (drawn from 0..M-1, say) shift N~ by
    (1 - alpha) / alpha * |C| / 2 = 7833, which is about 24 standard errors (measured: SE 330): far outside the band."""
    rng = np.random.default_rng(404)
    sizes = rng.integers(1, 600, 1_000)
    assert np.any(sizes >= 300)
    sampler = FedSamplingSampler(epsilon=3.0)
    state = sampler.init(Federation.from_sizes(sizes), 10)
    alpha, m = state.response_probability, float(state.size_threshold)
    rounds = 20_000
    estimates = np.array(
        [estimate_total(sampler.answers(state, rng), alpha, state.size_threshold) for _ in range(rounds)]
    )
    clipped = np.minimum(sizes, state.size_threshold - 1).astype(np.float64)
    # Var[answer] = (1 - alpha) Var[U] + alpha (1 - alpha) (s - M/2)^2 with Var[U] = M (M - 2) / 12.
    answer_variance = (1.0 - alpha) * m * (m - 2.0) / 12.0 + alpha * (1.0 - alpha) * (clipped - m / 2.0) ** 2
    se = math.sqrt(float(answer_variance.sum()) / alpha**2 / rounds)
    half_unit_shift = (1.0 - alpha) / alpha * sizes.size / 2.0
    assert half_unit_shift > 20 * se  # the band below is a fifth of the shift, or less
    assert abs(estimates.mean() - clipped.sum()) < 4 * se
    assert abs(estimates.mean() - sizes.sum()) > 4 * se  # clipping: the mean is not N here


# --- the keep rate applied under the cumulative estimate ---------------------------------------------


@pytest.mark.parametrize("estimate", ["cumulative", "round"])
def test_sample_applies_k_over_the_mean_of_the_estimates_so_far(estimate: str) -> None:
    """Round t's data rate is min(1, K / mean(N~_0 .. N~_t)) under the cumulative estimate, this
    round's estimate included (min(1, K / N~_t) under the per-round one), with the mean clamped to
    [|C|, (M - 1) |C|]; the weights are k_c / K. Exact: the estimates are read from the selections."""
    rng = np.random.default_rng(8)
    sizes = rng.integers(1, 40, 200)
    sampler = FedSamplingSampler(probability=0.5, size_threshold=20, target_samples=50, estimate=estimate)  # type: ignore[arg-type]
    state = sampler.init(Federation.from_sizes(sizes), 5)
    seen: list[float] = []
    rates = []
    for t in range(30):
        selection = sampler.sample(state, rng)
        assert selection.clients.size > 0
        seen.append(float(selection.instructions["estimated_total"][0]))
        used = float(np.mean(seen)) if estimate == "cumulative" else seen[-1]
        clamped = min(max(used, sizes.size), 19 * sizes.size)
        assert sizes.size < used < 19 * sizes.size  # the clamp is not what this test checks
        expected = min(1.0, 50 / clamped)
        np.testing.assert_allclose(selection.instructions["data_rate"], expected, rtol=1e-12)
        np.testing.assert_allclose(selection.weights, selection.instructions["batch_size"] / 50, rtol=1e-12)
        rates.append(expected)
        ids, _ = selection.distinct()
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids))
    assert state.estimate_count == 30
    assert state.estimate_sum == pytest.approx(sum(seen), rel=1e-12)
    assert len(set(rates)) > 1  # the estimates vary, so the rates do
