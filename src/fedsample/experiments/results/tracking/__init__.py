"""Experiment trackers: every round's metrics record sent to TensorBoard or MLflow as the runs train.

The engine reports each round as a :class:`~fedsample.engine.specs.RoundReport` (one row per run,
every column of the run's metrics table; :func:`fedsample.engine.simulate`'s ``on_round``). A
tracker takes those reports and writes what they hold, as scalars named by column (``train_loss``,
``test_accuracy``, ``distinct_clients``, ``weight_sum``...) with the round as the step; a value a row
marks missing (NaN, or ``-1`` for a count) is not written. Both trackers write locally by default
and send nothing elsewhere:

- :class:`TensorBoardTracker` (:mod:`.tensorboard_events`): one folder per run, ``DIR/<label>/seed<seed>/``,
  holding event files written with TensorBoard's own record writer (extra ``tensorboard``).
- :class:`MLflowTracker` (:mod:`.mlflow_runs`): one MLflow run per (label, seed) in a store
  (:mod:`.mlflow_store`; default: the SQLite file ``RUN_DIR/mlflow.db``), every round in it once, also
  after an interruption and ``--resume`` (extra ``mlflow``).

``fedsample run`` chooses them with ``[tracking]`` in the config or ``--tensorboard`` / ``--mlflow``;
:func:`open_trackers` builds them for a run directory (:mod:`.trackers`). A tracker that fails in the
middle of a run (a full disk, a server gone) is stopped with one line, and the run goes on: the metrics
files are complete whatever the trackers do. No credential reaches a message or a file
(:mod:`fedsample._redaction`; docs/tracking.md says what is guaranteed).

Example
-------
>>> import math
>>> row = {"label": "md", "sampler": "md", "seed": 0, "round": 1, "train_loss": 1.5, "test_loss": math.nan,
...        "distinct_clients": 5, "distinct_labels": -1}
>>> scalars(row)
{'train_loss': 1.5, 'distinct_clients': 5.0}
"""

from __future__ import annotations

from fedsample.experiments.results.tracking.mlflow_runs import MLflowTracker
from fedsample.experiments.results.tracking.mlflow_store import MLFLOW_FILE, absolute_store_uri, open_mlflow_store
from fedsample.experiments.results.tracking.reports import (
    Tracker,
    flat_parameters,
    folder_name,
    reports_from_histories,
    require,
    scalars,
)
from fedsample.experiments.results.tracking.tensorboard_events import TENSORBOARD_DIR, TensorBoardTracker
from fedsample.experiments.results.tracking.trackers import Trackers, check_trackers, open_trackers

__all__ = [
    "MLFLOW_FILE",
    "TENSORBOARD_DIR",
    "MLflowTracker",
    "TensorBoardTracker",
    "Tracker",
    "Trackers",
    "absolute_store_uri",
    "check_trackers",
    "flat_parameters",
    "folder_name",
    "open_mlflow_store",
    "open_trackers",
    "reports_from_histories",
    "require",
    "scalars",
]
