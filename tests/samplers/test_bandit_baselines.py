"""The baselines of paper 001 that learn a sampling distribution (MABS, VRB, Avare) and uniform
sampling under the same importance-weighted aggregation.

Each is checked against its own paper's update, on one step and on the stationary problem of
tests/samplers/stationary_problem.py (the same ``a_m`` every round; the variance-optimal distribution is
``p*_m = max(alpha/M, c sqrt(a_m))``):

* VRB (Borsos et al. 2018) minimises the cumulative importance-weighted loss in closed form and
  approaches ``p*``;
* Avare (El Hanchi and Stephens 2020) plugs the latest ``sqrt(a_m)`` into ``p ∝ sqrt(a)`` mixed with
  uniform: with every client observed it sits exactly at ``(1 - alpha) sqrt(a) / sum sqrt(a) + alpha/M``,
  much closer to ``p*`` than uniform (its mixing differs from OSMD's floor, so it does not reach p*);
* MABS (Salehi et al. 2017) only has to stay a distribution with the floor;
* uniform-is never learns.
"""

from __future__ import annotations

from collections.abc import Iterator

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
from fedsample.errors import FedsampleError
from fedsample.samplers import (
    AvareSampler,
    MABSSampler,
    UniformISSampler,
    VRBSampler,
    project_truncated_simplex,
)
from fedsample.samplers.adaptive._distribution import observed_feedback
from fedsample.samplers.adaptive.bandits import ScoreState
from sampler_cases import client_norms, stationary_run, synthetic_feedback

P_STAR = optimum(A, ALPHA)
UNIFORM = np.full(NUM_CLIENTS, 1.0 / NUM_CLIENTS)


# --- VRB --------------------------------------------------------------------------------------

VRB_FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6])


def _vrb_rounds(sampler: VRBSampler, *, seed: int) -> Iterator[tuple[ScoreState, np.ndarray, np.ndarray]]:
    """Ten rounds of ``sampler`` on VRB_FEDERATION with K = 3 and ``client_norms`` feedback; after each
    update, its state, the expected scores ``C_m += a_m c_m`` on the returned clients (``c_m = N_m / (K p_m)``:
    an unbiased estimate of ``a_m = lambda_m^2 norm_m^2``) and each client's last observed ``a_m`` (0 if never)."""
    norms = client_norms(6)
    a = VRB_FEDERATION.importances**2 * norms**2
    cumulative, last = np.zeros(6), np.zeros(6)
    state = sampler.init(VRB_FEDERATION, 3)
    rng = np.random.default_rng(seed)
    for t in range(10):
        p = sampler.probabilities(state)
        selection = sampler.sample(state, rng)
        ids = np.unique(selection.clients)
        counts = np.bincount(selection.clients, minlength=6)
        cumulative[ids] += (a * counts / (3 * p))[ids]
        last[ids] = a[ids]
        state = sampler.update(state, synthetic_feedback(t, selection, norms))
        yield state, cumulative, last


@pytest.mark.parametrize("replace", REPLACE)
def test_vrb_learns_the_optimal_distribution(replace: bool) -> None:
    """VRB's FTRL solution max(floor, z sqrt(C_m + lambda)) with C_m ~ t a_m tends to p*: after 400
    rounds TV < 0.03 (0.01 to 0.016 over seven seeds; 0.33 at the start), the cumulative loss is
    below 0.7 of uniform's, and the floor holds at every round."""
    history, _ = stationary_run(VRBSampler(replace=replace), STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=0)
    check_floor(history, ALPHA)
    tv = total_variation(history, P_STAR)
    assert tv[-1] < 0.03
    assert tv[-50:].mean() < tv[1:51].mean()
    assert variance_loss(A, history[:-1], NUM_SAMPLED).sum() < 0.7 * variance_loss(A, UNIFORM, NUM_SAMPLED) * ROUNDS


