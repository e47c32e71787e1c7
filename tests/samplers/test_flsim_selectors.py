"""FLSim's selectors as released (issue 25, item 3): high-loss's initial evaluation and temperature
convention, number-of-samples (successive sampling by size, not MD) and sequential."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, Selection, make_sampler
from fedsample.cli import main
from fedsample.samplers import HighLossSampler, NumberOfSamplesSampler, SequentialSampler
from fedsample.samplers.two_phase import FirstPhase, phase_due
from fedsample.stats import monte_carlo_statistics

SIZES = [5, 1, 3, 8, 2, 6, 4, 1, 9, 12]
N = len(SIZES)


# --- high-loss ----------------------------------------------------------------------------------


def test_high_loss_evaluates_every_clients_loss_before_its_first_selection() -> None:
    """FLSim's first call evaluates every user's loss: a first phase of losses over all local data, due
    until the state reads a feedback; initial_evaluation=False has none."""
    sampler = HighLossSampler()
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    assert phase_due(sampler, state) == FirstPhase(report="losses")
    losses = np.linspace(0.0, 1.0, N)
    report = Feedback(
        round=0, selection=Selection(clients=np.arange(N), weights=np.full(N, 0.1)), clients=np.arange(N), losses=losses
    )
    state = sampler.update(state, report)
    assert phase_due(sampler, state) is None
    np.testing.assert_array_equal(state.losses, losses)
    assert phase_due(HighLossSampler(initial_evaluation=False), sampler.init(Federation.from_sizes(SIZES), 3)) is None


def test_high_loss_first_draw_after_the_evaluation_follows_the_losses() -> None:
    """With every loss known the first round is softmax(beta * loss), not uniform: with beta = 5 and
    losses 0..1, client 9 is drawn (m = 1) with probability 0.428 (uniform: 0.1). The check, above 0.3
    in 4000 rounds, is 16 standard errors below 0.428 and 26 above uniform."""
    sampler = HighLossSampler(inverse_temperature=5.0)
    state = sampler.init(Federation.from_sizes(SIZES), 1)
    report = Feedback(
        round=0,
        selection=Selection(clients=np.arange(N), weights=np.full(N, 0.1)),
        clients=np.arange(N),
        losses=np.linspace(0.0, 1.0, N),
    )
    state = sampler.update(state, report)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(2), num_rounds=4000)
    assert mc.p_included.value[9] > 0.3


def test_the_old_temperature_is_refused_with_a_one_line_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """temperature divided the loss, FLSim's softmax_temperature multiplies it: the old name is refused
    (make_sampler, a config file, --param) with the rename, never read as either."""
    with pytest.raises(FedsampleError, match="inverse_temperature = 1 / temperature") as info:
        make_sampler("high-loss", temperature=0.5)
    assert info.value.parameter == "temperature"
    config = tmp_path / "c.toml"
    config.write_text('name = "x"\n[[samplers]]\nname = "high-loss"\ntemperature = 0.5\n')
    assert main(["run", str(config), "-o", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'samplers[0].temperature' key" in err
    assert "inverse_temperature = 1 / temperature" in err
    assert not (tmp_path / "run").exists()
    assert (
        main(
            [
                "run",
                "default",
                "--sampler",
                "high-loss",
                "--param",
                "high-loss.temperature=2",
                "-o",
                str(tmp_path / "run2"),
            ]
        )
        == 2
    )
    assert "inverse_temperature" in capsys.readouterr().err


# --- number-of-samples ----------------------------------------------------------------------------


def _successive_inclusion(weights: np.ndarray, m: int) -> np.ndarray:
    """P(i in S) of m successive draws without replacement with probabilities ∝ weights (enumerated)."""
    n = weights.size
    out = np.zeros(n)
    for order in itertools.permutations(range(n), m):
        prob, left = 1.0, weights.sum()
        for i in order:
            prob *= weights[i] / left
            left -= weights[i]
        out[list(order)] += prob
    return out


def test_number_of_samples_draws_distinct_clients_successively_by_size() -> None:
    """FLSim's torch.multinomial(n_i^e, m, replacement=False): P(i in S) of successive sampling,
    within 5 standard errors for every client over 8000 draws (false failure below 6e-6 per client),
    never a repeat; MD (with replacement) repeats clients and has other inclusion probabilities."""
    sizes = np.array([5, 1, 3, 8, 2, 6])
    federation = Federation.from_sizes(sizes)
    for exponent in (1.0, 0.5):
        sampler = NumberOfSamplesSampler(exponent=exponent)
        state = sampler.init(federation, 3)
        mc = monte_carlo_statistics(sampler, state, np.random.default_rng(3), num_rounds=8_000)
        assert np.all(mc.p_included.deviation(_successive_inclusion(sizes**exponent, 3)) < 5)
        rng = np.random.default_rng(4)
        assert all(np.unique(sampler.sample(state, rng).clients).size == 3 for _ in range(200))
    md = make_sampler("md")
    md_state = md.init(federation, 3)
    rng = np.random.default_rng(5)
    assert sum(3 - np.unique(md.sample(md_state, rng).clients).size for _ in range(200)) > 50


def test_number_of_samples_weighs_by_size_among_the_available() -> None:
    sampler = NumberOfSamplesSampler()
    state = sampler.init(Federation.from_sizes(SIZES), 2)
    feedback = Feedback(
        round=0,
        selection=Selection(clients=np.array([0]), weights=np.ones(1)),
        clients=np.array([0]),
        available=np.array([1, 3, 5]),
    )
    state = sampler.update(state, feedback)
    rng = np.random.default_rng(6)
    for _ in range(50):
        selection = sampler.sample(state, rng)
        assert set(selection.clients.tolist()) <= {1, 3, 5}
        p = np.asarray(SIZES, dtype=float)[selection.clients]
        np.testing.assert_allclose(selection.weights, p / p.sum(), rtol=1e-12)


# --- sequential -----------------------------------------------------------------------------------


def test_sequential_is_flsims_sequence() -> None:
    """FLSim's SequentialActiveUserSelector with n = 23, m = 5: [0, 5), ..., [20, 23), then from 0 again."""
    sampler = SequentialSampler()
    state = sampler.init(Federation.from_sizes([1] * 23), 5)
    rounds = []
    for t in range(12):
        selection = sampler.sample(state, np.random.default_rng(t))
        rounds.append(selection.clients.tolist())
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=np.unique(selection.clients)))
    cycle = [list(range(0, 5)), list(range(5, 10)), list(range(10, 15)), list(range(15, 20)), [20, 21, 22]]
    assert rounds == (cycle * 3)[:12]


def test_sequential_skips_unavailable_clients() -> None:
    sampler = SequentialSampler()
    state = sampler.init(Federation.from_sizes([1] * 10), 3)
    feedback = Feedback(
        round=0,
        selection=Selection(clients=np.array([0]), weights=np.ones(1)),
        clients=np.array([0]),
        available=np.array([0, 2, 3, 5, 7, 8, 9]),
    )
    state = sampler.update(state, feedback)
    assert state.cursor == 3  # the round drawn from the state before the feedback was 0, 1, 2
    assert sampler.sample(state, np.random.default_rng(0)).clients.tolist() == [3, 5, 7]
    with pytest.raises(FedsampleError):
        make_sampler("sequential", order="random")
