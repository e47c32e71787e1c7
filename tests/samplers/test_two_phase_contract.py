"""Two-phase samplers from the contract (issue 25, item 4): the candidate phase in a user's own loop, a
clear error instead of silent degradation without it, and optimal's released candidate weighting."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection
from fedsample.samplers import OptimalSampler, PowerOfChoiceSampler, Sampler
from fedsample.samplers.two_phase import FirstPhase, candidates_rng, phase_due

SIZES = [5, 1, 3, 8, 2, 6, 4, 1, 9, 12, 7, 3, 2, 6, 4, 5, 8, 1, 2, 10]
N = len(SIZES)
TWO_PHASE = [
    PowerOfChoiceSampler(variant="pow-d"),
    PowerOfChoiceSampler(variant="cpow-d"),
    OptimalSampler(mode="protocol"),
    OptimalSampler(mode="protocol", candidates=8),
]


def _loss(clients: np.ndarray) -> np.ndarray:
    return 1.0 + clients / N


def _report(sampler: Sampler[object], state: object, t: int, rng: np.random.Generator) -> Feedback:
    """Round ``t``'s candidates (every client available) and their report: losses, norms."""
    candidates = sampler.draw_candidates(state, np.arange(N), rng)  # type: ignore[attr-defined]
    ids = candidates.clients
    return Feedback(round=t, selection=candidates, clients=ids, losses=_loss(ids), update_norms=_loss(ids))


@pytest.mark.parametrize("sampler", TWO_PHASE, ids=lambda s: f"{s.name}-{s.get_params()}")
def test_a_plain_sample_update_loop_is_refused_at_its_first_draw(sampler: Sampler[object]) -> None:
    """Before issue 25, pow-d in a plain loop narrowed its candidates to the last selection (3 distinct
    clients in 50 rounds) and optimal's protocol drew among the last round's kept clients; now the
    first draw from a state that read no report raises, naming the way to run the candidate phase."""
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    with pytest.raises(FedsampleError, match="two-phase: draw_candidates") as info:
        sampler.sample(state, np.random.default_rng(0))
    assert info.value.parameter == "state"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("sampler", TWO_PHASE, ids=lambda s: f"{s.name}-{s.get_params()}")
def test_the_rounds_own_feedback_after_its_report_is_refused(sampler: Sampler[object]) -> None:
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(1)
    state = sampler.update(state, _report(sampler, state, 0, rng))
    selection = sampler.sample(state, rng)
    ids = np.unique(selection.clients)
    after = Feedback(round=0, selection=selection, clients=ids, losses=_loss(ids), update_norms=_loss(ids))
    with pytest.raises(FedsampleError, match=r"round >= 1.*Got a Feedback of round 0") as info:
        sampler.update(state, after)
    assert info.value.parameter == "feedback"


@pytest.mark.parametrize("sampler", TWO_PHASE, ids=lambda s: f"{s.name}-{s.get_params()}")
def test_the_documented_loop_keeps_every_client_a_candidate(sampler: Sampler[object]) -> None:
    """draw_candidates, the report to update, sample; nothing after the round: over 50 rounds (fixed
    seeds) at least 10 of the 20 clients are selected (pow-d keeps the 3 highest losses of 6 fresh
    candidates each round: 13 here), where the plain loop stayed at 3."""
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    seen: set[int] = set()
    for t in range(50):
        assert phase_due(sampler, state) is not None
        state = sampler.update(state, _report(sampler, state, t, candidates_rng(7, t)))
        seen.update(sampler.sample(state, np.random.default_rng([7, t])).clients.tolist())
    assert len(seen) >= 10


def test_the_plain_loop_of_the_issue_no_longer_narrows_silently() -> None:
    """Issue 25's reproduction: what a plain loop did (it now stops at round 0 instead)."""
    sampler = PowerOfChoiceSampler(variant="pow-d")
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(3)

    def plain_loop() -> None:
        nonlocal state
        for t in range(50):
            selection = sampler.sample(state, rng)
            ids = np.unique(selection.clients)
            state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids, losses=_loss(ids)))

    with pytest.raises(FedsampleError):
        plain_loop()


