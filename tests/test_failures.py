"""The failure models and the weight correction of :mod:`fedsample.participation.availability`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsample.errors import FedsampleError
from fedsample.participation.availability import (
    BernoulliAvailability,
    Dropout,
    TraceAvailability,
    hashed_uniforms,
    load_availability_trace,
)
from fedsample.participation.estimators import ReturnRateEstimator
from fedsample.participation.policies import correct_weights


def test_hashed_fates_do_not_depend_on_who_else_is_asked() -> None:
    clients = np.arange(1000)
    everyone = hashed_uniforms(3, 7, 5, clients)
    np.testing.assert_array_equal(hashed_uniforms(3, 7, 5, clients[::-1]), everyone[::-1])
    np.testing.assert_array_equal(hashed_uniforms(3, 7, 5, [17, 400]), everyone[[17, 400]])
    assert not np.array_equal(hashed_uniforms(3, 7, 6, clients), everyone)  # another round
    assert not np.array_equal(hashed_uniforms(4, 7, 5, clients), everyone)  # another seed
    assert everyone.min() >= 0
    assert everyone.max() < 1


def test_hashed_uniforms_are_uniform() -> None:
    """Decile counts of 10^5 uniforms against 10^4 each: chi-square with 9 degrees of freedom,
    below 27.9 with probability 0.999."""
    values = hashed_uniforms(0, 1, 2, np.arange(100_000))
    counts = np.bincount((values * 10).astype(int), minlength=10)
    chi2 = float(((counts - 10_000) ** 2 / 10_000).sum())
    assert chi2 < 27.9, chi2


def test_bernoulli_availability_has_its_rate() -> None:
    """Each client's rate over 4000 rounds is within 4.5 standard errors (false failure below 1e-4 for 3 clients)."""
    model = BernoulliAvailability(np.array([0.2, 0.5, 0.9]), seed=2)
    seen = np.array([model.available(t, [0, 1, 2]) for t in range(4000)])
    rates = seen.mean(axis=0)
    stderr = np.sqrt(model.probabilities(3) * (1 - model.probabilities(3)) / 4000)
    assert np.all(np.abs(rates - [0.2, 0.5, 0.9]) < 4.5 * stderr)
    np.testing.assert_array_equal(BernoulliAvailability(0.3).probabilities(4), [0.3] * 4)


def test_trace_windows_including_overlaps_and_gaps() -> None:
    trace = TraceAvailability(np.array([1, 0, 1, 1]), np.array([5, 0, 0, 2]), np.array([8, 3, 3, 4]))
    asked = np.array([0, 1, 2])
    table = np.array([trace.available(t, asked) for t in range(9)])
    assert table[:, 0].tolist() == [True, True, True, False, False, False, False, False, False]
    # client 1: [0, 3) and [2, 4) overlap, then a gap, then [5, 8)
    assert table[:, 1].tolist() == [True, True, True, True, False, True, True, True, False]
    assert not table[:, 2].any()  # no window at all
    assert trace.probabilities(3) is None


def test_trace_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("client,start,end\n0,0,2\n3,1,5\n")
    trace = load_availability_trace(path)
    assert trace.available(1, [0, 3, 2]).tolist() == [True, True, False]
    cases = {
        "client,from,to\n": "must start with the header 'client,start,end'",
        "client,start,end\n0,zero,2\n": "three integers per row. Got '0,zero,2' on line 2",
        "client,start,end\n0,3,3\n": "after the window's start",
        "client,start,end\n-1,0,3\n": "non-negative integers",
    }
    for text, match in cases.items():
        path.write_text(text)
        with pytest.raises(FedsampleError, match=match) as caught:
            load_availability_trace(path)
        assert "\n" not in str(caught.value)
        assert str(path) in str(caught.value)
    with pytest.raises(FedsampleError, match="must name a readable file"):
        load_availability_trace(tmp_path / "absent.csv")


