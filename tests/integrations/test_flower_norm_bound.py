"""The strategy's optional norm bound (issue 24): an update whose norm exceeds ``norm_bound`` times the
round's median update norm is clipped to it, or rejected; off by default (the other Flower tests run
without it, unchanged)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, client_of  # noqa: E402

import fedsample  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_reply  # noqa: E402
from fedsample.samplers import Feedback  # noqa: E402

pytestmark = pytest.mark.usefixtures("task_identity")  # node 0's task identity (conftest.py)

NODES = [901, 17, 4400, 250]
SIZES = [30, 10, 60, 100]
THETA = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], dtype=np.float32)}
SHIFTS = [1000.0, 0.1, 0.2, 0.3]  # client 0 plants a huge update; each update is shift * ones(6)


def _trained(client: int) -> dict[str, np.ndarray]:
    return {n: v + np.float32(SHIFTS[client]) for n, v in THETA.items()}


def _norm(client: int) -> float:
    return float(np.sqrt(sum(np.sum((_trained(client)[n] - v).astype(np.float64) ** 2) for n, v in THETA.items())))


def _round(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[FedsampleStrategy, Any, Any, Feedback]:
    """Full participation of the four clients, client 0's update huge; the feedback the sampler got."""
    sampler = fedsample.make_sampler("full")
    seen: list[Feedback] = []
    update = type(sampler).update

    def recording(self: Any, state: Any, feedback: Feedback) -> Any:
        seen.append(feedback)
        return update(self, state, feedback)

    monkeypatch.setattr(type(sampler), "update", recording)
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=4, seed=0, **kwargs)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    replies = [train_reply(m, _trained(client_of(m)), num_examples=SIZES[client_of(m)]) for m in messages]
    arrays, metrics = strategy.aggregate_train(1, replies)
    return strategy, arrays, metrics, seen[0]


def _model(weights: dict[int, float], scale: dict[int, float]) -> dict[str, np.ndarray]:
    return {
        n: v + sum(w * scale.get(c, 1.0) * (_trained(c)[n].astype(np.float64) - v) for c, w in weights.items())
        for n, v in THETA.items()
    }


def test_a_planted_huge_update_is_clipped_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy, arrays, metrics, feedback = _round(monkeypatch, norm_bound=3.0)
    record = strategy.rounds[-1]
    # The lower median of the four norms is client 2's (0.2 * sqrt(6)): the bound is three times it.
    bound = 3.0 * _norm(2)
    assert (metrics["beyond-norm-bound"], metrics["returned"], metrics["failures"]) == (1, 4, 0)
    expected = _model({c: float(record.weights[c]) for c in range(4)}, {0: bound / _norm(0)})
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], rtol=0, atol=1e-5)
    # The sampler reads the clipped update's norm; the others are unchanged.
    np.testing.assert_allclose(feedback.update_norms, [bound, _norm(1), _norm(2), _norm(3)], rtol=1e-6)


def test_a_planted_huge_update_is_rejected_and_the_policy_corrects_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy, arrays, metrics, feedback = _round(
        monkeypatch, norm_bound=3.0, norm_bound_action="reject", policy="renormalise"
    )
    record = strategy.rounds[-1]
    assert (metrics["rejected"], metrics["beyond-norm-bound"], metrics["returned"]) == (1, 1, 3)
    np.testing.assert_array_equal(record.returned, [False, True, True, True])
    assert record.applied.sum() == pytest.approx(record.weights.sum())  # renormalised over the three
    expected = _model({c: float(record.applied[c]) for c in (1, 2, 3)}, {})
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected[name], rtol=0, atol=1e-6)
    assert feedback.clients.tolist() == [1, 2, 3]


def test_two_updates_one_huge_the_bound_follows_the_smaller(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two updates the lower median is the smaller one: the huge update cannot raise its own bound."""
    strategy = FedsampleStrategy(fedsample.make_sampler("full"), sizes=SIZES[:2], num_sampled=2, norm_bound=2.0)
    messages = FakeGrid(NODES[:2]).configure(strategy, to_array_record(THETA))
    # Clients 0 and 1 are the sorted nodes 17 and 901: client 0 plants the huge update.
    replies = [train_reply(m, _trained(client_of(m)), num_examples=5) for m in messages]
    _, metrics = strategy.aggregate_train(1, replies)
    assert metrics is not None
    assert metrics["beyond-norm-bound"] == 1


def test_the_knob_is_declared_in_the_parameter_table_and_off_by_default() -> None:
    table = FedsampleStrategy.parameters().parameters
    assert (table["norm_bound"].default, table["norm_bound_action"].default) == (None, "clip")
    assert FedsampleStrategy(fedsample.MDSampler(), num_sampled=2, sizes=SIZES).norm_bound is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"norm_bound": 0.5},
            r"'norm_bound' parameter of FedsampleStrategy must be None or a float in the range \[1, inf\)\. Got 0\.5",
        ),
        ({"norm_bound": math.nan}, "'norm_bound' parameter of FedsampleStrategy must be .*Got nan"),
        ({"norm_bound": math.inf}, "'norm_bound' parameter of FedsampleStrategy must be .*Got inf"),
        ({"norm_bound": "3"}, "'norm_bound' parameter of FedsampleStrategy must be .*Got '3'"),
        (
            {"norm_bound": 2.0, "norm_bound_action": "drop"},
            "'norm_bound_action' parameter of FedsampleStrategy must be one of",
        ),
        ({"norm_bound_action": "reject"}, "'norm_bound_action' parameter of FedsampleStrategy must be 'clip'"),
    ],
    ids=["below-1", "nan", "inf", "a-string", "unknown-action", "reject-without-bound"],
)
def test_a_bad_knob_is_one_error_naming_it(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(FedsampleError, match=message) as error:
        FedsampleStrategy(fedsample.MDSampler(), num_sampled=2, sizes=SIZES, **kwargs)
    assert "\n" not in str(error.value)
