"""Writing result files so that no reader ever sees a half-written one."""

from __future__ import annotations

import os
from pathlib import Path

from fedsample import _io
from fedsample.cli._app import CommandError

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str, *, parameter: str = "--output") -> None:
    """Write ``text`` atomically (:func:`fedsample._io.write_text_atomic`), after checking the directory exists."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise CommandError(
            f"The {parameter!r} parameter must name a file in an existing directory. Got {str(path)!r} instead.",
            parameter=parameter,
        )
    _io.write_text_atomic(target, text)
