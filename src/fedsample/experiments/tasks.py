"""The work of an experiment, wherever it runs: a group of its runs on one federation, or the
centralized baseline of one seed. The local executor and the Ray tasks both call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedsample.experiments.build import Experiment

if TYPE_CHECKING:
    from fedsample.data.federated import FederatedDataset
    from fedsample.engine import RunResult, SimulationCheckpoint
    from fedsample.engine.specs import Progress, RoundReport

__all__ = ["centralized_samples_per_round", "simulate_baseline", "simulate_group"]


def centralized_samples_per_round(experiment: Experiment) -> int:
    """Sample gradients per round of the federated runs, the centralized baseline's batch.

    A data-level sampler (FedSampling) sets ``K`` itself; otherwise ``m`` clients each take
    ``N`` steps of ``min(B, n_i)`` samples, ``m N mean_i min(B, n_i)`` in all.
    """
    for run in experiment.runs:
        target = getattr(run.sampler, "target_samples", None)
        if target is not None:
            return int(target)
    training = experiment.training
    sizes = experiment.data.train_sizes()
    per_step = float(np.mean(np.minimum(sizes, training.batch_size)))
    steps = training.algorithm.num_local_steps(training.local_steps)
    return max(1, round(training.num_sampled * steps * per_step))


def simulate_group(
    experiment: Experiment,
    data: FederatedDataset,
    indices: Sequence[int],
    *,
    progress: Callable[[Progress], None] | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
    checkpoint: Callable[[SimulationCheckpoint], None] | None = None,
    checkpoint_every: int = 0,
    resume: SimulationCheckpoint | None = None,
) -> list[RunResult]:
    """The runs ``indices`` of ``experiment`` trained together on ``data`` (one of its
    :meth:`~fedsample.experiments.build.Experiment.federation_groups`), with
    :func:`fedsample.engine.simulate`'s progress, checkpoint and resume options."""
    from fedsample.engine import simulate

    runs = [experiment.runs[index] for index in indices]
    return simulate(
        data,
        experiment.trained_model,
        runs,
        experiment.training,
        init_seed=experiment.init_seed,
        participation=experiment.participation,
        progress=progress,
        on_round=on_round,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        resume=resume,
    )


def simulate_baseline(
    experiment: Experiment,
    seed: int,
    progress: Callable[[Progress], None] | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
) -> RunResult:
    """The centralized baseline of run seed ``seed``, on that seed's federation."""
    from fedsample.engine import simulate_centralized

    return simulate_centralized(
        experiment.data_for_seed(seed),
        experiment.trained_model,
        experiment.training,
        samples_per_round=centralized_samples_per_round(experiment),
        seed=seed,
        init_seed=experiment.init_seed,
        progress=progress,
        on_round=on_round,
    )
