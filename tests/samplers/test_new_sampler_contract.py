"""The narrow sampler contract: a sampler declares what it reads, and its callers gather exactly that.

A sampler that reads a new kind of feedback is added by its own code and one gatherer line (here
``monkeypatch.setitem(FEEDBACK_GATHERERS, ...)``, in the library a line of the engine's table): no flag
of the base class, no field of ``Feedback``, no edit of the round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from fedsample import Federation
from fedsample.data import FederatedDataset
from fedsample.designs import Design
from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate
from fedsample.engine.round_step import FEEDBACK_GATHERERS, RunRound
from fedsample.errors import FedsampleError
from fedsample.samplers import (
    FEEDBACK_FIELDS,
    ROUND_FIELDS,
    DesignState,
    Feedback,
    MDSampler,
    Sampler,
    Selection,
    gather_feedback,
    sampler_class,
    sampler_names,
)

SIZES = (5, 9, 3, 7, 12, 4, 20, 6)


@dataclass(frozen=True)
class Seen:
    inner: DesignState
    feedback: tuple[Feedback, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RowsReadingSampler(MDSampler):
    """md sampling that reads one kind of feedback no built-in sampler reads: how many rows each
    returned client holds (an extra, ``Feedback.extras["rows"]``), and nothing else."""

    name: ClassVar[str] = "test-rows-md"
    reads: ClassVar[frozenset[str]] = frozenset({"rows"})

    def init(self, federation: Federation, num_sampled: int) -> Seen:  # type: ignore[override]
        return Seen(inner=super().init(federation, num_sampled))

    def design(self, state: Seen) -> Design:  # type: ignore[override]
        return super().design(state.inner)

    def update(self, state: Seen, feedback: Feedback) -> Seen:  # type: ignore[override]
        return Seen(inner=state.inner, feedback=(*state.feedback, feedback))


def _rows(run: RunRound) -> np.ndarray:
    offsets = run.setup.offsets
    return (offsets[run.clients + 1] - offsets[run.clients]).astype(np.float64)


def _simulate(sampler: Sampler[Any]) -> Any:
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(SIZES)]).astype(np.int64)
    data = FederatedDataset(
        train_features=rng.normal(size=(int(sum(SIZES)), 4)).astype(np.float32),
        train_targets=rng.integers(0, 3, int(sum(SIZES))),
        train_indptr=offsets,
        test_features=rng.normal(size=(8, 4)).astype(np.float32),
        test_targets=rng.integers(0, 3, 8),
        test_indptr=np.arange(9, dtype=np.int64),
        num_classes=3,
    )
    spec = ModelSpec("mlp", data.sample_shape, 3)
    config = TrainingConfig(rounds=2, num_sampled=3, local_steps=1, batch_size=4, local_lr=0.1)
    return simulate(data, spec, [RunSpec(sampler, seed=3)], config, init_seed=1)[0]


def test_a_new_kind_of_feedback_needs_one_gatherer_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FEEDBACK_GATHERERS, "rows", _rows)  # the one line that teaches the engine "rows"
    feedback = _simulate(RowsReadingSampler()).sampler_state.feedback
    assert len(feedback) == 2
    for one in feedback:
        assert set(one.extras) == {"rows"}
        np.testing.assert_array_equal(one.extras["rows"], np.asarray(SIZES, dtype=np.float64)[one.clients])
        # exactly what it declared: none of the fields it did not name was gathered
        assert all(getattr(one, name) is None for name in FEEDBACK_FIELDS)


def test_a_kind_of_feedback_nobody_gathers_is_refused_by_name() -> None:
    with pytest.raises(FedsampleError, match="rows") as caught:
        _simulate(RowsReadingSampler())
    assert caught.value.parameter == "reads"


def test_gather_feedback_calls_only_the_gatherers_of_the_reads() -> None:
    called: list[str] = []

    def gatherer(name: str, value: Any) -> Any:
        return lambda: called.append(name) or value

    table = {"losses": gatherer("losses", np.ones(2)), "updates": gatherer("updates", np.ones((2, 3)))}
    selection = Selection(clients=np.array([0, 1]), weights=np.array([0.5, 0.5]))
    one = gather_feedback(
        frozenset({"losses"}), table, round=0, selection=selection, clients=np.array([0, 1]), owner="test"
    )
    assert called == ["losses"]
    assert one.updates is None
    np.testing.assert_array_equal(one.losses, [1.0, 1.0])


def test_every_registered_sampler_declares_reads_instead_of_flags() -> None:
    for name in sampler_names():
        cls = sampler_class(name)
        for flag in ("needs_updates", "needs_gradients", "needs_loss_squares", "known_durations"):
            assert not hasattr(cls, flag), f"{name} still has {flag}"
        reads = cls.reads if isinstance(cls.reads, frozenset) else cls().reads  # DivFL's depend on a parameter
        assert ROUND_FIELDS <= reads <= FEEDBACK_FIELDS, name
    assert "loss_squares" in sampler_class("oort").reads
    assert sampler_class("oort").init_reads == {"durations"}
    assert {"updates"} <= sampler_class("hics-fl").reads
    assert sampler_class("md").reads == ROUND_FIELDS
    assert sampler_class("md").init_reads == frozenset()
