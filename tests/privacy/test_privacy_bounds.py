"""Why draws with replacement are accounted by the bound that reveals the multiplicity, not by a
mixture of Gaussians (docs/privacy.md, "Draws with replacement").

MD with one draw a round (m = 1), client i drawn with probability p, every client's weight 1, noise
sigma = 1. The other clients' updates are the adversary's choice: let each be -v, where v is client
i's update (norm C = 1). With i's update the round's sum is +v when i is drawn and -v otherwise; with
it zeroed, 0 and -v. Shifted by v: N(2) w.p. p else N(0), against N(1) w.p. p else N(0). The mixture
of Gaussians (dp-accounting's MixtureOfGaussians, sensitivities 0 and 1 with probabilities 1 - p and
p) assumes the other clients' sum does not depend on whether i is drawn, and its delta is thousands
of times too small; the bound that reveals the multiplicity holds. The divergences of the true pair
are integrated here on a grid of step 1e-4 over [-15, 17].
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedsample import Federation, make_sampler
from fedsample.privacy import exposure_of

dp = pytest.importorskip("dp_accounting")

P, EPSILON = 0.01, 0.5


def hockey_stick(upper: np.ndarray, lower: np.ndarray, step: float) -> float:
    return float(np.maximum(upper - math.exp(EPSILON) * lower, 0.0).sum() * step)


def test_a_mixture_of_gaussians_undercounts_md_and_the_revealed_bound_does_not() -> None:
    x, step = np.linspace(-15, 17, 320_001, retstep=True)
    with_i = P * stats.norm.pdf(x, 2) + (1 - P) * stats.norm.pdf(x)
    zeroed = P * stats.norm.pdf(x, 1) + (1 - P) * stats.norm.pdf(x)
    true_delta = max(hockey_stick(with_i, zeroed, step), hockey_stick(zeroed, with_i, step))
    plds = dp.pld.privacy_loss_distribution
    mixture = plds.from_mixture_gaussian_mechanism(1.0, [0.0, 1.0], [1 - P, P], value_discretization_interval=1e-3)
    assert mixture.get_delta_for_epsilon(EPSILON) < true_delta / 1000
    # The accountant's own exposure of md (m = 1, client 0 of 100 equal clients: p = 0.01), one round:
    sampler = make_sampler("md")
    exposure = exposure_of(sampler, sampler.init(Federation.from_sizes([1] * 100), 1))
    (law,) = exposure.multiplicities
    revealed = plds.identity(1e-4).compute_mixture(
        plds.from_gaussian_mechanism(1.0, value_discretization_interval=1e-4), law[0]
    )
    assert law[1] == pytest.approx(P)
    assert revealed.get_delta_for_epsilon(EPSILON) >= true_delta
