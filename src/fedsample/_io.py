"""Atomic file writes: a reader sees the old file or the new one, never a half-written one.

Every result file of fedsample (run metrics, plots, reports, checkpoints, configs) is written to a
temporary file in the target's directory, flushed to disk, and renamed over the target. A crash
or a SIGKILL mid-write leaves at most a hidden ``.NAME.*.tmp`` file behind (:func:`temporary_files`
finds them), never a truncated ``NAME``.

Every write announces its target first to the recorder of the current context, if any
(:func:`recording`): the run directory uses it to list, in its manifest, every file fedsample
wrote there, whatever module writes it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from fedsample.errors import FedsampleError

__all__ = [
    "atomic_path",
    "current_recorder",
    "recording",
    "temporary_files",
    "write_bytes_atomic",
    "write_text_atomic",
]

_TEMPORARY_SUFFIX = ".tmp"
_recorder: ContextVar[Callable[[Path], None] | None] = ContextVar("fedsample_io_recorder", default=None)


@contextmanager
def recording(recorder: Callable[[Path], None]) -> Iterator[None]:
    """Within the block, every atomic write calls ``recorder(target)`` before its first byte is written.

    The innermost block wins (a suite's run directory records its own files, each part its own).
    """
    token = _recorder.set(recorder)
    try:
        yield
    finally:
        _recorder.reset(token)


def current_recorder() -> Callable[[Path], None] | None:
    """The recorder that atomic writes call now (:func:`recording`), or None."""
    return _recorder.get()


def temporary_files(target: str | os.PathLike[str]) -> list[Path]:
    """The temporary files that writes of ``target`` left beside it (a process killed mid-write)."""
    path = Path(target)
    prefix = f".{path.name}."
    return sorted(
        entry
        for entry in path.parent.glob(f".{_glob_escape(path.name)}.*{_TEMPORARY_SUFFIX}")
        if entry.name.startswith(prefix) and not entry.is_symlink() and entry.is_file()
    )


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success, fsync it and rename it over ``path``.

    For writers that take a file name (pyarrow, matplotlib). On an exception the temporary file
    is removed and ``path`` is left as it was. Missing folders above ``path`` are created once the
    recorder has listed it, so a run directory never holds a folder its manifest does not list.
    """
    target = Path(path)
    recorder = _recorder.get()
    if recorder is not None:
        recorder(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise FedsampleError(
            f"The path {str(target.parent)!r} must be a folder to hold {target.name!r}. Got a file in its way instead.",
            parameter="path",
        ) from None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=_TEMPORARY_SUFFIX, dir=target.parent)
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
    """Write ``data`` to ``path`` atomically (missing folders are created)."""
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (missing folders are created)."""
    write_bytes_atomic(path, text.encode("utf-8"))
