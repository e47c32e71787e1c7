"""A new aggregation policy is its own class and one line of the registry (issue 33, item 2).

The policy below is defined here and registered with one ``setitem``; nothing else of the library learns
its name, and the round procedure, the engine and the config reader take it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from fedsample._arrays import BoolArray, FloatArray
from fedsample.data import FederatedDataset
from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate
from fedsample.participation import POLICY_CLASSES, Dropout, Participation, select_participants, settle_participants
from fedsample.participation.policies import OneRoundPolicy
from fedsample.samplers import UniformSampler


class Halve(OneRoundPolicy):
    """The kept clients' weights, halved (a toy correction; applied whenever a selected client could fail)."""

    name = "halve"

    def corrected(
        self, kept: FloatArray, weights: FloatArray, returned: BoolArray, return_probabilities: npt.ArrayLike | None
    ) -> FloatArray:
        return kept / 2


@pytest.fixture
def halve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POLICY_CLASSES, "halve", Halve)  # the one registry line


def _data() -> FederatedDataset:
    rng = np.random.default_rng(0)
    sizes = np.array([6, 4, 8, 5, 7, 3])
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    return FederatedDataset(
        train_features=rng.normal(size=(int(sizes.sum()), 3)).astype(np.float32),
        train_targets=rng.integers(0, 2, int(sizes.sum())),
        train_indptr=indptr,
        test_features=rng.normal(size=(12, 3)).astype(np.float32),
        test_targets=rng.integers(0, 2, 12),
        test_indptr=np.arange(0, 13, 2),
        num_classes=2,
    )


@pytest.mark.usefixtures("halve")
def test_the_round_procedure_asks_the_new_policy() -> None:
    data = _data()
    sampler = UniformSampler()
    state = sampler.init(data.federation(), 4)
    setting = Participation(dropout=Dropout(0.5, seed=1), policy="halve").for_run(0)  # type: ignore[arg-type]
    ignore = Participation(dropout=Dropout(0.5, seed=1), policy="ignore").for_run(0)
    for t in range(10):
        selected = select_participants(sampler, state, setting, seed=0, round=t, num_clients=6)
        finite = np.ones(selected.clients.size, dtype=bool)
        ours = settle_participants(selected, finite, setting, seed=0, round=t, num_kept=4, estimator=None)
        theirs = settle_participants(selected, finite, ignore, seed=0, round=t, num_kept=4, estimator=None)
        np.testing.assert_array_equal(ours.kept, theirs.kept)
        np.testing.assert_allclose(ours.weights, theirs.weights / 2)


@pytest.mark.usefixtures("halve")
def test_the_engine_runs_the_new_policy() -> None:
    data = _data()
    config = TrainingConfig(rounds=4, num_sampled=3, local_steps=1, batch_size=4, local_lr=0.1)
    model = ModelSpec(kind="mlp", input_shape=(3,), output_dim=2, hidden=4)
    runs = [RunSpec(UniformSampler(), seed=2)]

    def weight_sums(policy: str) -> np.ndarray:
        setting = Participation(dropout=Dropout(0.5, seed=3), policy=policy)  # type: ignore[arg-type]
        return np.asarray(simulate(data, model, runs, config, participation=setting)[0].history.weight_sum)

    ignored = weight_sums("ignore")
    assert ignored.min() > 0
    np.testing.assert_allclose(weight_sums("halve"), ignored / 2)


@pytest.mark.usefixtures("halve")
def test_the_config_reader_takes_the_new_policy() -> None:
    from fedsample.experiments.config import config_from_dict

    participation = {"policy": "halve", "dropout": 0.2}
    table = {"name": "new-policy", "samplers": [{"name": "uniform"}], "participation": participation}
    config = config_from_dict(table)
    assert config.participation.policy == "halve"


def test_an_unregistered_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="'policy' parameter of Participation"):
        Participation(policy="halve")  # type: ignore[arg-type]
