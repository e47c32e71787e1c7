"""OSMD and Adaptive-OSMD (paper 001: Zhao et al., JMLR 2025; Algorithms 1, 2 and 5).

* One OSMD step is the exponentiated mirror step ``p~_m = p_m exp(eta a_m N_m / (K^2 p_m^3))`` on
  the returned clients followed by the KL projection onto ``A = {sum p = 1, p >= alpha / M}``.
* On a stationary problem (the same ``a`` every round) the variance loss
  ``l(p) = (1/K) sum_m a_m / p_m`` is minimised over ``A`` by ``p*_m = max(alpha/M, c sqrt(a_m))``,
  the projection of ``sqrt(a)``. OSMD with a suitable fixed ``eta``, and Adaptive-OSMD with no
  learning rate at all, move toward ``p*``, lose less than uniform sampling, and never let a
  client (sampled or not) fall below ``alpha / M``. Checked with and without replacement.
* Adaptive-OSMD: ``E = ceil(0.5 log2(1 + 4 (T-1) ln(M/alpha) / ln M)) + 1`` experts, prior
  weights ``(1 + 1/E) / (e (e+1))``, rates ``2^(e-1) eta_min``, meta rate
  ``gamma = (alpha/M) sqrt(8K / (T a_max))``, exponentially weighted meta weights, the doubling
  trick for an unknown horizon, and a running ``a_max``.

The stationary runs use fixed seeds; their thresholds leave a margin of at least 1.5x over what
six other seeds gave.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from stationary_problem import (
    ALPHA,
    NUM_CLIENTS,
    NUM_SAMPLED,
    REPLACE,
    ROUNDS,
    STATIONARY,
    A,
    check_floor,
    optimum,
    total_variation,
    variance_loss,
)

from fedsample import Federation, Selection
from fedsample.samplers import (
    AdaptiveOSMDSampler,
    AdaptiveOSMDState,
    AvareSampler,
    MABSSampler,
    OSMDSampler,
    UniformISSampler,
    VRBSampler,
    project_truncated_simplex,
)
from fedsample.samplers.adaptive._distribution import observed_feedback
from fedsample.samplers.adaptive.osmd import num_experts
from sampler_cases import client_norms, stationary_run, synthetic_feedback


def check_learns_the_optimum(history: np.ndarray, *, final_tv: float, loss_ratio: float) -> None:
    """TV(p_t, p*) shrinks (from 0.33 at the uniform start to below ``final_tv`` at the end, the
    last 50 rounds closer than the first 50) and the cumulative variance loss is below
    ``loss_ratio`` times uniform sampling's."""
    p_star = optimum(A, ALPHA)
    tv = total_variation(history, p_star)
    assert tv[0] == pytest.approx(total_variation(np.full(NUM_CLIENTS, 1 / NUM_CLIENTS), p_star))
    assert tv[-1] < final_tv, tv[[0, 100, 200, -1]]
    assert tv[-50:].mean() < tv[1:51].mean()  # moving toward p*, not merely ending near it
    losses = variance_loss(A, history[:-1], NUM_SAMPLED)
    uniform = variance_loss(A, np.full(NUM_CLIENTS, 1 / NUM_CLIENTS), NUM_SAMPLED)
    optimal = variance_loss(A, p_star, NUM_SAMPLED)
    assert np.all(losses >= optimal * (1 - 1e-12))  # p* minimises the loss over A: a sanity check
    assert losses.sum() < loss_ratio * uniform * ROUNDS, losses.sum() / (uniform * ROUNDS)


def test_optimum_is_the_projection_of_sqrt_a() -> None:
    """p* = max(floor, c sqrt(a)) normalised satisfies the variance loss's KKT conditions: the
    derivative -a_m / (K p_m^2) is the same on the unfloored clients and no smaller on the floored."""
    p = optimum(A, ALPHA)
    floor = ALPHA / NUM_CLIENTS
    free = p > floor * (1 + 1e-9)
    gradient = -A / (NUM_SAMPLED * p**2)
    assert free.sum() >= 2  # both kinds present: the test is not trivial
    assert (~free).sum() >= 2
    np.testing.assert_allclose(gradient[free], gradient[free][0], rtol=1e-9)
    assert np.all(gradient[~free] >= gradient[free][0] * (1 + 1e-9))
    # Any feasible perturbation increases the loss.
    rng = np.random.default_rng(0)
    for _ in range(100):
        q = project_truncated_simplex(p * np.exp(0.1 * rng.normal(size=NUM_CLIENTS)), floor)
        assert variance_loss(A, q, NUM_SAMPLED) >= variance_loss(A, p, NUM_SAMPLED) * (1 - 1e-12)