def test_dropout_returns_at_its_rate_and_validates() -> None:
    model = Dropout(0.3, seed=1)
    returned = np.concatenate([model.returns(t, np.arange(100)) for t in range(100)])
    assert abs(returned.mean() - 0.7) < 4.5 * np.sqrt(0.21 / returned.size)
    np.testing.assert_allclose(Dropout(np.array([0.1, 0.5])).return_probabilities([1, 0, 1]), [0.5, 0.9, 0.5])
    for bad in (1.0, -0.1, np.array([0.2, 1.0]), np.array([[0.1]])):
        with pytest.raises(FedsampleError, match="The 'probability' parameter of Dropout"):
            Dropout(bad)
    with pytest.raises(FedsampleError, match="client ids in \\[0, 2\\)"):
        Dropout(np.array([0.1, 0.2])).returns(0, [2])


def test_return_rate_estimator_shrinks_towards_the_pooled_rate() -> None:
    estimator = ReturnRateEstimator(3, prior=2.0)
    np.testing.assert_array_equal(estimator.rates([0, 1, 2]), [1.0, 1.0, 1.0])  # nothing seen yet
    estimator.observe([0, 0, 1], [True, False, False])  # a client drawn twice has two entries
    assert estimator.pooled_rate() == pytest.approx(1 / 3)
    # (returns + prior * pooled) / (selections + prior)
    expected = [(1 + 2 / 3) / 4, (0 + 2 / 3) / 3, 1 / 3]
    np.testing.assert_allclose(estimator.rates([0, 1, 2]), expected)


def test_correct_weights_per_policy() -> None:
    weights = np.array([0.2, 0.3, 0.5])
    returned = np.array([True, False, True])
    np.testing.assert_allclose(correct_weights(weights, returned, "renormalise"), [0.2 / 0.7, 0, 0.5 / 0.7])
    np.testing.assert_allclose(correct_weights(weights, returned, "ignore"), [0.2, 0, 0.5])
    rates = np.array([0.5, 0.8, 0.25])
    np.testing.assert_allclose(correct_weights(weights, returned, "inverse-probability", rates), [0.4, 0, 2.0])
    nobody = np.zeros(3, dtype=bool)
    for policy in ("renormalise", "ignore", "inverse-probability"):
        assert correct_weights(weights, nobody, policy, rates).tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        (([0.5], [True], "mean"), "The 'policy' parameter of correct_weights"),
        (([0.5, 0.5], [True], "ignore"), "The 'returned' parameter of correct_weights"),
        (([0.5], [True], "inverse-probability"), "The 'return_probabilities' parameter of correct_weights"),
        (([0.5], [True], "inverse-probability", [0.0]), "The 'return_probabilities' parameter of correct_weights"),
        (([0.5], [True], "inverse-probability", [0.5, 0.5]), "The 'return_probabilities' parameter"),
    ],
)
def test_correct_weights_errors_are_one_line(arguments: tuple[object, ...], match: str) -> None:
    with pytest.raises(FedsampleError, match=match) as caught:
        correct_weights(*arguments)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_settle_participants_keeps_the_first_replies_of_a_given_reply_order() -> None:
    """The reply-order hook (the Flower strategy's real reply times) replaces the simulated order:
    the first m returned clients of the order are kept, the other returned ones are late."""
    from fedsample.participation.procedure import Selected, settle_participants
    from fedsample.participation.setting import Participation
    from fedsample.samplers import Selection

    clients = np.array([2, 5, 7, 9])
    ones = np.ones(4, dtype=bool)
    selected = Selected(
        selection=Selection(clients=clients, weights=np.full(4, 0.25)),
        clients=clients,
        weights=np.full(4, 0.25),
        available=ones,
        returns=np.array([True, True, False, True]),
        return_probabilities=np.full(4, 0.5),
        unavailable=0,
    )
    participation = Participation(over_selection=1.0, policy="inverse-probability")
    order = np.array([2, 3, 0, 1])  # client 7 replied first but had dropped out; then 9, 2, 5
    settled = settle_participants(
        selected, ones, participation, seed=0, round=0, num_kept=2, estimator=None, reply_order=order
    )
    np.testing.assert_array_equal(settled.kept, [True, False, False, True])
    assert settled.counts == {"unavailable": 0, "dropped": 1, "rejected": 0, "late": 1}
    # w_i / (r_i * m / R) with R = 3 returned and m = 2 kept.
    np.testing.assert_allclose(settled.weights, np.where(settled.kept, 0.25 / (0.5 * 2 / 3), 0.0))
    simulated = settle_participants(selected, ones, participation, seed=0, round=0, num_kept=2, estimator=None)
    assert int(simulated.kept.sum()) == 2