def test_vrb_step_accumulates_importance_weighted_losses() -> None:
    """C_m += a_m c_m on the returned clients (c_m = N_m / (K p_m): an unbiased estimate of a_m);
    the last observed a_m is kept for the default regulariser (their mean); p is the minimiser of
    sum_m (C_m + lambda) / p_m over A, i.e. max(floor, z sqrt(C_m + lambda)) normalised."""
    sampler = VRBSampler(alpha=0.3)
    # lambda = 1 before any feedback
    np.testing.assert_allclose(sampler.probabilities(sampler.init(VRB_FEDERATION, 3)), 1 / 6)
    for state, cumulative, last in _vrb_rounds(sampler, seed=3):
        np.testing.assert_allclose(state.scores, cumulative, rtol=1e-12)
        regulariser = last[last > 0].mean()
        expected = project_truncated_simplex(np.sqrt(cumulative + regulariser), 0.3 / 6)
        np.testing.assert_allclose(sampler.probabilities(state), expected, rtol=1e-12)
        # Closed form: p = max(floor, z sqrt(C + lambda)) with one z.
        free = expected > 0.05 * (1 + 1e-9)
        z = expected[free] / np.sqrt(cumulative[free] + regulariser)
        np.testing.assert_allclose(z, z[0], rtol=1e-9)
    fixed = VRBSampler(alpha=0.3, regularizer=2.5)
    np.testing.assert_allclose(
        fixed.probabilities(state), project_truncated_simplex(np.sqrt(cumulative + 2.5), 0.05), rtol=1e-12
    )


def _one_loss_round(sampler: VRBSampler) -> tuple[ScoreState, Selection, np.ndarray, np.ndarray]:
    """One round of ``sampler`` on four clients with K = 2 and ``client_norms`` feedback (losses = norms / 2):
    the new state, the selection, the returned clients and their ``a_m = lambda_m^2 loss_m^2``."""
    federation = Federation.from_sizes([5, 1, 3, 8])
    state = sampler.init(federation, 2)
    selection = sampler.sample(state, np.random.default_rng(0))
    feedback = synthetic_feedback(0, selection, client_norms(4))
    ids = feedback.clients
    a = federation.importances[ids] ** 2 * (client_norms(4)[ids] / 2) ** 2
    return sampler.update(state, feedback), selection, ids, a


def test_vrb_loss_feedback_uses_the_squared_loss() -> None:
    """feedback="loss" (paper 001's released code): a_m = lambda_m^2 loss_m^2 instead of the gradient."""
    state, _, ids, a = _one_loss_round(VRBSampler(feedback="loss"))
    np.testing.assert_allclose(state.observed[ids], a, rtol=1e-14)


def test_vrb_mixture_form_is_the_released_codes_mixture_with_uniform() -> None:
    """form="mixture" (paper 001's released code): p = (1 - alpha) s / sum s + alpha / M with
    s_m = sqrt(C_m + lambda), on the same cumulative losses as the projection form; the two forms
    differ once C is uneven, and both keep p_m >= alpha / M."""
    mixture, projection = VRBSampler(alpha=0.3, form="mixture"), VRBSampler(alpha=0.3)
    np.testing.assert_allclose(mixture.probabilities(mixture.init(VRB_FEDERATION, 3)), 1 / 6, rtol=1e-14)
    for state, cumulative, last in _vrb_rounds(mixture, seed=5):
        np.testing.assert_allclose(state.scores, cumulative, rtol=1e-12)
        s = np.sqrt(cumulative + last[last > 0].mean())
        expected = 0.7 * s / s.sum() + 0.3 / 6
        np.testing.assert_allclose(mixture.probabilities(state), expected, rtol=1e-12)
        assert mixture.probabilities(state).min() >= 0.05 * (1 - 1e-12)
    assert np.abs(mixture.probabilities(state) - projection.probabilities(state)).max() > 1e-3


def test_vrb_authors_variant_runs_on_the_squared_loss_with_the_mixture() -> None:
    """Both of the released code's choices together: the scores accumulate lambda^2 loss^2 c_m and
    p is the mixture with uniform."""
    sampler = VRBSampler(feedback="loss", form="mixture", alpha=0.5)
    state, selection, ids, a = _one_loss_round(sampler)
    counts = np.bincount(selection.clients, minlength=4)[ids]
    expected_scores = np.zeros(4)
    expected_scores[ids] = a * counts / (2 * 0.25)
    np.testing.assert_allclose(state.scores, expected_scores, rtol=1e-14)
    s = np.sqrt(expected_scores + a.mean())
    np.testing.assert_allclose(sampler.probabilities(state), 0.5 * s / s.sum() + 0.5 / 4, rtol=1e-14)