@pytest.mark.parametrize("replace", REPLACE)
def test_osmd_learns_the_optimal_distribution(replace: bool) -> None:
    """OSMD with eta = 1e-3 (exponents of order 0.01 per step here): after 400 rounds p is within
    TV 0.06 of p* (0.33 at the uniform start), and the cumulative variance loss is below 0.65 of
    uniform's (p* gives 0.55). The floor holds at every round."""
    history, _ = stationary_run(
        OSMDSampler(eta=1e-3, alpha=ALPHA, replace=replace), STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=0
    )
    check_floor(history, ALPHA)
    check_learns_the_optimum(history, final_tv=0.06, loss_ratio=0.65)


@pytest.mark.parametrize("replace", REPLACE)
def test_adaptive_osmd_with_known_horizon_learns_the_optimal_distribution(replace: bool) -> None:
    """Adaptive-OSMD told T = 400 (nothing else: a_max is the running maximum, gamma the
    theoretical value) ends within TV 0.06 of p* and loses below 0.8 of uniform's loss."""
    sampler = AdaptiveOSMDSampler(alpha=ALPHA, horizon=ROUNDS, replace=replace)
    history, _ = stationary_run(sampler, STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=1)
    check_floor(history, ALPHA)
    check_learns_the_optimum(history, final_tv=0.06, loss_ratio=0.8)


@pytest.mark.parametrize("replace", REPLACE)
def test_adaptive_osmd_defaults_move_toward_the_optimal_distribution(replace: bool) -> None:
    """Adaptive-OSMD with its defaults (doubling trick, running a_max) moves toward p* more slowly,
    each restart resetting the meta weights: after 400 rounds TV < 0.3 (0.2 observed, from 0.33)
    and the cumulative loss is below 0.9 of uniform's (0.8 observed)."""
    sampler = AdaptiveOSMDSampler(replace=replace)
    assert sampler.alpha == ALPHA  # the paper's default
    history, _ = stationary_run(sampler, STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=2)
    check_floor(history, ALPHA)
    check_learns_the_optimum(history, final_tv=0.3, loss_ratio=0.9)


LEARNERS = {
    "osmd": lambda replace: OSMDSampler(eta=1e-3, replace=replace),
    "adaptive-osmd": lambda replace: AdaptiveOSMDSampler(replace=replace),
    "uniform-is": lambda replace: UniformISSampler(replace=replace),
    "mabs": lambda replace: MABSSampler(replace=replace),
    "vrb": lambda replace: VRBSampler(replace=replace),
    "avare": lambda replace: AvareSampler(replace=replace),
}


@pytest.mark.parametrize("replace", REPLACE)
@pytest.mark.parametrize("name", list(LEARNERS))
def test_clients_never_sampled_keep_the_floor(name: str, replace: bool) -> None:
    """M = 200, K = 2, five clients with large a and the rest with a = 1e-8: over 150 rounds many
    clients are never drawn, yet every client keeps probability >= alpha / M (= 0.002) at every
    round and each distribution sums to one."""
    federation = Federation.from_sizes(np.random.default_rng(3).integers(1, 50, size=200))
    a = np.full(200, 1e-8)
    a[:5] = [1.0, 0.5, 0.2, 0.1, 0.05]
    sampler = LEARNERS[name](replace)
    history, drawn = stationary_run(sampler, federation, 2, a, 150, seed=4)
    assert int((drawn == 0).sum()) >= 20
    check_floor(history, ALPHA)


# --- one step, against the paper's formula -----------------------------------------------------


