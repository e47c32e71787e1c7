"""The TensorBoard tracker: event files written with TensorBoard's own record writer (extra ``tensorboard``),
one folder per run, ``DIR/<label>/seed<seed>/``.

A process that continues a run (``--resume``) starts a new event file whose first event tells TensorBoard
to drop what the interrupted process logged from that round on, so every round shows once.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from fedsample._interrupts import deferred
from fedsample.experiments.results.tracking.reports import announce, folder_name, require, scalars

if TYPE_CHECKING:
    from fedsample.engine.specs import RoundReport

__all__ = ["FLUSH_SECONDS", "TENSORBOARD_DIR", "TensorBoardTracker"]

TENSORBOARD_DIR = "tensorboard"
# Seconds between flushes of buffered values (and at the end, and before each checkpoint): TensorBoard and
# the MLflow UI show a running comparison with this delay at most.
FLUSH_SECONDS = 2.0


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
        announce(path)
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