# --- Avare ------------------------------------------------------------------------------------


@pytest.mark.parametrize("replace", REPLACE)
def test_avare_settles_on_its_mixture_of_sqrt_a(replace: bool) -> None:
    """Once every client has been observed, Avare's p is exactly (1 - alpha) sqrt(a) / sum sqrt(a) +
    alpha / M (the latest observations never change here); that is within TV 0.11 of p* (0.33 for
    uniform), and the cumulative loss is below 0.7 of uniform's."""
    history, drawn = stationary_run(AvareSampler(replace=replace), STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=1)
    check_floor(history, ALPHA)
    assert np.all(drawn > 0)
    target = (1 - ALPHA) * np.sqrt(A) / np.sqrt(A).sum() + ALPHA / NUM_CLIENTS
    np.testing.assert_allclose(history[-1], target, rtol=1e-12)
    assert total_variation(history[-1], P_STAR) < 0.11
    assert total_variation(UNIFORM, P_STAR) > 0.3
    assert variance_loss(A, history[:-1], NUM_SAMPLED).sum() < 0.7 * variance_loss(A, UNIFORM, NUM_SAMPLED) * ROUNDS


def test_avare_unobserved_clients_get_the_mean_score() -> None:
    """Uniform before any feedback; afterwards clients never observed score the mean sqrt(a) of the
    observed ones."""
    federation = Federation.from_sizes([4, 4, 4, 4, 4])
    sampler = AvareSampler(alpha=0.5)
    state = sampler.init(federation, 2)
    np.testing.assert_array_equal(sampler.probabilities(state), np.full(5, 0.2))
    selection = Selection(clients=[0, 3], weights=[0.2 / (2 * 0.2)] * 2)
    norms = np.array([10.0, 0.0, 0.0, 20.0, 0.0])  # sqrt(a) = lambda norm = 2 and 4
    state = sampler.update(state, synthetic_feedback(0, selection, norms))
    scores = np.array([2.0, 3.0, 3.0, 4.0, 3.0])
    np.testing.assert_allclose(sampler.probabilities(state), 0.5 * scores / scores.sum() + 0.5 / 5, rtol=1e-12)


# --- MABS -------------------------------------------------------------------------------------


@pytest.mark.parametrize("replace", REPLACE)
def test_mabs_stays_a_distribution_with_the_floor(replace: bool) -> None:
    """On the stationary problem MABS's p stays a distribution with p_m >= alpha / M every round."""
    history, _ = stationary_run(MABSSampler(replace=replace), STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=2)
    check_floor(history, ALPHA)
    assert np.ptp(history[-1]) > 0  # it learned something