def test_osmd_step_is_the_papers_mirror_step() -> None:
    """With replacement, one update is p~_m = p_m exp(eta a_m N_m / (K^2 p_m^3)) on the returned
    clients (N_m = times drawn, a client drawn twice counted twice) followed by the projection,
    from a non-uniform state."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6])
    sampler = OSMDSampler(eta=0.02, alpha=0.3)
    state = sampler.init(federation, 4)
    norms = client_norms(6)
    rng = np.random.default_rng(9)
    for t in range(12):
        selection = sampler.sample(state, rng)
        returned = np.unique(selection.clients)[:-1] if t % 3 == 0 else None  # the last one drops out
        feedback = synthetic_feedback(t, selection, norms, returned=returned)
        p = state.probabilities
        counts = np.bincount(selection.clients, minlength=6)
        lam = federation.importances
        a = lam**2 * norms**2
        exponent = np.zeros(6)
        exponent[feedback.clients] = (0.02 * a * counts / (4**2 * p**3))[feedback.clients]
        expected = project_truncated_simplex(p * np.exp(exponent), 0.3 / 6)
        state = sampler.update(state, feedback)
        np.testing.assert_allclose(state.probabilities, expected, rtol=1e-12)
        assert state.round == t + 1


def test_osmd_step_without_replacement_uses_des_raj_coefficients() -> None:
    """Without replacement the step is p~_m = p_m exp(eta a_m c_m / (K p_m^2)) with Des Raj's
    coefficient c_m = ((1 - S_{k-1}) / p_m + (K - k)) / K of the client drawn k-th."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6])
    sampler = OSMDSampler(eta=0.05, alpha=0.3, replace=False)
    state = sampler.init(federation, 3)
    norms = client_norms(6)
    rng = np.random.default_rng(10)
    for t in range(10):
        selection = sampler.sample(state, rng)
        p = state.probabilities
        c = np.zeros(6)
        taken = 0.0
        for k, client in enumerate(selection.clients, start=1):
            c[client] = ((1 - taken) / p[client] + (3 - k)) / 3
            taken += p[client]
        a = federation.importances**2 * norms**2
        expected = project_truncated_simplex(p * np.exp(0.05 * a * c / (3 * p**2)), 0.3 / 6)
        state = sampler.update(state, synthetic_feedback(t, selection, norms))
        np.testing.assert_allclose(state.probabilities, expected, rtol=1e-12)


def test_osmd_step_does_not_overflow_with_huge_feedback() -> None:
    """An exponent far beyond exp's range (a = 1e12) puts all mass the floor allows on that client,
    with no overflow and no NaN (the step is taken in log space)."""
    federation = Federation.from_sizes([1, 1, 1, 1])
    sampler = OSMDSampler(eta=1.0, alpha=0.4)
    state = sampler.init(federation, 1)
    selection = sampler.sample(state, np.random.default_rng(0))
    norms = np.full(4, 4e6)  # a = (1/4)^2 (4e6)^2 = 1e12
    state = sampler.update(state, synthetic_feedback(0, selection, norms))
    expected = np.full(4, 0.1)
    expected[selection.clients[0]] = 0.7
    np.testing.assert_allclose(state.probabilities, expected, rtol=1e-12)


# --- Adaptive-OSMD internals -------------------------------------------------------------------


def papers_num_experts(horizon: int, num_clients: int, alpha: float) -> int:
    """``E = ceil(0.5 log2((ln M + 4 (T-1) ln(M/alpha)) / ln M)) + 1`` as paper 001 writes it."""
    ln_m = math.log(num_clients)
    return math.ceil(0.5 * math.log2((ln_m + 4 * (horizon - 1) * math.log(num_clients / alpha)) / ln_m)) + 1


@pytest.mark.parametrize("alpha", [0.05, 0.4, 1.0])
@pytest.mark.parametrize("num_clients", [2, 10, 500])
@pytest.mark.parametrize("horizon", [1, 2, 10, 100, 5000])
def test_number_of_experts(horizon: int, num_clients: int, alpha: float) -> None:
    """The expert count follows the paper's formula, and init with a known horizon builds that many
    experts, each the uniform distribution."""
    expected = papers_num_experts(horizon, num_clients, alpha)
    assert num_experts(horizon, num_clients, alpha) == expected
    federation = Federation.from_sizes(np.ones(num_clients, dtype=np.int64))
    state = AdaptiveOSMDSampler(alpha=alpha, horizon=horizon).init(federation, 1)
    assert state.experts.shape == (expected, num_clients)
    np.testing.assert_array_equal(state.experts, 1.0 / num_clients)


