"""Atomic file writes: a reader sees the old file or the new one, never a half-written one.

Every result file of fedsample (run metrics, plots, reports, checkpoints, configs) is written to a
temporary file in the target's directory, flushed to disk, and renamed over the target. A crash
or a SIGKILL mid-write leaves at most a hidden ``.NAME.*.tmp`` file behind (:func:`temporary_files`
finds them), never a truncated ``NAME``. A write the file system refuses (no space left, a
read-only file system) removes its temporary file and raises :class:`WriteError`, one line naming
the file.

Every write goes through the guard of the current context, if any (:func:`guarding`): the run
directory (:mod:`fedsample.experiments.rundir.directory`) uses it to list, in its manifest, every file
fedsample wrote there, whatever module writes it, to refuse a symbolic link where a file or a
folder goes, and to stop writing once the directory it opened was removed or replaced.

The system calls that create, write and rename are the module's ``_mkdir``, ``_open``, ``_write``
and ``_rename``: the tests replace them to simulate a full or read-only disk.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from fedsample._interrupts import deferred
from fedsample._validation import invalid
from fedsample.errors import FedsampleError

__all__ = [
    "WriteError",
    "WriteGuard",
    "atomic_path",
    "checked_path",
    "current_guard",
    "guarding",
    "make_folders",
    "refuse_links",
    "temporary_files",
    "write_bytes_atomic",
    "write_fault",
    "write_text_atomic",
]

_TEMPORARY_SUFFIX = ".tmp"
# A new file is never opened through a link, nor left to another process (O_EXCL).
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WriteError(FedsampleError):
    """A file fedsample could not, or would not, write: the file system refused it (no space left, a
    read-only file system), a symbolic link stands where it goes, or its run directory went away.

    ``detail`` is the message without the advice that the run directory adds (how to continue).
    """

    def __init__(self, detail: str, *, parameter: str | None = "path", advice: str = "") -> None:
        super().__init__(f"{detail}; {advice}" if advice else detail, parameter=parameter)
        self.detail = detail

    def advised(self, advice: str, parameter: str | None) -> WriteError:
        """The same fault, with ``advice`` on how to continue after it."""
        return WriteError(self.detail, parameter=parameter, advice=advice)


class WriteGuard(Protocol):
    """What a write asks the folder it writes into (a run directory): see :func:`guarding`."""

    def announce(self, target: Path) -> None:
        """Accept ``target`` (or refuse it) before its first byte is written, and make its missing folders."""

    def confirm(self, target: Path) -> None:
        """Accept (or refuse) the rename of the finished temporary file over ``target``."""

    def withdraw(self, target: Path) -> None:
        """``target`` was not written after all (the write failed)."""


_guard: ContextVar[WriteGuard | None] = ContextVar("fedsample_io_guard", default=None)


@contextmanager
def guarding(guard: WriteGuard) -> Iterator[None]:
    """Within the block, every atomic write goes through ``guard``.

    The innermost block wins (a suite's run directory guards its own files, each part its own).
    """
    token = _guard.set(guard)
    try:
        yield
    finally:
        _guard.reset(token)


def current_guard() -> WriteGuard | None:
    """The guard that atomic writes go through now (:func:`guarding`), or None."""
    return _guard.get()


def _mkdir(path: Path) -> None:
    os.mkdir(path)


def _open(path: str | Path, flags: int, mode: int = 0o666, *, dir_fd: int | None = None) -> int:
    return os.open(path, flags, mode, dir_fd=dir_fd)


def _write(handle: int, data: memoryview) -> int:
    return os.write(handle, data)


def _rename(source: Path, target: Path) -> None:
    os.replace(source, target)


def write_fault(exc: OSError, path: str | os.PathLike[str], *, action: str = "Writing") -> WriteError:
    """The one-line :class:`WriteError` of an ``OSError`` raised while writing (``action``) ``path``."""
    code = errno.errorcode.get(exc.errno or 0)
    reason = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    return WriteError(f"{action} {os.fsdecode(path)!r} failed: {reason}" + (f" ({code})" if code else ""))


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


def refuse_links(target: Path, within: Path, parameter: str) -> None:
    """Refuse ``target`` when it, or a folder between ``within`` and it, is a symbolic link (or a folder
    is a file, or the target is a folder): fedsample never writes through a link where it writes."""
    relative = Path(os.path.abspath(target)).relative_to(os.path.abspath(within))
    current = within
    for index, part in enumerate(relative.parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return  # made by this write, as a folder of our own
        last = index == len(relative.parts) - 1
        what = (
            "a symbolic link"
            if stat.S_ISLNK(mode)
            else "a folder"
            if last and stat.S_ISDIR(mode)
            else "not a folder"
            if not last and not stat.S_ISDIR(mode)
            else ""
        )
        if what:
            link = f" to {os.readlink(current)!r}" if stat.S_ISLNK(mode) else ""
            name = "/".join(relative.parts[: index + 1])
            rule = (
                "writes nothing through a link" if link else f"can write {name!r} as a {'file' if last else 'folder'}"
            )
            raise WriteError(
                f"The {parameter!r} parameter must name a directory where fedsample {rule}. "
                f"Got {str(within)!r}, where {name!r} ({str(current)!r}) is {what}{link}, instead: "
                "remove it, or choose another directory",
                parameter=parameter,
            )


def make_folders(folder: Path, *, within: Path | None = None) -> None:
    """Create the missing folders up to ``folder``; with ``within``, only those below it (never ``within``
    itself, which a removed run directory would otherwise come back as), and none through a link."""
    if within is not None:
        folder, within = Path(os.path.abspath(folder)), Path(os.path.abspath(within))
    missing: list[Path] = []
    current = folder
    while not (os.path.isdir(current) if within is None else _is_real_folder(current)):
        if current == within or current == current.parent:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(current))
        if os.path.lexists(current):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(current))
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            _mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise


def _is_real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _create_temporary(target: Path) -> tuple[int, Path]:
    """A new file ``.NAME.<random>.tmp`` beside ``target`` (the usual mode: 0666 less the umask)."""
    for _ in range(100):
        temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}{_TEMPORARY_SUFFIX}"
        try:
            return _open(temporary, _NEW_FILE), temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target))


@contextmanager
def _replacing(path: str | os.PathLike[str]) -> Iterator[tuple[int, Path]]:
    """A new temporary file beside ``path`` (its descriptor and path); fsynced and renamed over ``path``
    when the block ends, removed on an exception. OS errors become one-line :class:`WriteError`. A
    SIGINT or SIGTERM that the command line turns into an exception waits for the write to end
    (:func:`fedsample._interrupts.deferred`)."""
    with deferred():
        target = Path(path)
        guard = _guard.get()
        try:
            if guard is not None:
                guard.announce(target)
            else:
                _make_parent(target)
            handle, temporary = _create_temporary(target)
        except BaseException as exc:
            if guard is not None:
                guard.withdraw(target)
            if isinstance(exc, OSError):
                raise write_fault(exc, target) from None
            raise
        try:
            try:
                yield handle, temporary
                os.fsync(handle)  # the file's data, whichever descriptor wrote it
            finally:
                os.close(handle)
            if guard is not None:
                guard.confirm(target)
            _rename(temporary, target)
        except BaseException as exc:
            with suppress(OSError):
                os.unlink(temporary)
            if guard is not None:
                guard.withdraw(target)
            if isinstance(exc, OSError):
                raise write_fault(exc, target) from None
            raise


def _make_parent(target: Path) -> None:
    try:
        make_folders(target.parent)
    except (FileExistsError, NotADirectoryError):
        raise FedsampleError(
            f"The path {str(target.parent)!r} must be a folder to hold {target.name!r}. Got a file in its way instead.",
            parameter="path",
        ) from None


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success, fsync it and rename it over ``path``.

    For writers that take a file name (pyarrow, matplotlib). On an exception the temporary file
    is removed and ``path`` is left as it was. Missing folders above ``path`` are created once the
    guard has listed it, so a run directory never holds a folder its manifest does not list.
    """
    with _replacing(path) as (_, temporary):
        yield temporary


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (missing folders are created)."""
    with _replacing(path) as (handle, _):
        view = memoryview(data)
        while view:
            view = view[_write(handle, view) :]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (missing folders are created)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def checked_path(name: str, owner: str, value: object) -> Path:
    """``value`` as a Path when it is a str or an ``os.PathLike`` of one without a NUL byte; else the
    library's error naming ``name`` of ``owner`` (``Path(None)`` raised TypeError, a NUL ValueError)."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or "\x00" in text:
        raise invalid(name, owner, "a path (a str or an os.PathLike, without NUL)", value)
    return Path(text)
