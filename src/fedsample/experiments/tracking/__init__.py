"""Experiment trackers: every round's metrics record sent to TensorBoard or MLflow as the runs train.

The engine reports each round as a :class:`~fedsample.engine.settings.RoundReport` (one row per run,
every column of the run's metrics table; :func:`fedsample.engine.simulate`'s ``on_round``). A
tracker takes those reports and writes what they hold, as scalars named by column (``train_loss``,
``test_accuracy``, ``distinct_clients``, ``weight_sum``...) with the round as the step; a value a row
marks missing (NaN, or ``-1`` for a count) is not written. Both trackers write locally by default
and send nothing elsewhere:

- :class:`TensorBoardTracker`: one folder per run, ``DIR/<label>/seed<seed>/``, holding event files
  written with TensorBoard's own record writer (extra ``tensorboard``). A process that continues a
  run (``--resume``) starts a new event file whose first event tells TensorBoard to drop what the
  interrupted process logged from that round on, so every round shows once.
- :class:`MLflowTracker`: one MLflow run per (label, seed), named ``"<label> seed <seed>"``, with the
  run's sampler, its hyperparameters and the config's keys as parameters (extra ``mlflow``, which
  brings ``mlflow-skinny``). The default store is the SQLite file ``RUN_DIR/mlflow.db``; MLflow's
  telemetry is switched off unless the user set it. A resumed run continues the same MLflow runs
  (found by a tag naming the run directory, label and seed) and skips the rounds they already hold.

``fedsample run`` chooses them with ``[tracking]`` in the config or ``--tensorboard`` / ``--mlflow``;
:func:`open_trackers` builds them for a run directory. A tracker that fails in the middle of a run
(a full disk, a server gone) is stopped with one line, and the run goes on: the metrics files are
complete whatever the trackers do.

Example
-------
>>> import math
>>> from fedsample.engine.settings import RoundReport
>>> row = {"label": "md", "sampler": "md", "seed": 0, "round": 1, "train_loss": 1.5, "test_loss": math.nan,
...        "distinct_clients": 5, "distinct_labels": -1}
>>> scalars(row)
{'train_loss': 1.5, 'distinct_clients': 5.0}
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from fedsample import _io
from fedsample._interrupts import deferred
from fedsample.errors import FedsampleError, one_line

if TYPE_CHECKING:
    from fedsample.engine.history import History
    from fedsample.engine.settings import RoundReport

__all__ = [
    "MLFLOW_FILE",
    "TENSORBOARD_DIR",
    "MLflowTracker",
    "TensorBoardTracker",
    "Tracker",
    "Trackers",
    "absolute_store_uri",
    "check_trackers",
    "open_trackers",
    "reports_from_histories",
    "scalars",
]

TENSORBOARD_DIR = "tensorboard"
MLFLOW_FILE = "mlflow.db"
# The columns that name a row (not scalars of it).
IDENTITY = ("label", "sampler", "seed", "round")
# Seconds between flushes of buffered values (and at the end): TensorBoard and the MLflow UI show a
# running comparison with this delay at most.
FLUSH_SECONDS = 2.0
# MLflow takes at most 1000 metrics and 100 parameters per batch.
MLFLOW_METRICS_PER_BATCH = 1000
MLFLOW_PARAMS_PER_BATCH = 100
MLFLOW_PARAM_CHARS = 500
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


class Tracker(Protocol):
    """What the runner feeds: every :class:`RoundReport` (``log``), then ``close`` (``complete``: the runs finished)."""

    name: str

    def log(self, report: RoundReport) -> None: ...

    def close(self, *, complete: bool) -> None: ...

    def abandon(self) -> None: ...


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The values of a report row to write: every numeric column but the row's identity, less the missing
    marks (NaN, and ``-1`` for a count)."""
    values: dict[str, float] = {}
    for name, value in row.items():
        if name in IDENTITY or isinstance(value, (str, bool)) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, int) and value == -1:
            continue
        if isinstance(value, float) and math.isnan(value):
            continue
        values[name] = float(value)
    return values


