"""SIGINT and SIGTERM as an exception that ends a command between two writes, never inside one.

Within :func:`raising_on_signals` (the command line's), both signals raise :class:`Interrupted`, a
``KeyboardInterrupt``: every cleanup a Ctrl-C runs (a run directory's lock released, a temporary
file removed) runs for SIGTERM too, where Python's default would end the process on the spot. A
signal that lands inside :func:`deferred` (an atomic write, taking or releasing a run directory's
lock) is held until the block ends, so no file is left half-written and no lock half-taken; once one
signal was raised, the next ones are ignored while the command cleans up. Outside the block, and in
a program that never enters it, the signals keep their handlers.

>>> with deferred():  # nothing to hold: no signal came
...     pass
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["BEFORE_IT_BEGAN", "Interrupted", "deferred", "raising_on_signals", "reclaim_signals"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
BEFORE_IT_BEGAN = "before it began; nothing was written"
"""What an interrupt line says of a command stopped while it was still reading its input."""


class Interrupted(KeyboardInterrupt):
    """The command was stopped by ``signum`` (SIGINT or SIGTERM); ``detail`` may say what was saved."""

    def __init__(self, signum: int, detail: str = "") -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.detail = detail

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """``128 + signum``, as a shell reports a process the signal ended: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class _State:
    """The handler's state: whether it is installed, the depth of :func:`deferred` blocks in the main
    thread, a signal held until they end, and whether one was raised already."""

    installed = False
    depth = 0
    pending: int | None = None
    raised = False


def _raise(signum: int) -> None:
    _State.raised = True
    raise Interrupted(signum)


def _handle(signum: int, frame: FrameType | None) -> None:
    if _State.raised:
        return  # the command is cleaning up after the first signal
    if _State.depth > 0:
        _State.pending = _State.pending or signum
        return
    _raise(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (a write that must not stop half-way); then raise.

    Only the main thread's blocks count: signal handlers run there.
    """
    if not _State.installed or not _in_main_thread():
        yield
        return
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        if _State.depth == 0 and _State.pending is not None:
            signum, _State.pending = _State.pending, None
            _raise(signum)


@contextmanager
def raising_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` (held inside :func:`deferred`).

    A no-op outside the main thread, where Python cannot install signal handlers.
    """
    if not _in_main_thread() or _State.installed:
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    _State.installed, _State.depth, _State.pending, _State.raised = True, 0, None, False
    try:
        for signum in SIGNALS:
            signal.signal(signum, _handle)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        _State.installed, _State.depth, _State.pending, _State.raised = False, 0, None, False


def reclaim_signals() -> None:
    """Within :func:`raising_on_signals`, install its handlers again where a library replaced them
    (``ray.init`` sets a SIGTERM handler that exits at once, skipping the cleanup and the line)."""
    if _State.installed and _in_main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _handle)
