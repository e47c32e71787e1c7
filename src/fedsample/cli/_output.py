"""Writing result files so that no reader ever sees a half-written one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fedsample.cli._app import CommandError

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str, *, parameter: str = "--output") -> None:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk, then rename it over ``path``."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise CommandError(
            f"The {parameter!r} parameter must name a file in an existing directory. Got {str(path)!r} instead.",
            parameter=parameter,
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