@pytest.mark.parametrize("replace", REPLACE)
def test_mabs_step_is_exponential_weights_on_the_bandit_gradient(replace: bool) -> None:
    """p = (1 - alpha) w / sum w + alpha / M; a returned client's log-weight gains
    delta a_m c_m / (K p_m^2), the unbiased estimate of -dl/dp_m."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6])
    sampler = MABSSampler(alpha=0.2, delta=0.05, replace=replace)
    state = sampler.init(federation, 3)
    norms = client_norms(6)
    log_w = np.zeros(6)
    rng = np.random.default_rng(4)
    for t in range(10):
        p = sampler.probabilities(state)
        w = np.exp(log_w - log_w.max())
        np.testing.assert_allclose(p, 0.8 * w / w.sum() + 0.2 / 6, rtol=1e-12)
        selection = sampler.sample(state, rng)
        feedback = synthetic_feedback(t, selection, norms)
        clients, a, c = observed_feedback(feedback, federation.importances, kind="update")
        log_w[clients] += 0.05 * a * c / (3 * p[clients] ** 2)
        state = sampler.update(state, feedback)
        np.testing.assert_allclose(state.scores, log_w, rtol=1e-12)


def test_mabs_horizon_step_is_the_released_codes_step() -> None:
    """step="horizon": delta = K^2 sqrt(alpha^4 ln M / (T M^5 a_bar)), with a_bar = sum_m a_m c_m / M
    from the first round (an unbiased estimate of the mean feedback) kept afterwards. Per draw the
    log-weight then gains delta_0 a_m / p_m^3 with delta_0 = sqrt(alpha^4 ln M / (T M^5 a_bar)): the
    released code's increment, written with our c_m = N_m / (K p_m)."""
    federation = Federation.from_sizes([5, 1, 3, 8, 2, 6])
    n, k, horizon, alpha = 6, 3, 40, 0.4
    sampler = MABSSampler(step="horizon", horizon=horizon, alpha=alpha)
    state = sampler.init(federation, k)
    assert state.mean_feedback == 0.0
    norms = client_norms(n)
    log_w = np.zeros(n)
    rng = np.random.default_rng(6)
    a_bar = None
    for t in range(8):
        p = sampler.probabilities(state)
        selection = sampler.sample(state, rng)
        feedback = synthetic_feedback(t, selection, norms)
        clients, a, c = observed_feedback(feedback, federation.importances, kind="update")
        if a_bar is None:
            a_bar = float(np.sum(a * c)) / n
        delta_0 = np.sqrt(alpha**4 * np.log(n) / (horizon * n**5 * a_bar))
        counts = np.bincount(selection.clients, minlength=n)[clients]
        log_w[clients] += delta_0 * counts * a / p[clients] ** 3  # the released code, draw by draw
        state = sampler.update(state, feedback)
        assert state.mean_feedback == pytest.approx(a_bar, rel=1e-15)
        np.testing.assert_allclose(state.scores, log_w, rtol=1e-12)
    assert np.ptp(log_w) > 0


def test_mabs_horizon_step_needs_the_horizon_and_keeps_the_fixed_step_state() -> None:
    """step="horizon" without a horizon is refused naming 'horizon'; the fixed step keeps its plain
    ScoreState (saved states of the default MABS are unchanged)."""
    with pytest.raises(FedsampleError, match="'horizon'") as info:
        MABSSampler(step="horizon")
    assert info.value.parameter == "horizon"
    with pytest.raises(FedsampleError, match="'step'"):
        MABSSampler(step="bogus")  # type: ignore[arg-type]
    state = MABSSampler().init(STATIONARY, 2)
    assert type(state) is ScoreState


@pytest.mark.parametrize("replace", REPLACE)
def test_mabs_horizon_step_stays_a_distribution_with_the_floor(replace: bool) -> None:
    """On the stationary problem MABS with the horizon step keeps p a distribution above the floor."""
    sampler = MABSSampler(step="horizon", horizon=ROUNDS, replace=replace)
    history, _ = stationary_run(sampler, STATIONARY, NUM_SAMPLED, A, ROUNDS, seed=2)
    check_floor(history, ALPHA)
    assert np.ptp(history[-1]) > 0


# --- uniform with importance weights ---------------------------------------------------------


@pytest.mark.parametrize("replace", REPLACE)
def test_uniform_is_never_learns(replace: bool) -> None:
    """p = 1/M at every round whatever the feedback; with replacement each draw weighs lambda_m M / K."""
    sampler = UniformISSampler(replace=replace)
    history, _ = stationary_run(sampler, STATIONARY, NUM_SAMPLED, A, 50, seed=3)
    np.testing.assert_array_equal(history, np.tile(UNIFORM, (51, 1)))
    state = sampler.init(STATIONARY, NUM_SAMPLED)
    selection = sampler.sample(state, np.random.default_rng(0))
    if replace:
        np.testing.assert_allclose(
            selection.weights, STATIONARY.importances[selection.clients] * NUM_CLIENTS / NUM_SAMPLED, rtol=1e-14
        )
    else:
        assert np.unique(selection.clients).size == NUM_SAMPLED
