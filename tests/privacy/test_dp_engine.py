"""DP-FedAvg through the engine and the config (issue 36 items 1 and 3): the spent epsilon recorded per
round, the budget's one-line stop, what a private simulation refuses, and the ``[privacy]`` table."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from fedsample.engine import RunSpec, TrainingConfig, simulate
from fedsample.engine.algorithms import Scaffold
from fedsample.errors import FedsampleError
from fedsample.experiments.config import config_from_dict, config_to_dict
from fedsample.experiments.results.metrics import PRIVACY_COLUMNS, metrics_table
from fedsample.privacy import DPFedAvg, PrivacyBudgetWarning
from fedsample.samplers import PoissonSampler

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from engine_cases import classification_data, spec_for

pytest.importorskip("dp_accounting")

DATA = classification_data(0, sizes=(12,) * 8)
CONFIG = TrainingConfig(rounds=3, num_sampled=4, local_steps=2, batch_size=4, eval_every=3)


def _run(privacy: DPFedAvg | None, **options):  # type: ignore[no-untyped-def]
    runs = [RunSpec(PoissonSampler(), seed=1)]
    return simulate(DATA, spec_for("softmax", DATA), runs, CONFIG, privacy=privacy, **options)


@pytest.mark.slow  # about 3 s: the accountant's plan and three rounds
def test_a_private_run_records_its_spent_epsilon_and_is_reproducible() -> None:
    settings = DPFedAvg(clip_norm=0.5, noise_multiplier=1.0, accountant="rdp")
    first, second = _run(settings)[0], _run(settings)[0]
    plain = _run(None)[0]
    assert first.history.epsilon_spent is not None
    assert np.all(np.diff(first.history.epsilon_spent) > 0)
    assert first.history.clip_norm.tolist() == [0.5] * 3
    assert all(np.array_equal(first.params[n], second.params[n]) for n in first.params)
    assert not all(np.allclose(first.params[n], plain.params[n]) for n in first.params)  # noised
    assert plain.history.epsilon_spent is None
    table = metrics_table([first.history])
    assert set(PRIVACY_COLUMNS) <= set(table)
    assert not set(PRIVACY_COLUMNS) & set(metrics_table([plain.history]))


@pytest.mark.slow  # about 3 s
def test_the_budget_stops_the_run_with_one_line() -> None:
    settings = DPFedAvg(noise_multiplier=1.0, accountant="rdp")
    spent = _run(settings)[0].history.epsilon_spent
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _run(DPFedAvg(noise_multiplier=1.0, accountant="rdp", max_epsilon=float(spent[1]) + 1e-6))[0]
    lines = [str(w.message) for w in caught if issubclass(w.category, PrivacyBudgetWarning)]
    assert len(lines) == 1
    assert "\n" not in lines[0]
    assert "stopped after round 2 of 3" in lines[0]
    assert result.history.num_rounds == 2


def test_a_private_simulation_refuses_what_the_noise_cannot_cover() -> None:
    runs = [RunSpec(PoissonSampler(), seed=1)]
    config = TrainingConfig(rounds=1, num_sampled=4, algorithm=Scaffold())
    with pytest.raises(FedsampleError, match="'algorithm'"):
        simulate(DATA, spec_for("softmax", DATA), runs, config, privacy=DPFedAvg())
    with pytest.raises(FedsampleError, match="'clip_norm' parameter of DPFedAvg"):
        DPFedAvg(clip_norm=0.0)
    with pytest.raises(FedsampleError, match="'per_layer'"):
        DPFedAvg(per_layer=True, target_quantile=0.5)


def test_the_privacy_table_of_a_config_round_trips_and_is_checked() -> None:
    base = {"name": "p", "samplers": [{"name": "poisson"}], "federation": {"dataset": "digits"}}
    config = config_from_dict({**base, "privacy": {"clip_norm": 0.5, "target_epsilon": 4.0}})
    assert config.privacy is not None
    assert config.privacy.clip_norm == 0.5
    assert config_from_dict(config_to_dict(config)) == config
    assert config_from_dict(base).privacy is None
    assert "privacy" not in config_to_dict(config_from_dict(base))
    with pytest.raises(FedsampleError, match=r"privacy\.noise_multiplier"):
        config_from_dict({**base, "privacy": {"noise_multiplier": -1.0}})
    with pytest.raises(FedsampleError, match="privacy"):
        config_from_dict({**base, "privacy": {"noise": 1.0}})
