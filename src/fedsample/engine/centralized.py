"""The centralized baseline: plain mini-batch SGD on the federation's pooled training data.

:func:`simulate_centralized` runs the engine's own round loop on a one-client view of the data: the
pooled training rows are a single client that takes part every round (the full sampler, weight 1)
and makes one local step of ``samples_per_round`` distinct rows, drawn uniformly without
replacement from all ``M`` rows (all of them if ``samples_per_round >= M``). So round ``t`` is

    ``theta <- theta - eta_l(t) (1 / B) sum_{j in batch_t} grad l_j(theta)``,  ``eta_l(t) = eta_l lr_decay^t``,

with ``B = min(samples_per_round, M)`` and the batch from the stream ``(seed, TRAINING, t, 0)``.
Only the evaluation differs from a one-client simulation: it reports the *federation's* objective
``sum_i p_i L_i`` (``config.importance``), so the history lines up with federated runs of the same
configuration (same rounds, evaluation rounds, initial model and test metrics). With importance
``"size"`` that objective is the pooled mean loss SGD minimises; with ``"uniform"`` the baseline
still minimises the pooled mean, a different objective whose optimum it approaches instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsample._arrays import IntArray
from fedsample._validation import Interval, check_param
from fedsample.engine.algorithms import MiniBatchSGD
from fedsample.engine.loop import simulate
from fedsample.engine.paper_models import Params
from fedsample.engine.server import ServerSGD
from fedsample.engine.specs import Progress, RoundReport, RunResult, RunSpec, TrainingConfig, TrainingData
from fedsample.engine.user_model import BoundModel, ModelLike
from fedsample.federation import Federation, ImportanceMode
from fedsample.samplers import FullSampler

__all__ = ["simulate_centralized"]


@dataclass(frozen=True, eq=False)
class _Pooled:
    """``data`` with all training rows as one client (and all test rows as one); the rest is ``data``'s."""

    data: TrainingData

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy and pickle probe special names before ``data`` is set
            raise AttributeError(name)
        return getattr(self.data, name)

    @property
    def train_indptr(self) -> IntArray:
        return np.array([0, self.data.train_features.shape[0]], dtype=np.int64)

    @property
    def test_indptr(self) -> IntArray:
        return np.array([0, self.data.test_features.shape[0]], dtype=np.int64)

    def federation(self, *, importance: ImportanceMode = "size") -> Federation:
        return Federation.from_sizes([self.data.train_features.shape[0]])


def simulate_centralized(
    data: TrainingData,
    model: ModelLike | BoundModel,
    config: TrainingConfig,
    *,
    samples_per_round: int,
    seed: int = 0,
    init_seed: int = 0,
    params: Params | None = None,
    progress: Callable[[Progress], None] | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
) -> RunResult:
    """Train ``model`` on the pooled training data of ``data`` with one SGD step per round.

    Each of ``config.rounds`` rounds takes one step of ``samples_per_round`` sample gradients at
    ``config.local_lr * config.lr_decay**t``. ``config``'s ``eval_every``, ``importance``,
    ``backend`` and ``device`` apply as in :func:`~fedsample.engine.simulate`; its client-side
    settings (``num_sampled``, ``local_steps``, ``batch_size``, ``algorithm``) and ``server`` do not.
    The run starts from ``params`` or :func:`~fedsample.engine.initial_params` of ``init_seed``,
    like the federated runs; its history has label and sampler ``"centralized"``, as have the rows
    ``on_round`` receives (:func:`~fedsample.engine.simulate`).

    >>> from fedsample.data import FederatedDataset
    >>> from fedsample.engine import ModelSpec
    >>> data = FederatedDataset(
    ...     train_features=np.eye(4, dtype=np.float32), train_targets=np.arange(4.0), train_indptr=[0, 1, 4],
    ...     test_features=np.zeros((0, 4), np.float32), test_targets=np.zeros(0), test_indptr=[0, 0, 0],
    ...     task="regression",
    ... )
    >>> config = TrainingConfig(rounds=3, local_lr=0.1)
    >>> result = simulate_centralized(data, ModelSpec("linear", (4,), 1), config, samples_per_round=2)
    >>> result.history.eval_rounds.tolist(), result.history.label
    ([0, 1, 2, 3], 'centralized')
    """
    owner = "simulate_centralized"
    check_param("samples_per_round", owner, samples_per_round, Interval(int, 1, None, closed="left"))
    check_param("seed", owner, seed, Interval(int, 0, None, closed="left"))
    pooled_config = dataclasses.replace(
        config,
        num_sampled=1,
        local_steps=1,
        batch_size=samples_per_round,
        algorithm=MiniBatchSGD(),
        server=ServerSGD(),
    )
    run = RunSpec(FullSampler(), seed=seed, label="centralized")

    def report(update: RoundReport) -> None:
        if on_round is not None:
            rows = tuple({**row, "sampler": "centralized"} for row in update.rows)
            on_round(dataclasses.replace(update, rows=rows))

    # Train on the one-client view; evaluate the federation's objective sum_i p_i L_i, not the
    # view's pooled mean.
    (result,) = simulate(
        _Pooled(data),
        model,
        [run],
        pooled_config,
        init_seed=init_seed,
        params=params,
        progress=progress,
        evaluation_data=data,
        on_round=None if on_round is None else report,
    )
    info = {**result.history.info, "baseline": "centralized", "samples_per_round": samples_per_round}
    history = dataclasses.replace(result.history, sampler="centralized", info=info)
    return RunResult(history=history, params=result.params, sampler_state=result.sampler_state)
