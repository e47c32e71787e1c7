"""Data-level sampling in the engine: with N local steps a client trains on its kept subset only.

FedSampling keeps ``k_i`` samples of client ``i`` for the round; every local step must read those
same samples, so the client touches ``k_i`` samples, not up to ``N k_i``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from engine_cases import classification_data, spec_for

from fedsample.engine import RunSpec, TrainingConfig, simulate
from fedsample.engine import simulation as engine_simulation
from fedsample.samplers import FedSamplingSampler, MDSampler

SIZES = [30, 2, 45, 8, 60, 5, 25, 12]


def test_every_local_step_reads_the_kept_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three local steps, a FedSampling run batched with an MD run: each FedSampling slot reads the
    same k_i rows at every step (k_i = its batch-size instruction), while MD slots draw fresh batches."""
    plans: list[Any] = []
    original = engine_simulation.plan_batches

    def record(**kwargs: Any) -> Any:
        plan = original(**kwargs)
        plans.append((kwargs, plan))
        return plan

    monkeypatch.setattr(engine_simulation, "plan_batches", record)
    data = classification_data(2, sizes=SIZES)
    config = TrainingConfig(rounds=4, num_sampled=3, local_steps=3, batch_size=6, local_lr=0.05)
    sampler = FedSamplingSampler(probability=1.0, target_samples=40, size_threshold=1000)
    runs = [RunSpec(sampler, seed=3), RunSpec(MDSampler(), seed=3)]
    simulate(data, spec_for("mlp", data), runs, config)
    assert len(plans) == config.rounds
    fresh = 0
    for kwargs, plan in plans:
        seeds, clients = kwargs["seeds"], kwargs["clients"]
        data_level = np.asarray(kwargs["kept_subsets"])
        assert data_level.sum() >= 1
        assert 1 <= (~data_level).sum() <= 3
        for j in range(clients.size):
            count = int(plan.counts[j])
            rows = plan.rows[:, j, :count]
            touched = np.unique(rows).size
            if data_level[j]:
                assert count == int(kwargs["slot_batch_sizes"][j])
                assert touched == count, (int(seeds[j]), int(clients[j]))
                assert np.all(rows == rows[0])
            elif count < SIZES[int(clients[j])]:
                fresh += touched > count
    assert fresh > 0  # the client-level run still draws a fresh batch per step
