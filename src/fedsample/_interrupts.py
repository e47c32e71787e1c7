"""SIGINT and SIGTERM as an exception that ends a command between two writes, never inside one, nor
inside an import.

Within :func:`raising_on_signals` (the command line's), both signals raise :class:`Interrupted`, a
``KeyboardInterrupt``: every cleanup a Ctrl-C runs (a run directory's lock released, a temporary
file removed) runs for SIGTERM too, where Python's default would end the process on the spot. A
signal that lands inside :func:`deferred` (an atomic write, taking or releasing a run directory's
lock) is held until the block ends, so no file is left half-written and no lock half-taken. One
that lands while a module is being imported is held until the import is over (retried every
:data:`RETRY_SECONDS`): an import cut half-way leaves the module half-made, and importing it again
(PyTorch's) can crash the interpreter. A second signal, while one is held or while the command cleans
up after it, ends the process at once in one line: a held signal can never make it unkillable.

The ``fedsample`` console script takes both signals from the first line of ``import fedsample``
(:func:`console_startup`), long before its command starts: a signal during start-up ends the process
at once, in one line (``fedsample run: interrupted by SIGTERM before it began; nothing was
written``), and one after the command returned ends it at once too (its output flushed). Outside
these, and in a program that never enters them, the signals keep their handlers; a signal ignored
when the process started (``nohup``, a background job) stays ignored.

>>> with deferred():  # nothing to hold: no signal came
...     pass
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from types import FrameType
from typing import NoReturn

__all__ = [
    "BEFORE_IT_BEGAN",
    "Interrupted",
    "command_name",
    "console_startup",
    "deferred",
    "raising_on_signals",
    "reclaim_signals",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
BEFORE_IT_BEGAN = "before it began; nothing was written"
"""What an interrupt line says of a command stopped while it was still reading its input."""
AGAIN = "again; ended at once, without cleaning up"
"""What the line of a second signal says."""
RETRY_SECONDS = 0.02
"""How often a signal held by an import is tried again."""

# The modules of Python's import machinery: a frame of theirs on the stack is an import under way.
_IMPORT_MACHINERY = frozenset(
    {"_frozen_importlib", "_frozen_importlib_external", "importlib._bootstrap", "importlib._bootstrap_external"}
)


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


# What a signal does, in turn, to the console script: end it at once (starting), raise (the command
# runs: raising_on_signals), end it at once (ending: the command returned). Off: not ours.
OFF, STARTING, RAISING, ENDING = "off", "starting", "raising", "ending"


class _State:
    """The handler's state: its phase, the command's name (for the lines it writes itself), the depth of
    :func:`deferred` blocks in the main thread, a signal held, whether a retry of it is on its way, and
    whether one was raised already."""

    phase = OFF
    command = "fedsample"
    depth = 0
    pending: int | None = None
    retrying = False
    raised = False


def _end_at_once(signum: int, detail: str) -> NoReturn:
    """Flush the command's output, say ``COMMAND: interrupted by SIGNAL detail`` (nothing with no detail),
    and end the process with ``128 + signum``, running no more Python: no cleanup, no half-made import
    touched again."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a stream closed, or busy in the interrupted code: what it holds is lost
            stream.flush()
    if detail:
        line = f"{_State.command}: interrupted by {signal.Signals(signum).name} {detail}\n"
        with suppress(OSError):
            os.write(2, line.encode("utf-8", "replace"))
    os._exit(128 + signum)


def _importing(frame: FrameType | None) -> bool:
    """Whether the main thread, at ``frame``, is inside an import."""
    while frame is not None:
        if frame.f_globals.get("__name__") in _IMPORT_MACHINERY:
            return True
        frame = frame.f_back
    return False


def _retry() -> None:
    signum = _State.pending
    if _State.phase == RAISING and signum is not None:
        _State.retrying = True
        _thread.interrupt_main(signal.Signals(signum))  # runs _handle again, in the main thread


def _deliver(frame: FrameType | None) -> None:
    """Raise the held signal, unless a write is under way (its block's end delivers it) or an import is
    (tried again shortly)."""
    if _State.pending is None or _State.depth > 0:
        return
    if _importing(frame):
        timer = threading.Timer(RETRY_SECONDS, _retry)
        timer.daemon = True
        timer.start()
        return
    signum, _State.pending = _State.pending, None
    _State.raised = True
    raise Interrupted(signum)


def _handle(signum: int, frame: FrameType | None) -> None:
    if _State.phase == STARTING:
        _end_at_once(signum, BEFORE_IT_BEGAN)
    if _State.phase == ENDING:
        _end_at_once(signum, "")
    if _State.retrying:  # the held signal, tried again (a signal sent meanwhile is merged into it)
        _State.retrying = False
    elif _State.raised or _State.pending is not None:
        _end_at_once(signum, AGAIN)
    else:
        _State.pending = signum
    _deliver(frame)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _install() -> None:
    """``_handle`` for SIGINT and SIGTERM, except one the process ignores (``nohup``, a background job)."""
    for signum in SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _handle)


def command_name(tokens: Sequence[str]) -> str:
    """The name a command line goes by in its lines: ``fedsample run`` (``fedsample`` before a command)."""
    first = next((token for token in tokens if not token.startswith("-")), "")
    return f"fedsample {first}" if first.isidentifier() else "fedsample"


def console_startup() -> None:
    """In the ``fedsample`` console script (and nowhere else), end the process at once on SIGINT or SIGTERM
    until its command starts (:func:`raising_on_signals`) and again once it returned.

    Called first thing by ``import fedsample``: the console script's imports take a second or more
    (PyTorch's) before its command starts.
    """
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if _State.phase != OFF or not _in_main_thread() or not isinstance(main, str) or not _is_console_script(main):
        return
    _State.phase, _State.command = STARTING, command_name(sys.argv[1:])
    _install()


def _is_console_script(path: str) -> bool:
    """Whether ``path`` is the installed ``fedsample`` script (named so, and running ``fedsample.cli``)."""
    if os.path.basename(path) != "fedsample":
        return False
    try:
        with open(path, "rb") as script:
            return b"fedsample.cli" in script.read(4096)
    except OSError:
        return False


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (a write that must not stop half-way); then raise.

    Only the main thread's blocks count: signal handlers run there.
    """
    if _State.phase != RAISING or not _in_main_thread():
        yield
        return
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        if _State.depth == 0:
            _deliver(sys._getframe())


@contextmanager
def raising_on_signals(command: str = "fedsample") -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` (held inside :func:`deferred` and
    imports); ``command`` names the process in the line a second signal writes.

    A no-op outside the main thread, where Python cannot install signal handlers. In the console script,
    the block ends in the phase where a signal ends the process at once.
    """
    if not _in_main_thread() or _State.phase == RAISING:
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    phase = _State.phase
    _State.phase, _State.command, _State.depth, _State.pending, _State.raised = RAISING, command, 0, None, False
    try:
        _install()
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        _State.phase = ENDING if phase == STARTING else phase
        _State.depth, _State.pending, _State.retrying, _State.raised = 0, None, False, False


def reclaim_signals() -> None:
    """Within :func:`raising_on_signals`, install its handlers again where a library replaced them
    (``ray.init`` sets a SIGTERM handler that exits at once, skipping the cleanup and the line)."""
    if _State.phase == RAISING and _in_main_thread():
        _install()


console_startup()  # ``import fedsample`` imports this module first: the console script's earliest moment
