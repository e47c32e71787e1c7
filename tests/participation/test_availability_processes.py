"""The Markov and cyclic availability processes (FedAU's experiments) against their laws, by Monte Carlo.

Every statistical check is a z-test at 5 standard errors on a fixed seed (two-sided normal tail
5.7e-7 per check; a few dozen checks here, so a false failure below 1e-4 if the seeds were drawn anew).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample.errors import FedsampleError
from fedsample.participation import (
    CyclicAvailability,
    MarkovAvailability,
    Participation,
    label_correlated_rates,
)

Z = 5.0


def _close(successes: np.ndarray, trials: int, probability: float) -> None:
    """A binomial proportion against its probability, within Z standard errors."""
    stderr = np.sqrt(probability * (1 - probability) / trials)
    assert abs(successes.sum() / trials - probability) <= Z * stderr + 1e-12


# (on_to_off b, off_to_on a): persistent (a + b < 1), anti-persistent (a + b > 1), FedAU's markov-0.05 at
# p = 0.1 (b = 0.45), a slow chain (about 100 rounds of memory), and a = 1 - b (no memory at all).
CHAINS = [(0.3, 0.1), (0.9, 0.7), (0.45, 0.05), (0.005, 0.005), (0.6, 0.4)]


@pytest.mark.parametrize(("on_to_off", "off_to_on"), CHAINS)
def test_the_markov_chain_is_stationary_and_moves_with_its_transition_probabilities(
    on_to_off: float, off_to_on: float
) -> None:
    chain = MarkovAvailability(on_to_off, off_to_on, seed=3)
    clients = np.arange(40_000)
    stationary = off_to_on / (on_to_off + off_to_on)
    np.testing.assert_allclose(chain.probabilities(5), stationary)
    for t in (0, 1, 57):
        _close(chain.available(t, clients), clients.size, stationary)
    now, next_round, later = (chain.available(t, clients) for t in (57, 58, 60))
    # One step: P(on | on) = 1 - b and P(on | off) = a.
    _close(next_round[now], int(now.sum()), 1 - on_to_off)
    _close(next_round[~now], int((~now).sum()), off_to_on)
    # Three steps: P(on at t + 3 | on at t) = pi + (1 - pi) (1 - a - b)^3.
    _close(later[now], int(now.sum()), stationary + (1 - stationary) * (1 - off_to_on - on_to_off) ** 3)


def test_a_client_s_markov_fate_does_not_depend_on_who_else_is_asked() -> None:
    chain = MarkovAvailability(np.linspace(0.01, 0.99, 50), np.linspace(0.9, 0.02, 50), seed=1)
    everyone = chain.available(40, np.arange(50))
    one_by_one = [bool(chain.available(40, [i])[0]) for i in range(50)]
    assert everyone.tolist() == one_by_one
    shuffled = np.random.default_rng(0).permutation(50)
    assert chain.available(40, shuffled).tolist() == everyone[shuffled].tolist()
    assert chain.available(40, np.arange(50).reshape(5, 10)).ravel().tolist() == everyone.tolist()


def test_the_stationary_chain_follows_fedau_s_parametrisation() -> None:
    chain = MarkovAvailability.stationary(np.array([0.1, 0.5, 0.02]), off_to_on=0.05)
    # FedAU: a = q, b = q (1/p - 1); where b > 1 both are divided by b.
    np.testing.assert_allclose(chain.off_to_on, [0.05, 0.05, 0.05 / 2.45])
    np.testing.assert_allclose(chain.on_to_off, [0.45, 0.05, 1.0])
    np.testing.assert_allclose(chain.probabilities(3), [0.1, 0.5, 0.02])
    scaled = MarkovAvailability.stationary(0.01, off_to_on=0.5)
    assert (scaled.on_to_off, scaled.off_to_on) == (1.0, pytest.approx(0.5 / 49.5))
    np.testing.assert_allclose(scaled.probabilities(2), 0.01)


def test_cyclic_windows_follow_fedau_s_definition() -> None:
    probabilities = np.array([0.1, 0.25, 0.5, 0.995, 0.0, 0.035])
    cyclic = CyclicAvailability(probabilities, period=20, seed=2)
    on, off = cyclic.windows(np.arange(6))
    # A = max(1, rint(C p)) (half to even: rint(0.7) = 1, rint(5) = 5), I = max(1, C - A).
    assert on.tolist() == [2, 5, 10, 20, 1, 1]
    assert off.tolist() == [18, 15, 10, 1, 19, 19]
    offsets = cyclic.offsets(np.arange(6))
    assert np.all((offsets >= 0) & (offsets < off))
    rounds = np.arange(400)
    pattern = np.array([cyclic.available(t, np.arange(6)) for t in rounds])
    for i in range(6):
        period = on[i] + off[i]
        # Off for the first u_i rounds, then on A_i, off I_i, periodically.
        assert not pattern[: offsets[i], i].any()
        assert pattern[offsets[i] : offsets[i] + on[i], i].all()
        np.testing.assert_array_equal(pattern[period:, i], pattern[:-period, i])
        assert pattern[offsets[i] : offsets[i] + 10 * period, i].sum() == 10 * on[i]
    np.testing.assert_allclose(cyclic.probabilities(6), on / (on + off))


def test_cyclic_offsets_are_uniform_over_the_off_rounds() -> None:
    cyclic = CyclicAvailability(0.3, period=10, seed=5)  # A = 3, I = 7: offsets uniform on {0, ..., 6}
    offsets = cyclic.offsets(np.arange(70_000))
    for value in range(7):
        _close(offsets == value, offsets.size, 1 / 7)


def test_label_correlated_rates_follow_fedau_s_construction() -> None:
    counts = np.zeros((1000, 10), dtype=np.int64)
    counts[np.arange(1000), np.arange(1000) % 10] = 30  # one label per client, balanced overall
    rates = label_correlated_rates(counts, mean=0.1, minimum=0.02, alpha=0.1, seed=4)
    assert rates.min() >= 0.02
    assert rates.max() <= 1.0
    assert len(np.unique(rates)) <= 10  # one rate per label
    # Balanced labels: the mean rate is C * mean * E[v_c] = mean, but for the floor's lift.
    assert 0.1 <= rates.mean() <= 0.1 + 0.02
    assert np.array_equal(rates, label_correlated_rates(counts, mean=0.1, minimum=0.02, alpha=0.1, seed=4))
    assert not np.array_equal(rates, label_correlated_rates(counts, mean=0.1, minimum=0.02, alpha=0.1, seed=5))


def test_the_processes_are_reseeded_per_run() -> None:
    setting = Participation(availability=MarkovAvailability.stationary(0.5, off_to_on=0.2, seed=0))
    one, two = setting.for_run(1).availability, setting.for_run(2).availability
    assert isinstance(one, MarkovAvailability)
    assert isinstance(two, MarkovAvailability)
    assert one.seed != two.seed
    assert one.available(9, np.arange(200)).tolist() != two.available(9, np.arange(200)).tolist()
    cyclic = Participation(availability=CyclicAvailability(0.2, period=50)).for_run(3).availability
    assert isinstance(cyclic, CyclicAvailability)
    assert cyclic.seed != 0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: MarkovAvailability(0.1, 0.0), r"The 'off_to_on' parameter of MarkovAvailability must be a float in "),
        (lambda: MarkovAvailability(1.5, 0.1), r"The 'on_to_off' parameter of MarkovAvailability must be a float in "),
        (
            lambda: MarkovAvailability(np.array([0.1, 0.0]), np.array([0.2, 0.0])),
            r"'on_to_off' .* must be positive where 'off_to_on' is 0 .* Got 1 instead",
        ),
        (lambda: MarkovAvailability(np.ones(3) * 0.1, np.ones(2) * 0.1), r"'off_to_on' .* must be one value or 3"),
        (lambda: MarkovAvailability.stationary(0.0), r"'probability' parameter of MarkovAvailability.stationary"),
        (lambda: MarkovAvailability.stationary(0.5, off_to_on=0.0), r"'off_to_on' .* range \(0, 1\]"),
        (lambda: CyclicAvailability(0.5, period=1), r"The 'period' parameter of CyclicAvailability must be an int"),
        (lambda: CyclicAvailability(-0.1), r"The 'probability' parameter of CyclicAvailability must be"),
        (lambda: label_correlated_rates(np.ones(4)), r"The 'label_counts' parameter of label_correlated_rates"),
        (lambda: label_correlated_rates(np.ones((4, 2)), alpha=0.0), r"'alpha' .* range \(0, inf\)"),
    ],
)
def test_bad_parameters_are_one_line_errors(build: object, message: str) -> None:
    with pytest.raises(FedsampleError, match=message) as info:
        build()  # type: ignore[operator]
    assert "\n" not in str(info.value)


def test_the_markov_chain_read_back_equals_the_chain_stepped_forward() -> None:
    """The block-wise read back (coupling from the past) against the chain stepped round by round with
    the same hashed uniforms: identical paths, persistent and anti-persistent chains alike."""
    from fedsample.participation.availability import hashed_uniforms
    from fedsample.participation.processes import _SALT_MARKOV_MOVE, _SALT_MARKOV_START

    b = np.array([0.3, 0.9, 0.45, 0.005, 0.6, 0.0, 1.0])
    a = np.array([0.1, 0.7, 0.05, 0.005, 0.4, 0.2, 0.0])
    chain = MarkovAvailability(b, a, seed=9)
    clients = np.arange(b.size)
    state = hashed_uniforms(9, _SALT_MARKOV_START, 0, clients) < a / (a + b)
    for t in range(300):
        if t:
            u = hashed_uniforms(9, _SALT_MARKOV_MOVE, t, clients)
            state = np.where(state, u < 1 - b, u < a)
        assert chain.available(t, clients).tolist() == state.tolist(), t
