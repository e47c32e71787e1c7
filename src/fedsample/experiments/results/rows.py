"""One row of a run's summary: the figures of one label (one sampler configuration) over its seeds.

Its own module so that the summary (:mod:`~fedsample.experiments.results.summary`, which builds rows and
writes the files) and the tables (:mod:`~fedsample.experiments.results.tables`, which format rows) both
read it, the summary importing the tables and never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SummaryRow"]


@dataclass(frozen=True)
class SummaryRow:
    """Summary of one label (one sampler configuration) over its seeds.

    ``rounds_to_target_*`` is the mean, over the seeds that reach the target, of the first
    evaluated round where test accuracy >= ``target_accuracy`` (training loss, the federated
    objective, <= ``target_loss``); NaN when no seed reaches it or no target was given, and
    ``seeds_reached_target_*`` counts the seeds that reach it. The per-round means (distinct
    clients, weight sum ``sum_i w_i(S_t)``, seconds) are over rounds 1..T of each seed, then over seeds.

    With a simulated clock (a ``[system]`` table, docs/system.md) ``time_to_target_*`` is the same
    mean in simulated seconds (the simulated time after that round) and ``simulated_seconds_final``
    the mean simulated time of the whole run; without one these are ``None`` and absent from
    ``summary.csv``.
    """

    label: str
    sampler: str
    num_seeds: int
    num_rounds: int
    final_train_loss_mean: float
    final_train_loss_std: float
    best_train_loss_mean: float
    best_train_loss_std: float
    final_test_accuracy_mean: float
    final_test_accuracy_std: float
    best_test_accuracy_mean: float
    best_test_accuracy_std: float
    target_accuracy: float | None
    rounds_to_target_accuracy: float
    seeds_reached_target_accuracy: int
    target_loss: float | None
    rounds_to_target_loss: float
    seeds_reached_target_loss: int
    distinct_clients_mean: float
    weight_sum_mean: float
    round_seconds_mean: float
    time_to_target_accuracy: float | None = None
    time_to_target_loss: float | None = None
    simulated_seconds_final: float | None = None
    # DP-FedAvg (docs/privacy.md): the epsilon the most exposed client spent by the last round.
    epsilon_final: float | None = None