def test_rpow_d_and_oracle_mode_still_run_in_a_plain_loop() -> None:
    """Only the samplers that draw from a report refuse: rpow-d ranks by stale losses, the oracle mode
    keeps every client's last norm."""
    for sampler in (PowerOfChoiceSampler(), OptimalSampler()):
        state = sampler.init(Federation.from_sizes(SIZES), 3)
        rng = np.random.default_rng(4)
        for t in range(5):
            selection = sampler.sample(state, rng)
            ids = np.unique(selection.clients)
            feedback = Feedback(round=t, selection=selection, clients=ids, losses=_loss(ids), update_norms=_loss(ids))
            state = sampler.update(state, feedback)
        assert phase_due(sampler, state) == (FirstPhase() if sampler.two_phase else None)


def test_renormalized_candidate_weighting_is_the_released_codes() -> None:
    """candidate_weighting='renormalized': w_i = p_i / sum_C p_j over the reporting candidates (the
    released simple_fedavg_tff.py's federated mean weighted by n_i), final weight w_i / q_i."""
    federation = Federation.from_sizes(SIZES)
    p = federation.importances
    candidates = np.array([0, 3, 8, 9, 12, 16])
    norms = np.linspace(1.0, 2.0, candidates.size)
    selection = Selection(clients=candidates, weights=p[candidates] * N / candidates.size)
    report = Feedback(round=0, selection=selection, clients=candidates, update_norms=norms)
    ours = OptimalSampler(mode="protocol", candidates=6)
    released = OptimalSampler(mode="protocol", candidates=6, candidate_weighting="renormalized")
    ht = ours.update(ours.init(federation, 3), report)
    renormalized = released.update(released.init(federation, 3), report)
    np.testing.assert_allclose(ht.candidate_weights, p[candidates] * N / candidates.size, rtol=1e-15)
    np.testing.assert_allclose(renormalized.candidate_weights, p[candidates] / p[candidates].sum(), rtol=1e-15)
    design = released.design(renormalized)
    q = released.inclusion(renormalized)
    np.testing.assert_allclose(design.weights[candidates], renormalized.candidate_weights / q[candidates], rtol=1e-15)
    with pytest.raises(FedsampleError, match="candidate_weighting"):
        OptimalSampler(candidate_weighting="renormalized")


def test_horvitz_thompson_weights_are_unbiased_over_both_stages_and_renormalized_are_not() -> None:
    """E[w_i] over whole rounds (K = 6 of 20 candidates, then the water-filled draw; one client holds a
    third of the samples), 4000 rounds: ours within 5 standard errors of p_i for every client (a false
    failure below 1.2e-5 over the 20); the released weighting misses p_i by more than 10 standard errors
    somewhere (34 with these seeds)."""
    federation = Federation.from_sizes([60, *SIZES[1:]])
    p = federation.importances
    rounds = 4000
    for weighting, unbiased in (("horvitz-thompson", True), ("renormalized", False)):
        sampler = OptimalSampler(mode="protocol", candidates=6, candidate_weighting=weighting)
        base = sampler.init(federation, 3)
        weights = np.zeros((rounds, N))
        for t in range(rounds):
            rng = np.random.default_rng([11, t])
            candidates = sampler.draw_candidates(base, np.arange(N), rng)
            ids = candidates.clients
            report = Feedback(round=0, selection=candidates, clients=ids, update_norms=_loss(ids))
            weights[t] = sampler.sample(sampler.update(base, report), rng).dense_weights(N)
        z = np.abs(weights.mean(axis=0) - p) / (weights.std(axis=0, ddof=1) / np.sqrt(rounds))
        assert (z.max() < 5) if unbiased else (z.max() > 10)
