"""The progress of a comparison: what the runner and its executors report (:class:`ProgressReporter`),
and the live display that shows it (:class:`ProgressLine`: a bar of the rounds done, the runs, the latest
training objective per sampler, elapsed time and ETA).

On a terminal the bar is redrawn in place (carriage return) at most every ``interval`` seconds, and
at least every ``interval`` seconds while a round runs (the elapsed time ticks through a long round);
elsewhere (a log file, CI) a plain line is printed at each tenth of the work, and at least every
``log_interval`` seconds, so logs stay short but never silent for long. ``fedsample run -q`` shows
nothing. It is drawn by the few lines below: no dependency, and the same text on a terminal and in a log.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import numpy as np

from fedsample.experiments.results.tables import format_number

__all__ = ["ProgressLine", "ProgressReporter", "format_bar", "format_seconds"]


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


# The bar's cells: eighths of a cell make it move smoothly on a narrow terminal.
_EIGHTHS = " ▏▎▍▌▋▊▉"


def format_bar(fraction: float, cells: int, *, ascii_only: bool = False) -> str:
    """A bar ``cells`` wide filled to ``fraction`` (eighths of a cell), between two edges; ``ascii_only``
    for a terminal that cannot show the block characters.

    >>> format_bar(0.5, 8), format_bar(0.0, 4), format_bar(1.0, 4), format_bar(0.5, 4, ascii_only=True)
    ('▕████    ▏', '▕    ▏', '▕████▏', '[##  ]')
    """
    fraction = min(max(fraction, 0.0), 1.0) if math.isfinite(fraction) else 0.0
    if ascii_only:
        return "[" + ("#" * round(fraction * cells)).ljust(cells) + "]"
    eighths = round(fraction * cells * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part and full < cells else "")
    return "▕" + text.ljust(cells) + "▏"


def _columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` draws on (not standard output's: it may be a file), else
    ``COLUMNS`` or 100."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return shutil.get_terminal_size((100, 24)).columns


def _shows_blocks(stream: TextIO) -> bool:
    """Whether ``stream``'s encoding has the bar's block characters (not a terminal set to ASCII)."""
    try:
        (_EIGHTHS + "█▕").encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


@dataclass
class ProgressLine:
    """Reports the phases of a run (``begin``), each phase's rounds (``update``), then ``close``.

    ``labels`` are the runs' labels in the order of the losses passed to :meth:`update`; runs that
    share a label (seeds) are averaged in the line. ``width`` (default: the terminal's) bounds a
    redrawn line; ``log_interval`` is the longest silence of a log between two lines while a phase runs.
    """

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    interval: float = 0.5
    width: int | None = None
    log_interval: float = 10.0
    _phase: str = ""
    _labels: tuple[str, ...] = ()
    _start: float = 0.0
    _first_done: int = 0
    _done: int = 0
    _total: int = 0
    _losses: np.ndarray | None = None
    _last_draw: float = -math.inf
    _last_decile: int = -1
    _drawn: bool = False
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _ticker: threading.Thread | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def interactive(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def begin(self, phase: str, labels: tuple[str, ...] | list[str]) -> None:
        """Start a phase (``"training 12 runs"``...) whose updates carry one loss per label."""
        with self._lock:
            self._end_line()
            self._phase, self._labels = phase, tuple(labels)
            self._start, self._first_done = time.perf_counter(), -1
            self._done, self._total, self._losses = 0, 0, None
            self._last_draw, self._last_decile = -math.inf, -1

    def update(self, done: int, total: int, losses: np.ndarray | None = None) -> None:
        """``done`` of ``total`` rounds finished; ``losses`` the latest objective of each run."""
        with self._lock:
            now = time.perf_counter()
            if self._first_done < 0:  # a resumed phase starts part-way: time only the rounds run since begin()
                self._first_done = done - 1
            self._done, self._total = done, total
            if losses is not None:
                self._losses = np.asarray(losses, dtype=float).copy()
            decile = (10 * done) // max(total, 1)
            if self.interactive:
                due = now - self._last_draw >= self.interval
            else:
                due = decile != self._last_decile or now - self._last_draw >= self.log_interval
            if due or done >= total:
                self._last_decile = decile
                self._draw(now)
            self._start_ticker(done < total)

    def message(self, text: str) -> None:
        """A line of its own (after the progress line, if one is drawn)."""
        with self._lock:
            self._end_line()
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        self._stop_ticker()
        with self._lock:
            self._end_line()

    def text(self, now: float | None = None, *, bar: bool = False) -> str:
        """The line for the rounds reported so far (``bar``: with the bar, as a terminal shows it)."""
        now = time.perf_counter() if now is None else now
        done, total = self._done, max(self._total, 1)
        elapsed = now - self._start
        ran = done - self._first_done
        rate = ran / elapsed if elapsed > 0 and ran > 0 else math.nan
        eta = (total - done) / rate if rate == rate and rate > 0 else math.nan
        progress = f"{format_bar(done / total, 20, ascii_only=not _shows_blocks(self.stream))} " if bar else ""
        return (  # the losses last: a narrow terminal cuts them, not the time left
            f"{self._phase}: {progress}{done}/{self._total} rounds ({100 * done / total:.0f}%) | "
            f"{format_seconds(elapsed)} elapsed, ETA {format_seconds(eta)}{self._losses_text(self._losses)}"
        )

    def _draw(self, now: float) -> None:
        self._last_draw = now
        if self.interactive:
            width = self.width or _columns(self.stream) - 1
            line = self.text(now, bar=True)
            self.stream.write("\r" + line[:width].ljust(width))
            self._drawn = True
        else:
            self.stream.write(self.text(now) + "\n")
        self.stream.flush()

    def _tick(self) -> None:
        """While a phase runs: redraw a terminal's bar every ``interval`` (the elapsed time moves through a long
        round), and write a log's line once ``log_interval`` passed without one."""
        period = max(0.05, self.interval if self.interactive else min(self.log_interval, 1.0))
        while not self._stop.wait(period):
            with self._lock:
                if self._total and self._done >= self._total:  # the phase is over: the next update starts anew
                    self._ticker = None
                    return
                now = time.perf_counter()
                wait = max(period, self.interval) if self.interactive else self.log_interval
                if self._total and now - self._last_draw >= wait:
                    self._draw(now)

    def _start_ticker(self, running: bool) -> None:
        if running and self._ticker is None:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="fedsample-progress", daemon=True)
            self._ticker.start()

    def _stop_ticker(self) -> None:
        ticker = self._ticker
        if ticker is not None:
            self._stop.set()
            if ticker is not threading.current_thread():
                ticker.join(timeout=5)
            self._ticker = None

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
        parts = [f"{label} {format_number(float(np.mean(values)))}" for label, values in means.items()]
        return " | train loss " + ", ".join(parts)
