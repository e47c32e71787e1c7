"""Progress lines for tests that interrupt a run mid-way and resume it."""

from __future__ import annotations

import io
from typing import Any

from fedsample.experiments.progress import ProgressLine


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
