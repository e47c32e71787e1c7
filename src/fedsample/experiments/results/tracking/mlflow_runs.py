"""The MLflow tracker: one MLflow run per (label, seed), named ``"<label> seed <seed>"``, with the run's
sampler, its hyperparameters and the config's keys as parameters (extra ``mlflow``, which brings
``mlflow-skinny``).

Every round is in the store once. A round's values go in one batch of whole rounds, and a batch is one
transaction of the store: the store holds a round whole or not at all. Values leave the buffer only once
the store took them: a batch whose write was cut short (a Ctrl-C inside it) is written again at the
end, the same values with the same time stamps, which MLflow's database stores keep once. A resumed
run continues the same MLflow runs (found by a tag naming the run directory, label and seed) after the
last round the store holds, read back from it. A tracker that fails marks its MLflow runs ``FAILED``
where the store still takes it.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsample.experiments.results.tracking.mlflow_store import (
    MLFLOW_MODULES,
    one_quick_try,
    open_mlflow_store,
    quiet,
    release_store,
    sqlite_path,
)
from fedsample.experiments.results.tracking.reports import announce, require, scalars
from fedsample.experiments.results.tracking.tensorboard_events import FLUSH_SECONDS

if TYPE_CHECKING:
    from fedsample.engine.specs import RoundReport

__all__ = ["MLflowTracker", "whole_rounds"]

# MLflow takes at most 1000 metrics and 100 parameters per batch.
MLFLOW_METRICS_PER_BATCH = 1000
MLFLOW_PARAMS_PER_BATCH = 100
MLFLOW_PARAM_CHARS = 500


@dataclass
class _MLflowRun:
    run_id: str
    logged: int  # the last round the store holds (-1: none)
    pending: list[Any] = field(default_factory=list)  # the metrics not yet in the store, in round order
    newest: int = -1  # the last round buffered


def whole_rounds(metrics: Sequence[Any], limit: int) -> Sequence[Any]:
    """The first of ``metrics`` (in round order), at most ``limit``, ending where a round ends (a round
    longer than ``limit`` alone is cut).

    >>> from types import SimpleNamespace as M
    >>> [m.step for m in whole_rounds([M(step=1), M(step=1), M(step=2), M(step=2)], 3)]
    [1, 1]
    """
    end = min(len(metrics), limit)
    while 0 < end < len(metrics) and metrics[end].step == metrics[end - 1].step:
        end -= 1
    return metrics[:end] if end > 0 else metrics[:limit]


@dataclass
class MLflowTracker:
    """MLflow runs in the store at ``uri``, experiment ``experiment``; see the module's text.

    ``run_dir`` keys the MLflow runs (a resumed run finds its own); ``parameters`` are logged with each
    run, and ``run_parameters`` by label add the run's own (its sampler's hyperparameters).
    """

    uri: str
    experiment: str
    run_dir: Path
    parameters: Mapping[str, Any] = field(default_factory=dict)
    run_parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    resume: bool = False
    name: str = "MLflow"
    _client: Any = None
    _experiment_id: str = ""
    _runs: dict[tuple[str, int], _MLflowRun] = field(default_factory=dict)
    _last_flush: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        for module in MLFLOW_MODULES:
            require(module, "mlflow", "tracking.mlflow")
        store = sqlite_path(self.uri)
        if store is not None and store.is_relative_to(os.path.abspath(self.run_dir)):
            for path in (store, store.with_name(f"{store.name}-journal")):  # SQLite's journal, while it writes
                announce(path)
        self._client, self._experiment_id = open_mlflow_store(self.uri, self.experiment)

    def log(self, report: RoundReport) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        for row in report.rows:
            key = (row["label"], int(row["seed"]))
            run = self._runs.get(key) or self._start(*key)
            step = int(row["round"])
            if step <= max(run.logged, run.newest):
                continue  # held already (a resumed run)
            run.pending += [Metric(tag, value, stamp, step) for tag, value in scalars(row).items()]
            run.newest = step
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write every buffered round; a round leaves the buffer once the store holds it."""
        with quiet():
            for run in self._runs.values():
                while run.pending:
                    batch = whole_rounds(run.pending, MLFLOW_METRICS_PER_BATCH)
                    self._client.log_batch(run.run_id, metrics=batch)
                    del run.pending[: len(batch)]
                    run.logged = batch[-1].step
        self._last_flush = time.monotonic()

    def close(self, *, complete: bool) -> None:
        """Write what is buffered and end the MLflow runs, ``FINISHED`` (or ``KILLED``: the runs did not end);
        what raises here leaves the unended runs to :meth:`abandon`."""
        self.flush()
        with quiet():
            for key, run in list(self._runs.items()):
                self._client.set_terminated(run.run_id, "FINISHED" if complete else "KILLED")
                del self._runs[key]
        release_store(self.uri)

    def abandon(self) -> None:
        """After a failure: mark the MLflow runs ``FAILED`` where the store still takes it, in one quick try
        (a store that refuses the first is asked nothing more), then forget them and the store's connection."""
        try:
            with quiet(), one_quick_try():
                for run in self._runs.values():
                    self._client.set_terminated(run.run_id, "FAILED")
        except Exception:
            pass
        finally:
            self._runs.clear()
            release_store(self.uri)

    def _stored_round(self, run_id: str, keys: Iterable[str]) -> int:
        """The last round the store holds for the run (-1: none), read from its metrics' histories."""
        steps = [metric.step for key in keys for metric in self._client.get_metric_history(run_id, key)]
        return max(steps, default=-1)

    def _start(self, label: str, seed: int) -> _MLflowRun:
        """The MLflow run of (``label``, ``seed``): the one a resumed run continues, or a new one."""
        with quiet():
            self._runs[(label, seed)] = self._open_run(label, seed)
        return self._runs[(label, seed)]

    def _open_run(self, label: str, seed: int) -> _MLflowRun:
        from mlflow.entities import Param

        ident = hashlib.sha1(f"{os.path.abspath(self.run_dir)}\0{label}\0{seed}".encode()).hexdigest()
        if self.resume:
            found = self._client.search_runs(
                [self._experiment_id],
                filter_string=f"tags.`fedsample.key` = '{ident}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
            if found:
                run_id = found[0].info.run_id
                self._client.update_run(run_id, status="RUNNING")
                return _MLflowRun(run_id, self._stored_round(run_id, found[0].data.metrics))
        tags = {
            "fedsample.key": ident,
            "fedsample.run_dir": os.path.abspath(self.run_dir),
            "fedsample.label": label,
            "fedsample.seed": str(seed),
        }
        created = self._client.create_run(self._experiment_id, run_name=f"{label} seed {seed}", tags=tags)
        run = self._runs[(label, seed)] = _MLflowRun(created.info.run_id, -1)  # (marked FAILED if what follows fails)
        values = {**self.parameters, "label": label, "seed": seed, **self.run_parameters.get(label, {})}
        params = [Param(name, str(value)[:MLFLOW_PARAM_CHARS]) for name, value in values.items()]
        for start in range(0, len(params), MLFLOW_PARAMS_PER_BATCH):
            self._client.log_batch(run.run_id, params=params[start : start + MLFLOW_PARAMS_PER_BATCH])
        return run