def test_number_of_experts_worked_values() -> None:
    """Hand-computed: M = 100, alpha = 0.4, T = 1000: 1 + 3996 ln(250) / ln(100) = 4792.6,
    log2 = 12.23, half = 6.11, ceil = 7, so E = 8. T = 1 gives a single expert; so does M = 1."""
    assert num_experts(1000, 100, 0.4) == 8
    assert num_experts(1, 100, 0.4) == 1
    assert num_experts(1000, 1, 0.4) == 1


@pytest.mark.parametrize("horizon", [1, 3, 50, 10_000, 10**9])
def test_prior_weights_sum_to_one(horizon: int) -> None:
    """The prior expert weights are (1 + 1/E) / (e (e+1)), e = 1..E, which sum to exactly one."""
    state = AdaptiveOSMDSampler(horizon=horizon).init(Federation.from_sizes([3, 1, 4, 1, 5, 9, 2, 6]), 2)
    count = state.experts.shape[0]
    e = np.arange(1, count + 1)
    prior = (1 + 1 / count) / (e * (e + 1))
    assert prior.sum() == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(np.exp(state.log_weights), prior, rtol=1e-13)


@pytest.mark.parametrize(("anchor", "scale"), [("typical", 3 * 3), ("worst-case", 3 * 0.5**3)])
def test_learning_rates_form_the_geometric_grid(anchor: str, scale: float) -> None:
    """eta_e = 2^(e-1) eta_min with eta_min = sqrt(2 ln M / T) / G: G = a_max M^3 / K^2 for the
    typical anchor, a_max M^3 / (K alpha^3) for the paper's worst case; no learning at all before
    a_max is known."""
    federation = Federation.from_sizes([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])
    sampler = AdaptiveOSMDSampler(alpha=0.5, horizon=200, a_max=2.0, anchor=anchor)  # type: ignore[arg-type]
    state = sampler.init(federation, 3)
    count = num_experts(200, 10, 0.5)
    eta_min = scale / (10**3 * 2.0) * math.sqrt(2 * math.log(10) / 200)
    np.testing.assert_allclose(sampler.learning_rates(state), eta_min * 2.0 ** np.arange(count), rtol=1e-14)
    assert sampler.meta_rate(state) == pytest.approx((0.5 / 10) * math.sqrt(8 * 3 / (200 * 2.0)), rel=1e-14)
    assert AdaptiveOSMDSampler(gamma=0.25).meta_rate(state) == 0.25
    unknown = AdaptiveOSMDSampler(horizon=200)
    fresh = unknown.init(federation, 3)
    assert fresh.a_max == 0.0
    np.testing.assert_array_equal(unknown.learning_rates(fresh), 0.0)
    assert unknown.meta_rate(fresh) == 0.0


def test_running_a_max() -> None:
    """a_max=None: the state's a_max is the running maximum of the a_m observed so far, and the
    grid follows it; a given a_max stays fixed whatever is observed."""
    federation = Federation.from_sizes([3, 1, 4, 1, 5, 9])
    lam = federation.importances
    sampler = AdaptiveOSMDSampler(horizon=100)
    fixed = AdaptiveOSMDSampler(horizon=100, a_max=1e-6)
    state, fixed_state = sampler.init(federation, 2), fixed.init(federation, 2)
    rng = np.random.default_rng(5)
    seen = 0.0
    for t in range(30):
        norms = 10.0 ** rng.uniform(-2, 2, size=6)
        selection = sampler.sample(state, rng)
        feedback = synthetic_feedback(t, selection, norms)
        seen = max(seen, float((lam[feedback.clients] * norms[feedback.clients]).max() ** 2))
        state = sampler.update(state, feedback)
        fixed_state = fixed.update(fixed_state, synthetic_feedback(t, fixed.sample(fixed_state, rng), norms))
        assert state.a_max == pytest.approx(seen, rel=1e-14)
        assert fixed_state.a_max == 1e-6
    rates = sampler.learning_rates(state)
    assert rates[0] == pytest.approx(2 * 2 / (6**3 * seen) * math.sqrt(2 * math.log(6) / 100), rel=1e-12)