def reports_from_histories(histories: Sequence[History]) -> Iterator[RoundReport]:
    """The reports :func:`fedsample.engine.simulate` gave while it trained the runs of ``histories``, one per
    round, rebuilt from their metrics table (the runs of a Ray task, reported when the task returns)."""
    from fedsample.engine.settings import RoundReport
    from fedsample.experiments.metrics import metrics_table

    tables = [metrics_table([history]) for history in histories]
    rounds = max(history.num_rounds for history in histories)
    evaluated = {int(r) for history in histories for r in history.eval_rounds}
    for done in range(rounds + 1):
        rows = tuple(
            {name: _plain(values[done]) for name, values in table.items()}
            for table in tables
            if done < len(table["round"])
        )
        yield RoundReport(round=done, total=rounds, evaluated=done in evaluated, rows=rows)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def folder_name(label: str) -> str:
    """A folder name for a run's label: the label itself when it is a plain lower-case name, else its letters
    and a short hash of it (two labels never share a folder, even on a file system that ignores case)."""
    if _SAFE_NAME.fullmatch(label) and label not in (".", "..") and label == label.lower():
        return label  # (a capital letter gets the hash: "MD" and "md" share a folder where case is ignored)
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-")[:60] or "run"
    return f"{cleaned}-{hashlib.sha1(label.encode()).hexdigest()[:8]}"


