"""DivFL as released (issue 25, item 2): every client's vector before the first selection, and the
authors' representative vector (the full-batch gradient) as the default."""

from __future__ import annotations

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection
from fedsample.samplers import DivFLSampler
from fedsample.samplers.two_phase import FirstPhase, phase_due

# Three tight groups of clients in R^2: DivFL with m = 3 picks one client of each.
GROUPS = np.repeat([0, 1, 2], [4, 3, 5])
CENTRES = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
N = GROUPS.size


def _vectors(seed: int) -> np.ndarray:
    return CENTRES[GROUPS] + 0.01 * np.random.default_rng(seed).normal(size=(N, 2))


def _report(vectors: np.ndarray, field: str) -> Feedback:
    everyone = np.arange(N)
    selection = Selection(clients=everyone, weights=np.full(N, 1.0 / N))
    return Feedback(round=0, selection=selection, clients=everyone, **{field: vectors})


def test_the_first_phase_is_every_clients_gradient_by_default() -> None:
    federation = Federation.from_sizes([3] * N)
    default = DivFLSampler()
    assert default.representative == "gradient"
    assert "gradients" in default.reads
    assert "updates" not in default.reads
    assert phase_due(default, default.init(federation, 3)) == FirstPhase(report="gradients")
    update = DivFLSampler(representative="update")
    assert "updates" in update.reads
    assert "gradients" not in update.reads
    assert phase_due(update, update.init(federation, 3)) == FirstPhase(report="updates", vectors=True)
    assert phase_due(DivFLSampler(initial_report=False), default.init(federation, 3)) is None


@pytest.mark.parametrize(("representative", "field"), [("gradient", "gradients"), ("update", "updates")])
def test_with_the_initial_report_the_first_selection_covers_every_group(representative: str, field: str) -> None:
    """The authors' round 0: every client's vector known, the greedy takes one client of each group,
    in each of 20 seeds. Without the report (every client the zero vector) the first round is uniform
    and misses a group in most seeds (P(one of each) = 4*3*5 / C(12, 3) = 0.27)."""
    federation = Federation.from_sizes([3] * N)
    misses = 0
    for seed in range(20):
        sampler = DivFLSampler(representative=representative)  # type: ignore[arg-type]
        state = sampler.update(sampler.init(federation, 3), _report(_vectors(seed), field))
        assert phase_due(sampler, state) is None
        clients = sampler.sample(state, np.random.default_rng(seed)).clients
        assert sorted(GROUPS[clients].tolist()) == [0, 1, 2]
        cold = DivFLSampler(representative=representative, initial_report=False)  # type: ignore[arg-type]
        first = cold.sample(cold.init(federation, 3), np.random.default_rng(seed)).clients
        misses += sorted(GROUPS[first].tolist()) != [0, 1, 2]
    assert misses >= 8


def test_the_gradient_representative_reads_feedback_gradients_not_updates() -> None:
    federation = Federation.from_sizes([3] * N)
    sampler = DivFLSampler()
    state = sampler.init(federation, 3)
    with pytest.raises(FedsampleError, match=r"vectors \(gradients\)"):
        sampler.update(state, _report(_vectors(0), "updates"))
    state = sampler.update(state, _report(_vectors(0), "gradients"))
    np.testing.assert_allclose(state.gradients, _vectors(0).astype(np.float32))
