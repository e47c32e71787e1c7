"""A run directory's trackers: checked before anything is written, opened once the directory is, fed every
report, flushed before each checkpoint, and stopped in one line (without credentials) when one fails."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsample._redaction import credentials
from fedsample.experiments.results.tracking.mlflow_runs import MLflowTracker
from fedsample.experiments.results.tracking.mlflow_store import MLFLOW_FILE, MLFLOW_MODULES, cause, check_mlflow_store
from fedsample.experiments.results.tracking.reports import Tracker, require
from fedsample.experiments.results.tracking.tensorboard_events import TENSORBOARD_DIR, TensorBoardTracker

if TYPE_CHECKING:
    from fedsample.engine.specs import RoundReport

__all__ = ["Trackers", "check_trackers", "open_trackers"]

# The packages each tracker imports (its extra brings them).
_EXTRAS = {"tensorboard": ("tensorboard",), "mlflow": MLFLOW_MODULES}


def check_trackers(tracking: Mapping[str, Any], *, experiment: str | None = None) -> None:
    """Refuse, before anything is written, a tracker that ``tracking`` (a ``[tracking]`` table) asks for and
    that cannot run here: a missing package, or (given ``experiment``) an MLflow store of the user's that
    does not open. Nothing is made: a new store, and the default one in the run directory, are made once
    the directory is open."""
    for key, modules in _EXTRAS.items():
        if tracking.get(key):
            for module in modules:
                require(module, key, f"tracking.{key}")
    if experiment is not None and tracking.get("mlflow") and tracking.get("mlflow_uri"):
        check_mlflow_store(str(tracking["mlflow_uri"]), str(tracking.get("mlflow_experiment") or experiment))


@dataclass
class Trackers:
    """The trackers of a run and a caller's own ``on_round``, fed every report; a tracker that raises is stopped
    with one line on ``say`` (the caller's callback is not: its exception ends the run).

    Every ``checkpoint_every`` rounds (0: never) the trackers write what they buffered, before the engine
    saves that round's checkpoint: a process killed after it leaves no round the resumed run would not
    report again. ``secrets`` (a store's password) never reach ``say``.
    """

    trackers: list[Tracker] = field(default_factory=list)
    on_round: Callable[[RoundReport], None] | None = None
    say: Callable[[str], None] = print
    checkpoint_every: int = 0
    secrets: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.trackers) or self.on_round is not None

    def __call__(self, report: RoundReport) -> None:
        checkpoint = self.checkpoint_every > 0 and report.round > 0 and report.round % self.checkpoint_every == 0
        for tracker in list(self.trackers):
            try:
                tracker.log(report)
                if checkpoint:
                    tracker.flush()
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
            tracker.abandon()  # no further write to a store that just failed, one try to mark its runs failed
        when = "closing" if closing else "stopped; the run goes on, and its metrics files hold every round"
        self.say(f"{tracker.name} tracking {when}: {cause(exc, self.secrets)}")


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
    checkpoint_every: int = 0,
) -> Trackers:
    """The trackers ``tracking`` (a ``[tracking]`` table) asks for, writing into ``run_dir`` by default."""
    trackers: list[Tracker] = []
    secrets: tuple[str, ...] = ()
    if tracking.get("tensorboard"):
        trackers.append(TensorBoardTracker(run_dir / TENSORBOARD_DIR))
    if tracking.get("mlflow"):
        uri = tracking.get("mlflow_uri") or f"sqlite:///{os.path.abspath(run_dir / MLFLOW_FILE)}"
        secrets = credentials(uri)
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
    return Trackers(trackers, on_round, say, checkpoint_every, secrets)