def _announce(path: Path) -> None:
    """List ``path`` in the open run directory's manifest before its first byte (and make its folders)."""
    guard = _io.current_guard()
    if guard is not None:
        guard.announce(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------------------------
# TensorBoard
# ----------------------------------------------------------------------------------------------


@dataclass
class _EventFile:
    handle: BinaryIO
    writer: Any


@dataclass
class TensorBoardTracker:
    """Event files under ``directory``, one folder per run (``<label>/seed<seed>``); see the module's text."""

    directory: Path
    name: str = "TensorBoard"
    _files: dict[tuple[str, int], _EventFile] = field(default_factory=dict)
    _last_flush: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        require("tensorboard", "tensorboard", "tracking.tensorboard")
        self.directory = Path(self.directory)

    def log(self, report: RoundReport) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        now = time.time()
        for row in report.rows:
            values = scalars(row)
            if not values:
                continue
            events = self._file(row["label"], int(row["seed"]), int(row["round"]))
            summary = summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]
            )
            event = event_pb2.Event(wall_time=now, step=int(row["round"]), summary=summary)
            with deferred():
                events.writer.write(event.SerializeToString())
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        for events in self._files.values():
            with deferred():
                events.handle.flush()
        self._last_flush = time.monotonic()

    def close(self, *, complete: bool) -> None:
        for events in self._files.values():
            with contextlib.suppress(OSError):
                events.handle.close()
        self._files.clear()

    def abandon(self) -> None:
        """Close the files, writing nothing more (after a failure)."""
        self.close(complete=False)

    def _file(self, label: str, seed: int, first_round: int) -> _EventFile:
        key = (label, seed)
        if key in self._files:
            return self._files[key]
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder = self.directory / folder_name(label) / f"seed{seed}"
        earlier = sorted(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []
        path = folder / f"events.out.tfevents.{int(time.time()):010d}.fedsample.{len(earlier):04d}"
        _announce(path)
        handle = open(path, "xb")  # noqa: SIM115 (closed by close())
        self._files[key] = _EventFile(handle, RecordWriter(handle))  # closed by close() even if a write fails
        writer = self._files[key].writer
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        if earlier:
            # A continued run: TensorBoard drops the events of earlier files from this round on.
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            event = event_pb2.Event(wall_time=time.time(), step=first_round, session_log=start)
            writer.write(event.SerializeToString())
        return self._files[key]


# ----------------------------------------------------------------------------------------------
# MLflow
# ----------------------------------------------------------------------------------------------


@dataclass
class _MLflowRun:
    run_id: str
    logged: int  # the last round the store holds (-1: none)
    newest: int = -1  # the last round buffered


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
    _pending: dict[str, list[Any]] = field(default_factory=dict)
    _last_flush: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        check_trackers({"mlflow": True})
        store = Path(os.path.abspath(self.uri.removeprefix("sqlite:///")))
        if self.uri.startswith("sqlite:///") and store.is_relative_to(os.path.abspath(self.run_dir)):
            for path in (store, store.with_name(f"{store.name}-journal")):  # SQLite's journal, while it writes
                _announce(path)
        self._client, self._experiment_id = open_mlflow_store(self.uri, self.experiment)

    def log(self, report: RoundReport) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        for row in report.rows:
            run = self._run(row["label"], int(row["seed"]))
            step = int(row["round"])
            if step <= run.logged:
                continue  # held already (a resumed run)
            metrics = [Metric(tag, value, stamp, step) for tag, value in scalars(row).items()]
            self._pending.setdefault(run.run_id, []).extend(metrics)
            run.newest = max(run.newest, step)
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        from mlflow.entities import RunTag

        for run in self._runs.values():
            metrics = self._pending.pop(run.run_id, [])
            for start in range(0, len(metrics), MLFLOW_METRICS_PER_BATCH):
                self._client.log_batch(run.run_id, metrics=metrics[start : start + MLFLOW_METRICS_PER_BATCH])
            if run.newest > run.logged:
                self._client.log_batch(run.run_id, tags=[RunTag("fedsample.last_round", str(run.newest))])
                run.logged = run.newest
        self._last_flush = time.monotonic()

    def close(self, *, complete: bool) -> None:
        try:
            self.flush()
        finally:
            try:
                for run in self._runs.values():
                    self._client.set_terminated(run.run_id, "FINISHED" if complete else "KILLED")
            finally:
                self.abandon()

    def abandon(self) -> None:
        """Forget the runs and the store's connection, without a call to the store (after a failure, a
        store gone away must not hold the run up once more)."""
        self._runs.clear()
        self._pending.clear()
        _release_store(self.uri)

    def _run(self, label: str, seed: int) -> _MLflowRun:
        key = (label, seed)
        if key in self._runs:
            return self._runs[key]
        from mlflow.entities import Param, RunTag

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
                logged = int(found[0].data.tags.get("fedsample.last_round", "-1"))
                self._runs[key] = _MLflowRun(run_id, logged)
                return self._runs[key]
        tags = {
            "fedsample.key": ident,
            "fedsample.run_dir": os.path.abspath(self.run_dir),
            "fedsample.label": label,
            "fedsample.seed": str(seed),
        }
        created = self._client.create_run(self._experiment_id, run_name=f"{label} seed {seed}", tags=tags)
        run_id = created.info.run_id
        values = {**self.parameters, "label": label, "seed": seed, **self.run_parameters.get(label, {})}
        params = [Param(name, str(value)[:MLFLOW_PARAM_CHARS]) for name, value in values.items()]
        for start in range(0, len(params), MLFLOW_PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=params[start : start + MLFLOW_PARAMS_PER_BATCH])
        self._client.log_batch(run_id, tags=[RunTag("fedsample.last_round", "-1")])
        self._runs[key] = _MLflowRun(run_id, -1)
        return self._runs[key]


# ----------------------------------------------------------------------------------------------
# A run directory's trackers
# ----------------------------------------------------------------------------------------------

# The packages each tracker imports (its extra brings them): mlflow-skinny's SQLite store needs SQLAlchemy
# and Alembic, which it does not require itself.
_EXTRAS = {"tensorboard": ("tensorboard",), "mlflow": ("mlflow", "sqlalchemy", "alembic")}
# MLflow's own defaults retry a failed HTTP call 7 times over minutes, inside the training loop: a tracker
# of fedsample gives up sooner (settings the user made win), and sends no telemetry.
_MLFLOW_ENVIRONMENT = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


def open_mlflow_store(uri: str, experiment: str) -> tuple[Any, str]:
    """An MLflow client of the store at ``uri`` and the id of ``experiment`` there (made if new); one line
    naming ``tracking.mlflow_uri`` when the store does not open."""
    for name, value in _MLFLOW_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///") and not os.path.exists(uri.removeprefix("sqlite:///")):
        _release_store(uri)  # a store made anew where one was removed: MLflow's kept connection is stale

    for noisy in ("mlflow", "alembic"):  # after the import, which sets MLflow's own levels
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        return client, found.experiment_id if found is not None else client.create_experiment(experiment)
    except Exception as exc:
        _release_store(uri)
        raise FedsampleError(
            f"The 'tracking.mlflow_uri' parameter must name an MLflow store that opens. Got {_shown(uri)!r}, "
            f"which failed: {one_line(exc, 200)}",
            parameter="tracking.mlflow_uri",
        ) from None


def _release_store(uri: str) -> None:
    """Dispose of the SQLAlchemy engine (and the store) MLflow keeps for ``uri`` for the life of the
    process: a run directory's store may be removed (``--overwrite``) and made again at the same path,
    which a kept connection would no longer reach. MLflow's private caches: nothing is done where they
    are not found."""
    with contextlib.suppress(Exception):
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.tracking._tracking_service import utils

        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()
            utils._tracking_store_registry._get_store_with_resolved_uri.cache_clear()  # the stores kept per URI


def _shown(uri: str) -> str:
    """``uri`` with its password left out."""
    return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", uri)


def absolute_store_uri(uri: str, base: str | os.PathLike[str]) -> str:
    """A local store's URI with its path made absolute against ``base`` (``sqlite:///mlflow.db`` names a
    path relative to the working directory, which a resume from elsewhere would not find again).

    >>> absolute_store_uri("sqlite:///runs/m.db", "/home/me"), absolute_store_uri("sqlite:////abs/m.db", "/x")
    ('sqlite:////home/me/runs/m.db', 'sqlite:////abs/m.db')
    >>> absolute_store_uri("file:mlruns", "/home/me"), absolute_store_uri("http://host:5000", "/x")
    ('file:///home/me/mlruns', 'http://host:5000')
    """
    for prefix in ("sqlite:///", "file://", "file:"):
        if not uri.startswith(prefix):
            continue
        path = uri.removeprefix(prefix)
        if path.startswith("/"):
            return uri
        absolute = os.path.abspath(os.path.join(os.fspath(base), os.path.expanduser(path)))
        return f"sqlite:///{absolute}" if prefix == "sqlite:///" else f"file://{absolute}"
    return uri


def require(module: str, extra: str, parameter: str) -> None:
    """Refuse, in one line, a tracker whose package is not installed."""
    if importlib.util.find_spec(module) is None:
        raise FedsampleError(
            f"The '{parameter}' parameter needs the {module} package, which is not installed: "
            f"pip install 'fedsample[{extra}]'.",
            parameter=parameter,
        )


def check_trackers(tracking: Mapping[str, Any], *, experiment: str | None = None) -> None:
    """Refuse, before anything is written, a tracker that ``tracking`` (a ``[tracking]`` table) asks for and
    that cannot run here: a missing package, or (given ``experiment``) an MLflow store of the user's that
    does not open. The default store, in the run directory, is made once the directory is open."""
    for key, modules in _EXTRAS.items():
        if tracking.get(key):
            for module in modules:
                require(module, key, f"tracking.{key}")
    if experiment is not None and tracking.get("mlflow") and tracking.get("mlflow_uri"):
        name = tracking.get("mlflow_experiment") or experiment
        open_mlflow_store(str(tracking["mlflow_uri"]), str(name))


@dataclass
class Trackers:
    """The trackers of a run and a caller's own ``on_round``, fed every report; a tracker that raises is stopped
    with one line on ``say`` (the caller's callback is not: its exception ends the run)."""

    trackers: list[Tracker] = field(default_factory=list)
    on_round: Callable[[RoundReport], None] | None = None
    say: Callable[[str], None] = print

    def __bool__(self) -> bool:
        return bool(self.trackers) or self.on_round is not None

    def __call__(self, report: RoundReport) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.log(report)
            except Exception as exc:  # a tracker never stops the run: the metrics files hold everything
                self._stop(tracker, exc)
        if self.on_round is not None:
            self.on_round(report)

    def close(self, *, complete: bool) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.close(complete=complete)
            except Exception as exc:
                self._stop(tracker, exc, closing=True)
        self.trackers.clear()

    def _stop(self, tracker: Tracker, exc: BaseException, *, closing: bool = False) -> None:
        self.trackers.remove(tracker)
        with contextlib.suppress(Exception):
            tracker.abandon()  # no further call to a store that just failed
        when = "closing" if closing else "stopped; the run goes on, and its metrics files hold every round"
        self.say(f"{tracker.name} tracking {when}: {one_line(exc, 200)}")


def open_trackers(
    tracking: Mapping[str, Any],
    run_dir: Path,
    *,
    experiment: str,
    parameters: Mapping[str, Any] | None = None,
    run_parameters: Mapping[str, Mapping[str, Any]] | None = None,
    resume: bool = False,
    on_round: Callable[[RoundReport], None] | None = None,
    say: Callable[[str], None] = print,
) -> Trackers:
    """The trackers ``tracking`` (a ``[tracking]`` table) asks for, writing into ``run_dir`` by default."""
    trackers: list[Tracker] = []
    if tracking.get("tensorboard"):
        trackers.append(TensorBoardTracker(run_dir / TENSORBOARD_DIR))
    if tracking.get("mlflow"):
        uri = tracking.get("mlflow_uri") or f"sqlite:///{os.path.abspath(run_dir / MLFLOW_FILE)}"
        name = tracking.get("mlflow_experiment") or experiment
        trackers.append(
            MLflowTracker(
                uri,
                name,
                run_dir,
                parameters=parameters or {},
                run_parameters=run_parameters or {},
                resume=resume,
            )
        )
    return Trackers(trackers, on_round, say)


def flat_parameters(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested table as dotted keys (``training.rounds``); lists as their text."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_parameters(value, f"{name}."))
        else:
            flat[name] = value
    return flat
