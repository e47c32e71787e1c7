"""The progress of a comparison: what the runner and its executors report (:class:`ProgressReporter`),
and the live line that shows it (:class:`ProgressLine`: rounds done, latest objective per sampler, ETA).

On a terminal the line is redrawn in place (carriage return) at most every ``interval`` seconds;
elsewhere (a log file, CI) a plain line is printed at each tenth of the work, so logs stay short.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import numpy as np

__all__ = ["ProgressLine", "ProgressReporter", "format_seconds"]


class ProgressReporter(Protocol):
    """The progress callbacks of a run: phases (``begin``), rounds (``update``), notes (``message``), ``close``."""

    def begin(self, phase: str, labels: tuple[str, ...] | list[str]) -> None: ...

    def update(self, done: int, total: int, losses: np.ndarray | None = None) -> None: ...

    def message(self, text: str) -> None: ...

    def close(self) -> None: ...


def format_seconds(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass
class ProgressLine:
    """Reports the phases of a run (``begin``), each phase's rounds (``update``), then ``close``.

    ``labels`` are the runs' labels in the order of the losses passed to :meth:`update`; runs that
    share a label (seeds) are averaged in the line.
    """

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    interval: float = 0.5
    width: int = 110
    _phase: str = ""
    _labels: tuple[str, ...] = ()
    _start: float = 0.0
    _first_done: int = 0
    _last_draw: float = -math.inf
    _last_decile: int = -1
    _drawn: bool = False

    @property
    def interactive(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def begin(self, phase: str, labels: tuple[str, ...] | list[str]) -> None:
        """Start a phase (``"training 12 runs"``...) whose updates carry one loss per label."""
        self._end_line()
        self._phase, self._labels = phase, tuple(labels)
        self._start, self._first_done = time.perf_counter(), -1
        self._last_draw, self._last_decile = -math.inf, -1

    def update(self, done: int, total: int, losses: np.ndarray | None = None) -> None:
        """``done`` of ``total`` rounds finished; ``losses`` the latest objective of each run."""
        now = time.perf_counter()
        if self._first_done < 0:  # a resumed phase starts part-way: time only the rounds run since begin()
            self._first_done = done - 1
        decile = (10 * done) // max(total, 1)
        if self.interactive:
            if now - self._last_draw < self.interval and done < total:
                return
        elif decile == self._last_decile and done < total:
            return
        self._last_draw, self._last_decile = now, decile
        elapsed = now - self._start
        ran = done - self._first_done
        rate = ran / elapsed if elapsed > 0 and ran > 0 else math.nan
        eta = (total - done) / rate if rate == rate and rate > 0 else math.nan
        text = (
            f"{self._phase}: {done}/{total} rounds ({100 * done / max(total, 1):.0f}%)"
            f"{self._losses_text(losses)} | {format_seconds(elapsed)} elapsed, ETA {format_seconds(eta)}"
        )
        if self.interactive:
            self.stream.write("\r" + text[: self.width].ljust(self.width))
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (after the progress line, if one is drawn)."""
        self._end_line()
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        self._end_line()

    def _end_line(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def _losses_text(self, losses: np.ndarray | None) -> str:
        if losses is None or not self._labels or len(losses) != len(self._labels):
            return ""
        means: dict[str, list[float]] = {}
        for label, loss in zip(self._labels, np.asarray(losses, dtype=float), strict=True):
            means.setdefault(label, []).append(float(loss))
        parts = [f"{label} {np.mean(values):.4g}" for label, values in means.items()]
        return " | loss " + ", ".join(parts)