def test_mixture_is_the_weighted_average_of_the_experts() -> None:
    """The sampling distribution is sum_e w_e q_e: a distribution that keeps the floor (every
    expert does), checked on a state after 60 rounds, when the experts differ."""
    sampler = AdaptiveOSMDSampler(horizon=60, replace=False)
    state = sampler.init(STATIONARY, NUM_SAMPLED)
    norms = np.sqrt(A) / STATIONARY.importances
    rng = np.random.default_rng(6)
    for t in range(60):
        state = sampler.update(state, synthetic_feedback(t, sampler.sample(state, rng), norms))
    assert np.ptp(state.experts, axis=0).max() > 1e-3  # the experts have moved apart
    weights = np.exp(state.log_weights)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    mixture = sampler.probabilities(state)
    np.testing.assert_allclose(mixture, weights @ state.experts, rtol=1e-12)
    assert mixture.sum() == pytest.approx(1.0, abs=1e-12)
    assert mixture.min() >= ALPHA / NUM_CLIENTS
    assert np.all(state.experts >= ALPHA / NUM_CLIENTS)


def test_experts_step_from_the_mixtures_draws() -> None:
    """Each expert q_e takes the OSMD step with its own rate and the coefficients c_m of the draw
    from the mixture: q~_em = q_em exp(eta_e a_m c_m / (K q_em^2)), then the projection."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6])
    # The worst-case anchor keeps the steps moderate, so that every entry stays well above underflow.
    sampler = AdaptiveOSMDSampler(horizon=500, a_max=0.05, alpha=0.3, anchor="worst-case")
    state = sampler.init(federation, 2)
    norms = client_norms(6)
    rng = np.random.default_rng(2)
    for t in range(8):
        selection = sampler.sample(state, rng)
        feedback = synthetic_feedback(t, selection, norms)
        clients, a, c = observed_feedback(feedback, federation.importances, kind="update")
        rates = sampler.learning_rates(state)
        expected = []
        for q, lr in zip(state.experts, rates, strict=True):
            exponent = np.zeros(6)
            exponent[clients] = lr * a * c / (2 * q[clients] ** 2)
            # The projection is scale-invariant: step in log space, as exp() of a large step overflows.
            log_step = np.log(q) + exponent
            expected.append(project_truncated_simplex(np.exp(log_step - log_step.max()), 0.3 / 6))
        state = sampler.update(state, feedback)
        np.testing.assert_allclose(state.experts, np.array(expected), rtol=1e-11)


def _two_expert_state(experts: np.ndarray, a_max: float) -> AdaptiveOSMDState:
    n = experts.shape[1]
    return AdaptiveOSMDState(
        importances=np.full(n, 1.0 / n),
        num_sampled=2,
        experts=experts,
        log_weights=np.log(np.array([0.5, 0.5])),
        horizon=100,
        epoch_start=0,
        a_max=a_max,
    )


def test_meta_weights_move_toward_the_expert_with_lower_estimated_loss() -> None:
    """Exponential weights: w'_e ∝ w_e exp(-gamma L_e) with the estimated loss
    L_e = sum_m c_m a_m / (K q_em). The expert giving the observed client more probability has the
    lower estimated loss and gains weight; over rounds of stationary feedback the expert that is
    p* takes most of the weight from the one that stays uniform."""
    sampler = AdaptiveOSMDSampler(horizon=100, a_max=1.0, gamma=0.5)
    uniform = np.full(4, 0.25)
    tilted = np.array([0.55, 0.15, 0.15, 0.15])
    state = _two_expert_state(np.stack([uniform, tilted]), a_max=1.0)
    selection_p = sampler.probabilities(state)
    selection = Selection(clients=[0, 0], weights=[0.25 / (2 * selection_p[0])] * 2)
    norms = np.array([4.0, 1.0, 1.0, 1.0])  # a_0 = (1/4)^2 16 = 1
    new = sampler.update(state, synthetic_feedback(0, selection, norms))
    c0 = 2 / (2 * selection_p[0])
    losses = np.array([c0 * 1.0 / (2 * 0.25), c0 * 1.0 / (2 * 0.55)])
    expected = 0.5 * np.exp(-0.5 * losses)
    np.testing.assert_allclose(np.exp(new.log_weights), expected / expected.sum(), rtol=1e-12)
    assert new.log_weights[1] > new.log_weights[0]

    # Over many rounds, with experts that do not move (rates ~1e-16: a_max huge), p* wins.
    a = np.array([1.0, 0.25, 0.01, 0.01])
    p_star = optimum(a, 0.4)
    frozen = AdaptiveOSMDSampler(horizon=100, a_max=1e12, gamma=0.05)
    state = _two_expert_state(np.stack([uniform, p_star]), a_max=1e12)
    norms = np.sqrt(a) * 4  # lambda = 1/4
    rng = np.random.default_rng(7)
    for t in range(200):
        state = frozen.update(state, synthetic_feedback(t, frozen.sample(state, rng), norms))
    np.testing.assert_allclose(state.experts, np.stack([uniform, p_star]), rtol=1e-6)
    assert np.exp(state.log_weights[1]) > 0.9


def test_doubling_trick_restarts_with_grids_for_the_new_horizon() -> None:
    """horizon=None: epochs of 1, 2, 4, 8, 16 rounds start at rounds 1, 2, 4, 8, 16 (counting from
    1), i.e. after 0, 1, 3, 7, 15 completed rounds. At each restart the epoch's horizon doubles, the
    expert count and the learning-rate grid are those of the new horizon, the meta weights return
    to the prior, and every expert starts from the mixture reached at the end of the last epoch."""
    federation = Federation.from_sizes(np.arange(1, 13))
    sampler = AdaptiveOSMDSampler()
    state = sampler.init(federation, 3)
    assert (state.horizon, state.epoch_start) == (1, 0)
    assert state.experts.shape[0] == 1
    norms = np.sqrt(np.geomspace(1e-3, 1, 12)) / federation.importances
    rng = np.random.default_rng(8)
    starts = []
    for t in range(31):
        selection = sampler.sample(state, rng)
        feedback = synthetic_feedback(t, selection, norms)
        new = sampler.update(state, feedback)
        if new.epoch_start != state.epoch_start:
            starts.append(new.epoch_start)
            assert new.epoch_start == new.round == t + 1
            assert new.horizon == 2 * state.horizon
            count = num_experts(new.horizon, 12, sampler.alpha)
            assert new.experts.shape == (count, 12)
            e = np.arange(1, count + 1)
            np.testing.assert_allclose(np.exp(new.log_weights), (1 + 1 / count) / (e * (e + 1)), rtol=1e-12)
            # The estimated bound restarts with the epoch (gradients shrink as training converges),
            # so the grid waits for the new epoch's feedback; with a bound, it is the new horizon's.
            assert new.a_max == 0.0
            np.testing.assert_array_equal(sampler.learning_rates(new), 0.0)
            eta_min = 3 * 3 / (12**3 * 2.0) * math.sqrt(2 * math.log(12) / new.horizon)
            rates = sampler.learning_rates(dataclasses.replace(new, a_max=2.0))
            np.testing.assert_allclose(rates, eta_min * 2.0 ** np.arange(count), rtol=1e-12)
            # Warm start: the same step under a sampler that knows the old horizon (so does not
            # restart) reaches the mixture every new expert starts from.
            stepped = AdaptiveOSMDSampler(horizon=state.horizon).update(state, feedback)
            mixture = sampler.probabilities(stepped)
            np.testing.assert_allclose(new.experts, np.tile(mixture, (count, 1)), rtol=1e-12)
            np.testing.assert_allclose(sampler.probabilities(new), mixture, rtol=1e-12)
        else:
            assert new.horizon == state.horizon
        state = new
    assert starts == [1, 3, 7, 15, 31]


def test_known_horizon_never_restarts() -> None:
    """With horizon=T the grid is fixed: no restart even past T rounds."""
    sampler = AdaptiveOSMDSampler(horizon=4)
    state = sampler.init(Federation.from_sizes([1, 2, 3]), 1)
    count = state.experts.shape[0]
    rng = np.random.default_rng(0)
    for t in range(10):
        state = sampler.update(state, synthetic_feedback(t, sampler.sample(state, rng), client_norms(3)))
    assert (state.horizon, state.epoch_start, state.experts.shape[0], state.round) == (4, 0, count, 10)
