"""An empirical audit of DP-FedAvg (issue 36 item 4, Jagielski et al. 2020 style): a canary client with a
planted update, its membership tested over many runs, gives an empirical epsilon lower bound that must
stay below the accounted epsilon.

Federation of 20 equal clients, Poisson sampling with m = 10 (q = 0.5, weight 0.1 = s), C = 1, z = 1,
one round, delta = 1e-5, 3,000 runs with the canary and 3,000 without (measured on the shared 2-core
machine: an empirical lower bound of 0.735 against an accounted epsilon of 2.133). The canary's update
is 10 e_1 (clipped to e_1) in the runs "in" and zeroed
in the runs "out" (the accountant's adjacency); the other clients' updates lie in the other coordinates.
The attack is the best threshold on the sum over rounds of the direction's first coordinate, chosen on
half of the runs and scored on the other half; with Clopper-Pearson upper bounds at 97.5% (one-sided) on
the false positive and negative rates, the bound ``max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR))``
holds with confidence at least 95%.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsample import Federation, make_sampler
from fedsample.privacy import DPFedAvg, plan_privacy

pytest.importorskip("dp_accounting")
stats = pytest.importorskip("scipy.stats")

TRIALS, ROUNDS, DELTA, M = 3000, 1, 1e-5, 10


def _statistics(canary_in: bool, seeds: range) -> np.ndarray:
    federation = Federation.from_sizes([50] * 20)
    sampler = make_sampler("poisson")
    state = sampler.init(federation, M)
    settings = DPFedAvg(clip_norm=1.0, noise_multiplier=1.0, delta=DELTA, accountant="rdp")
    plan = plan_privacy(settings, federation, [sampler] * len(seeds), M, ROUNDS, ["poisson"] * len(seeds))
    rng = np.random.default_rng(1)
    updates = np.zeros((20, 4))
    updates[1:, 1:] = rng.normal(size=(19, 3))
    if canary_in:
        updates[0, 0] = 10.0  # clipped to norm 1
    total = np.zeros(len(seeds))
    for t in range(ROUNDS):
        slots, runs, weights = [], [], []
        for r, seed in enumerate(seeds):
            selection = sampler.sample(state, np.random.default_rng([seed, t]))
            slots.append(selection.clients)
            runs.append(np.full(selection.clients.size, r))
            weights.append(selection.weights)
        chosen = np.concatenate(slots)
        direction, _ = plan.direction(
            {"w": torch.as_tensor(updates[chosen])},
            np.concatenate(runs),
            torch.as_tensor(np.concatenate(weights)),
            plan.initial_clip_norms(),
            seeds=list(seeds),
            round=t,
            like={"w": torch.zeros((len(seeds), 4), dtype=torch.float64)},
        )
        total += direction["w"][:, 0].numpy()
    return total


def _upper(failures: int, trials: int) -> float:
    """Clopper-Pearson one-sided 97.5% upper bound of a rate."""
    return 1.0 if failures >= trials else float(stats.beta.ppf(0.975, failures + 1, trials - failures))


def empirical_epsilon() -> tuple[float, float]:
    """The audit's lower bound and the accounted epsilon of the canary."""
    inside = _statistics(True, range(0, TRIALS))
    outside = _statistics(False, range(TRIALS, 2 * TRIALS))
    half = TRIALS // 2
    candidates = np.quantile(np.concatenate([inside[:half], outside[:half]]), np.linspace(0.5, 0.999, 200))

    def bound(threshold: float, a: np.ndarray, b: np.ndarray) -> float:
        fpr = _upper(int((b > threshold).sum()), b.size)
        fnr = _upper(int((a <= threshold).sum()), a.size)
        values = [(1 - DELTA - fnr) / fpr, (1 - DELTA - fpr) / fnr]
        return max(math.log(v) if v > 0 else -math.inf for v in values)

    best = max(candidates, key=lambda c: bound(c, inside[:half], outside[:half]))
    federation = Federation.from_sizes([50] * 20)
    plan = plan_privacy(
        DPFedAvg(noise_multiplier=1.0, delta=DELTA, accountant="rdp"),
        federation,
        [make_sampler("poisson")],
        2,
        ROUNDS,
        ["p"],
    )
    return bound(best, inside[half:], outside[half:]), float(plan.costs[0].epsilon[0])


@pytest.mark.slow  # about 10 s: 6,000 draws and a round of 6,000 runs
def test_the_audits_empirical_epsilon_stays_below_the_accounted_one() -> None:
    measured, accounted = empirical_epsilon()
    assert 0.0 < measured < accounted, (measured, accounted)


if __name__ == "__main__":
    measured, accounted = empirical_epsilon()
    print(f"empirical epsilon lower bound {measured:.3f}, accounted epsilon {accounted:.3f}")
