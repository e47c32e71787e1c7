"""The ``osmd-linear`` preset runs paper 001's released setting: 1000 rounds with ``--full``, K = 5,
B = 10, SGD step 0.1 on half the squared loss (0.05 on the engine's loss, which has no 1/2), 10
repetitions, each on its own draw of the data, and the released baseline variants beside ours."""

from __future__ import annotations

from typing import Any

import pytest

from fedsample.experiments.presets.catalogue import preset_configs


@pytest.mark.parametrize(("full", "rounds", "seeds"), [(True, 1000, 10), (False, 300, 5)])
def test_the_preset_runs_the_released_setting(full: bool, rounds: int, seeds: int) -> None:
    suite = preset_configs("osmd-linear", full=full)
    assert [suffix for suffix, _ in suite] == ["sigma-1", "sigma-3", "sigma-10"]
    for (_, config), sigma in zip(suite, (1.0, 3.0, 10.0), strict=True):
        training = config.training
        assert (training.rounds, training.num_sampled, training.local_steps, training.batch_size) == (rounds, 5, 1, 10)
        assert training.local_lr == 0.05  # 0.1 on half the squared loss
        assert config.algorithm.name == "minibatch-sgd"
        assert config.seeds == tuple(range(seeds))
        assert config.federation.dataset == "osmd-linear"
        assert config.federation.sigma == sigma
        assert config.federation.num_clients == 100
        assert config.federation.per_seed
        samplers = {entry.label: entry for entry in config.samplers}

        def params(label: str, samplers: dict[str, Any] = samplers) -> tuple[str, dict[str, object]]:
            entry = samplers[label]
            defaults = {"replace": True, "alpha": 0.4}  # with replacement, floor alpha / M as in 001
            assert {key: entry.params[key] for key in defaults} == defaults
            return entry.name, {key: value for key, value in entry.params.items() if key not in defaults}

        assert params("MABS (released: horizon step)") == (
            "mabs",
            {"feedback": "update", "delta": 0.01, "step": "horizon", "horizon": rounds},
        )
        assert params("VRB (released: loss, mixture)") == (
            "vrb",
            {"feedback": "loss", "form": "mixture"},
        )
        assert params("MABS")[1]["step"] == "fixed"
        assert params("VRB")[1]["form"] == "projection"
        assert {"uniform", "Avare", "OSMD", "Adaptive-OSMD"} <= samplers.keys()
        assert "lr 0.06" not in config.description
