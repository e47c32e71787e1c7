"""Progress lines for tests that interrupt a run mid-way and resume it, the check that it ends as an
uninterrupted run, and whether a process has its SIGTERM handler in place (fedsample's, from the first line
of ``import fedsample`` in the console script)."""

from __future__ import annotations

import io
import re
import signal
from pathlib import Path
from typing import Any

import numpy as np

from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.results.metrics import read_metrics


def quiet_progress() -> ProgressLine:
    """A progress line that writes nowhere."""
    return ProgressLine(stream=io.StringIO())


class Interrupted(Exception):
    """Raised by :class:`StopAfter`: the run was cut as by a kill."""


class StopAfter(ProgressLine):
    """A silent progress line that interrupts the run once ``limit`` rounds (over all seeds) are done."""

    def __init__(self, limit: int) -> None:
        super().__init__(stream=io.StringIO())
        self.limit = limit

    def update(self, done: int, total: int, losses: Any = None) -> None:
        if done >= self.limit:
            raise Interrupted


def assert_same_metrics(first: Path, second: Path) -> None:
    """The run directories' metrics are equal column by column, except the wall-clock ``round_seconds``."""
    a, b = read_metrics(first), read_metrics(second)
    a.pop("round_seconds")
    b.pop("round_seconds")
    assert a.keys() == b.keys()
    for column in a:
        np.testing.assert_array_equal(a[column], b[column], err_msg=column)


def handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has its own SIGTERM handler, read from ``/proc/PID/status`` (Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE)
    return caught is not None and bool(int(caught.group(1), 16) >> (signal.SIGTERM - 1) & 1)
