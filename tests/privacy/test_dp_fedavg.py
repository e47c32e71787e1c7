"""DP-FedAvg's round (issue 36 items 1 and 4): noise once a round with the stated variance, an unbiased
clipped aggregate for the designs with unbiased weights, and the plan's bookkeeping.

Every statistical test has a fixed seed and a stated band; the bands' false-alarm rates are given
where they are set (a fixed seed makes each test deterministic: the rate is what a new seed risks).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsample import Federation, make_sampler
from fedsample.errors import FedsampleError
from fedsample.privacy import DPFedAvg, noise_std, plan_privacy, privacy_cost
from fedsample.privacy.mechanism import update_multiplier
from fedsample.privacy.plan import clip_factors
from fedsample.privacy.refusals import exposure_of

pytest.importorskip("dp_accounting")

SIZES = [100, 250, 500, 750, 1000] * 4


def _plan(name: str, settings: DPFedAvg, *, runs: int = 1, m: int = 5, rounds: int = 2, sizes=SIZES):  # type: ignore[no-untyped-def]
    federation = Federation.from_sizes(sizes)
    samplers = [make_sampler(name)] * runs
    return plan_privacy(settings, federation, samplers, m, rounds, [name] * runs), federation


def test_the_noise_is_added_once_a_round_with_variance_z_c_s_squared() -> None:
    """Zero updates from 8 clients: the direction is the noise alone. Its sample variance over d = 40,000
    coordinates has a relative standard error sqrt(2 / d) = 0.7%; the band is 5 standard errors (a false
    alarm below 1e-6), and noise added once per client would have 8 times the variance."""
    settings = DPFedAvg(clip_norm=0.5, noise_multiplier=1.3)
    plan, federation = _plan("poisson", settings)
    exposure = exposure_of(make_sampler("poisson"), make_sampler("poisson").init(federation, 5))
    expected = noise_std(exposure, noise_multiplier=1.3, clip_norm=0.5) ** 2
    d = 40_000
    like = {"w": torch.zeros((1, d), dtype=torch.float64)}
    updates = {"w": torch.zeros((8, d), dtype=torch.float64)}
    direction, _ = plan.direction(
        updates,
        np.zeros(8, dtype=np.int64),
        torch.full((8,), 0.2),
        plan.initial_clip_norms(),
        seeds=[3],
        round=0,
        like=like,
    )
    variance = float(direction["w"].var())
    assert abs(variance / expected - 1.0) < 5 * math.sqrt(2 / d)
    # The same (seed, round) gives the same noise; another round a fresh draw.
    again, _ = plan.direction(
        None, np.zeros(0, dtype=np.int64), torch.zeros(0), plan.initial_clip_norms(), seeds=[3], round=0, like=like
    )
    other, _ = plan.direction(
        None, np.zeros(0, dtype=np.int64), torch.zeros(0), plan.initial_clip_norms(), seeds=[3], round=1, like=like
    )
    assert torch.equal(again["w"], direction["w"])
    assert abs(float(torch.corrcoef(torch.stack([other["w"][0], direction["w"][0]]))[0, 1])) < 5 / math.sqrt(d)


@pytest.mark.slow  # 2 to 13 s a design on the shared 2-core machine (the accountant's plan, 3,000 draws)
@pytest.mark.parametrize("name", ["md", "uniform", "poisson", "clustered-size", "systematic", "full"])
def test_the_clipped_noised_aggregate_is_unbiased(name: str) -> None:
    """Monte Carlo over 3,000 rounds (seed 0): the mean direction equals sum_i p_i clip_C(Delta_i) within
    4.5 standard errors in each of the 6 coordinates (a two-sided false alarm below 4e-5 over the six),
    for every design whose weights are unbiased (E[w_i(S)] = p_i); half the updates are clipped."""
    rng = np.random.default_rng(0)
    n, d, rounds, clip = len(SIZES), 6, 3_000, 1.0
    updates = rng.normal(size=(n, d)) * rng.choice([0.3, 3.0], size=(n, 1))
    # Each round is one run of the plan (its own seed), so one call draws every round's noise.
    settings = DPFedAvg(clip_norm=clip, noise_multiplier=0.5, accountant="rdp")
    plan, federation = _plan(name, settings, runs=rounds, rounds=1)
    sampler = make_sampler(name)
    state = sampler.init(federation, 5)
    norms = np.linalg.norm(updates, axis=1)
    target = federation.importances @ (updates * np.minimum(1.0, clip / norms)[:, None])
    slots, run_of_slot, slot_weights = [], [], []
    for t in range(rounds):
        selection = sampler.sample(state, np.random.default_rng([0, t]))
        clients, position = np.unique(selection.clients, return_inverse=True)
        slots.append(clients)
        run_of_slot.append(np.full(clients.size, t))
        slot_weights.append(np.bincount(position, weights=selection.weights, minlength=clients.size))
    chosen = np.concatenate(slots)
    direction, _ = plan.direction(
        {"w": torch.as_tensor(updates[chosen])},
        np.concatenate(run_of_slot),
        torch.as_tensor(np.concatenate(slot_weights)),
        plan.initial_clip_norms(),
        seeds=list(range(rounds)),
        round=0,
        like={"w": torch.zeros((rounds, d), dtype=torch.float64)},
    )
    draws = direction["w"].numpy()
    error = (draws.mean(axis=0) - target) / (draws.std(axis=0, ddof=1) / math.sqrt(rounds))
    assert np.all(np.abs(error) < 4.5), error


def test_a_renormalised_design_is_refused_with_its_reason() -> None:
    with pytest.raises(FedsampleError, match="by the round's total"):
        _plan("number-of-samples", DPFedAvg())
    with pytest.raises(FedsampleError, match="update norms"):
        _plan("osmd", DPFedAvg())


def test_per_layer_clipping_keeps_the_whole_update_within_c() -> None:
    updates = {"a": torch.full((2, 4), 3.0, dtype=torch.float64), "b": torch.full((2, 9), -1.0, dtype=torch.float64)}
    factors = clip_factors(updates, torch.tensor([1.0, 100.0]), per_layer=True)
    clipped = [torch.cat([(u * factors[n].view(-1, 1))[j] for n, u in updates.items()]) for j in range(2)]
    assert float(clipped[0].norm()) <= 1.0 + 1e-12
    assert torch.equal(clipped[1], torch.cat([updates["a"][1], updates["b"][1]]))  # within its bound: unchanged
    flat = clip_factors(updates, torch.tensor([1.0, 1.0]), per_layer=False)
    assert float(flat["a"][0]) == pytest.approx(1.0 / math.sqrt(4 * 9 + 9))  # one factor over both tensors


def test_adaptive_clipping_shares_the_budget_and_moves_toward_the_quantile() -> None:
    """Andrew et al.: the count's noise z_b raises the update's to z_u with z_u^-2 + (2 z_b)^-2 = z^-2; with
    every update far above C, the clip norm grows by about exp(eta gamma) a round."""
    z_u = update_multiplier(1.0, 2.0)
    assert z_u**-2 + 4.0**-2 == pytest.approx(1.0)
    settings = DPFedAvg(clip_norm=0.1, noise_multiplier=1.0, target_quantile=0.5, count_noise_multiplier=50.0)
    plan, _ = _plan("full", settings)
    like = {"w": torch.zeros((1, 3), dtype=torch.float64)}
    updates = {"w": torch.full((20, 3), 10.0, dtype=torch.float64)}
    weights = torch.full((20,), 1.0 / 20)
    _, following = plan.direction(
        updates, np.zeros(20, dtype=np.int64), weights, np.array([0.1]), seeds=[0], round=0, like=like
    )
    # b = 0 plus noise of std z_b s = 50 / 20 = 2.5: C moves by exp(-0.2 (b - 0.5)), here up with seed 0.
    assert following[0] > 0.1
    with pytest.raises(FedsampleError, match="count_noise_multiplier"):
        DPFedAvg(noise_multiplier=4.0, target_quantile=0.5, count_noise_multiplier=1.0)


@pytest.mark.slow  # PLD curves: about 5 s
def test_the_plan_records_the_spent_epsilon_and_stops_at_the_budget() -> None:
    """The curve ends at the accountant's epsilon after T rounds; a budget below it stops the runs before
    the round that would spend more, with one line naming the run."""
    sizes = [100] * 20
    plan, federation = _plan("poisson", DPFedAvg(noise_multiplier=1.0), rounds=4, sizes=sizes)
    sampler = make_sampler("poisson")
    cost = privacy_cost(exposure_of(sampler, sampler.init(federation, 5)), noise_multiplier=1.0, rounds=4, delta=1e-5)
    assert plan.spent[0][-1] == pytest.approx(cost.epsilon_max)
    assert np.all(np.diff(plan.spent[0]) > 0)
    budget = float(plan.spent[0][1]) + 1e-3  # two rounds fit, three do not
    stopped, _ = _plan("poisson", DPFedAvg(noise_multiplier=1.0, max_epsilon=budget), rounds=4, sizes=sizes)
    assert stopped.rounds == 2
    assert stopped.stop is not None
    assert "\n" not in stopped.stop
    assert "round 3 would spend more" in stopped.stop


def test_target_epsilon_solves_each_samplers_noise() -> None:
    plan, _ = _plan("md", DPFedAvg(target_epsilon=4.0, accountant="rdp"), rounds=3, sizes=[100] * 20)
    assert plan.costs[0].epsilon_max == pytest.approx(4.0, rel=1e-3)
    assert plan.costs[0].epsilon_max <= 4.0
