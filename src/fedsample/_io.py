"""Atomic file writes: a reader sees the old file or the new one, never a half-written one.

Every result file of fedsample (run metrics, plots, reports, checkpoints, configs) is written to a
temporary file in the target's directory, flushed to disk, and renamed over the target. A crash
or a SIGKILL mid-write leaves at most a hidden ``.NAME.*.tmp`` file behind, never a truncated
``NAME``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_bytes_atomic", "write_text_atomic"]


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success, fsync it and rename it over ``path``.

    For writers that take a file name (pyarrow, matplotlib). On an exception the temporary file
    is removed and ``path`` is left as it was. The directory must exist.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    temporary = Path(tmp)
    # mkstemp creates the file owner-only (0600); result files get the usual mode (0666 less the umask).
    os.chmod(temporary, 0o666 & ~_umask())
    try:
        yield temporary
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (the directory must exist)."""
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (the directory must exist)."""
    write_bytes_atomic(path, text.encode("utf-8"))
