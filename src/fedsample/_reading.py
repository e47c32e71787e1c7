"""Opening the files a user names as input (size lists, configs, saved states, traces) without hanging.

``open(path, "rb")`` waits, in the open itself, for a writer when ``path`` is a FIFO: a command given
a named pipe that nobody writes would hang for ever. :func:`open_input` opens without waiting, then
reads as usual, so a FIFO without a writer reads as an empty file (refused by its reader) while a
pipe that is being written (``/dev/stdin`` of ``cat sizes.txt | fedsample stats --sizes-file
/dev/stdin``) reads what is written.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from fedsample._interrupts import deferred

__all__ = ["open_input"]

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # absent on Windows, which has no FIFOs in the file system


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading bytes, as ``open(path, "rb")`` (same ``OSError`` family) but never
    blocking in the open; the caller closes it (``with open_input(path) as handle: ...``)."""
    # A SIGINT or SIGTERM waits for the file object (fedsample._interrupts): raised half-way in fdopen, which
    # then closes the descriptor, it would make the close below fail, and the file look unreadable.
    with deferred():
        descriptor = os.open(path, os.O_RDONLY | _NONBLOCK)
        try:
            if _NONBLOCK:
                os.set_blocking(descriptor, True)
            return os.fdopen(descriptor, "rb")
        except BaseException:  # a directory (IsADirectoryError): fdopen leaves the descriptor open
            os.close(descriptor)
            raise
