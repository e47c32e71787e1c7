"""A run directory that says it is one: its manifest, its lock, and what ``--overwrite`` may remove.

``manifest.json`` lists every file fedsample wrote in the directory and the folders it created
for them. It is written before anything else and rewritten (atomically) before each new file is
written, so at every moment it covers the directory's files: every atomic write of
:mod:`fedsample._io` announces its target first to the open :class:`RunDirectory`
(:func:`fedsample._io.guarding`), whatever module writes it (configs, checkpoints, metrics, plots,
Ray task files). The same guard refuses a symbolic link where a file or a folder is written, and
stops the run, in one line, once the directory it opened was removed or replaced (it is never made
again); a full or read-only disk ends in one line too (:class:`fedsample._io.WriteError`), with the
files written so far complete and ``fedsample run --resume`` to finish, or, when it struck before
the first file, the directory left as it was.

``--overwrite`` removes exactly the listed files, never following a link, and refuses a directory
that holds anything else (:mod:`fedsample.experiments.rundir.manifest`).

``.fedsample.lock`` makes one process the writer of the directory
(:mod:`fedsample.experiments.rundir.locking`): a second writer is refused, naming the owner, even after the
directory was removed and made again, and the lock file a killed run leaves behind is stale, so the
next writer takes it over.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsample import _io
from fedsample._interrupts import deferred
from fedsample.errors import FedsampleError
from fedsample.experiments.rundir.locking import LOCK_FILE, Lock, acquire_lock, release_lock
from fedsample.experiments.rundir.manifest import (
    MANIFEST_FILE,
    check_new_run_directory,
    is_run_directory,
    manifest_text,
    plan_removal,
    read_manifest,
    remove,
)

__all__ = [
    "LOCK_FILE",
    "MANIFEST_FILE",
    "RunDirectory",
    "check_new_run_directory",
    "current_run_directory",
    "is_run_directory",
    "open_run_directory",
    "resume_target",
    "updating_run_directory",
]


@dataclass(eq=False)
class RunDirectory:
    """An open run directory: the lock is held, and every atomic write into it is checked and listed first.

    It is the guard of :mod:`fedsample._io` while the directory is open: before each write, the
    directory's path must still lead to the directory this run opened (a removed or replaced one is
    never written into, nor made again), neither the file nor a folder on its way may be a symbolic
    link, and the file is listed in the manifest. ``root`` is the outermost open run directory (a
    suite's), the one ``--resume`` continues.
    """

    path: Path
    parameter: str = "--out"
    files: set[str] = field(default_factory=set)
    directories: set[str] = field(default_factory=set)
    stale_owner: dict[str, Any] | None = None
    listing: bool = True  # False: a folder that is not a run directory (``fedsample report`` on old results)
    lazy: bool = False  # opened (and locked) by its first write: ``fedsample report`` and ``plot``
    root: Path | None = None
    _folder: int | None = None
    _identity: tuple[int, int] | None = None
    _lock: Lock | None = None

    def attach(self, *, lock: bool) -> None:
        """Open the directory (a descriptor, its identity) and, with ``lock``, take its lock (a SIGINT or
        SIGTERM waits until both are done, so that :meth:`close` finds them)."""
        with deferred():
            folder = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            info = os.fstat(folder)
            self._folder, self._identity = folder, (info.st_dev, info.st_ino)
            if lock:
                self._lock = acquire_lock(folder, self.path, self.parameter)
                self.stale_owner = self._lock.previous

    def close(self) -> None:
        """Release the lock (removing the lock file only where it is still ours) and the directory."""
        with deferred():
            lock, folder = self._lock, self._folder
            self._lock = self._folder = None
            try:
                if lock is not None:
                    release_lock(lock)
            finally:
                if folder is not None:
                    os.close(folder)

    def intact(self) -> bool:
        """Whether the directory's path still leads to the directory this run opened."""
        try:
            self.check()
        except _io.WriteError:
            return False
        return True

    def check(self, writing: str | None = None) -> None:
        """Refuse to go on, in one line, once the directory's path no longer leads to the directory opened."""
        if self._folder is None:
            return
        try:
            info: os.stat_result | None = os.stat(self.path)
        except OSError:
            info = None
        if info is not None and (info.st_dev, info.st_ino) == self._identity:
            return
        now = (
            "removed"
            if info is None
            else "replaced by a file"
            if not stat.S_ISDIR(info.st_mode)
            else "replaced by another directory"
        )
        at = f" (before writing {writing!r})" if writing else ""
        moved = _where(self._folder)
        elsewhere = f"; the directory it opened is now {moved!r}" if moved else ""
        raise _io.WriteError(
            f"The {self.parameter!r} parameter must name a run directory that stays in place while it is written. "
            f"Got {str(self.path)!r}, which was {now}{at}, instead: nothing more is written there, and it is not "
            f"made again{elsewhere}",
            parameter=self.parameter,
        )

    def announce(self, target: Path) -> None:
        """Before ``target``'s first byte: the directory is ours still, no link on the way, ``target`` listed
        (and the folders above it made, below the directory only). A write elsewhere is not checked."""
        name = self._relative(target)
        if name is None:
            _io.make_folders(target.parent)
            return
        if self.lazy and self._folder is None:
            self._open_for_update()
        self.check(name)
        _io.refuse_links(target, self.path, self.parameter)
        self._list(name)
        _io.make_folders(target.parent, within=self.path)

    def confirm(self, target: Path) -> None:
        """Right before the rename over ``target``: the directory is ours still, and ``target`` no link."""
        name = self._relative(target)
        if name is not None:
            self.check(name)
            _io.refuse_links(target, self.path, self.parameter)

    def withdraw(self, target: Path) -> None:
        """``target``'s write failed: unlist it if it is not there (best effort: the disk may be full)."""
        name = self._relative(target)
        if name is None or name not in self.files or self._folder is None or os.path.lexists(target):
            return
        self.files.discard(name)
        with contextlib.suppress(OSError, FedsampleError):
            self._save()

    def prune(self) -> None:
        """Unlist the files and folders that are listed but gone (intermediate files removed at the end)."""
        files = {name for name in self.files if os.path.lexists(self.path / name)}
        folders = {name for name in self.directories if os.path.lexists(self.path / name)}
        if (files, folders) != (self.files, self.directories):
            self.files, self.directories = files, folders
            self._save()

    def keeps_files(self) -> bool:
        """Whether a file the manifest lists is in the directory."""
        return any(os.path.lexists(self.path / name) for name in self.files)

    def discard(self) -> None:
        """Remove the manifest (a run that failed before its first file): the directory is as it was."""
        for folder in sorted(self.directories, key=lambda name: name.count("/"), reverse=True):
            with contextlib.suppress(OSError):
                (self.path / folder).rmdir()  # only when empty
        for path in (self.path / MANIFEST_FILE, *_io.temporary_files(self.path / MANIFEST_FILE)):
            with contextlib.suppress(OSError):
                if not path.is_symlink():
                    path.unlink()

    def _open_for_update(self) -> None:
        self.attach(lock=self.listing)
        if self.listing:
            self.files, self.directories = read_manifest(self.path)
            remove(plan_removal(self.path, temporary_only=True))

    def _relative(self, target: Path) -> str | None:
        try:
            relative = Path(os.path.abspath(target)).relative_to(os.path.abspath(self.path))
        except ValueError:
            return None  # written elsewhere: not this directory's business
        return relative.as_posix() if relative.parts else None

    def _list(self, name: str) -> None:
        """List ``name`` (a file about to be written) and the folders above it inside the directory."""
        if not self.listing or name in (MANIFEST_FILE, LOCK_FILE) or name in self.files:
            return
        self.files.add(name)
        self.directories.update(parent.as_posix() for parent in Path(name).parents if parent != Path("."))
        self._save()

    def _save(self) -> None:
        _io.write_text_atomic(self.path / MANIFEST_FILE, manifest_text(self.files, self.directories))


def _where(folder: int) -> str | None:
    """Where the directory open as ``folder`` is now, when it was moved rather than removed (Linux)."""
    try:
        if os.fstat(folder).st_nlink == 0:
            return None
        where = os.readlink(f"/proc/self/fd/{folder}")
    except OSError:
        return None
    return None if where.endswith(" (deleted)") else where


def current_run_directory() -> RunDirectory | None:
    """The run directory open in this context (its writes are guarded), or None."""
    guard = _io.current_guard()
    return guard if isinstance(guard, RunDirectory) else None


def resume_target(directory: Path) -> Path:
    """The directory that ``fedsample run --resume`` continues for a run writing ``directory``: the
    outermost open run directory (a suite's), else ``directory``."""
    opened = current_run_directory()
    return opened.root or opened.path if opened is not None else directory


@contextlib.contextmanager
def open_run_directory(
    directory: Path,
    *,
    overwrite: bool = False,
    resume: bool = False,
    parameter: str = "--out",
    resumable: bool = True,
) -> Iterator[RunDirectory]:
    """Lock ``directory`` and check and list every file written into it until the block ends.

    A new run (neither flag) needs a new or empty directory; ``overwrite`` first removes a previous
    run's files (:func:`check_new_run_directory` says what is refused); ``resume`` keeps the
    directory's files. In every case the temporary files of interrupted writes are removed.
    ``parameter`` names the directory in the error refusing it while another process writes it.

    A block that fails before its first file is complete (a full disk at the start) leaves the
    directory as it was: the manifest is removed, and the folders this call made if they are empty. A
    :class:`~fedsample._io.WriteError` (a full or read-only disk, a link in the way, the directory
    removed) ends in one line saying how to continue: ``fedsample run --resume`` (``resumable``), or
    run again.
    """
    if not resume:
        check_new_run_directory(directory, overwrite=overwrite)
    outer = current_run_directory()
    made = _missing_folders(directory)  # what a run that fails before its first file removes again
    run = RunDirectory(directory, parameter=parameter, root=outer.root if outer is not None else directory)
    try:
        if outer is not None:
            outer.announce(directory / MANIFEST_FILE)  # a suite lists its parts' manifests, and makes their folders
        else:
            _io.make_folders(directory)
        run.attach(lock=True)
    except BaseException as exc:
        run.close()
        _remove_empty(made)
        if isinstance(exc, _io.WriteError) and outer is None:  # the lock file could not be written
            raise exc.advised(
                "nothing was written: run the command again once the fault is cleared", parameter
            ) from None
        if isinstance(exc, OSError):  # under a file, on a read-only or pseudo file system (/proc)
            raise FedsampleError(
                f"The '{parameter}' parameter must be a directory that can be created. Got {str(directory)!r} "
                f"({exc.strerror}) instead.",
                parameter=parameter,
            ) from None
        raise
    begun = False
    try:
        try:
            if not resume:
                check_new_run_directory(directory, overwrite=overwrite)  # again, now that the directory is ours
                if overwrite:
                    remove(plan_removal(directory))
            else:
                run.files, run.directories = read_manifest(directory)
                remove(plan_removal(directory, temporary_only=True))
            for temporary in _io.temporary_files(directory / MANIFEST_FILE):
                temporary.unlink()
        except OSError as exc:  # removing what a previous run left, on a file system that refuses it
            raise _io.write_fault(exc, exc.filename or directory, action="Removing") from None
        begun = True
        with _io.guarding(run):
            run._save()
            yield run
    except BaseException as exc:
        intact = run.intact()
        discard = begun and intact and not resume and not run.keeps_files()
        if discard:
            run.discard()
        run.close()
        if intact and (discard or not begun):
            _remove_empty(made)
        if isinstance(exc, _io.WriteError) and outer is None:
            raise exc.advised(
                _advice(directory, intact=intact, discarded=discard, resumable=resumable), parameter
            ) from None
        raise
    run.close()


def _missing_folders(directory: Path) -> list[Path]:
    """``directory`` and the folders above it that do not exist yet, deepest first."""
    missing: list[Path] = []
    current = Path(os.path.abspath(directory))
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) that are empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _advice(directory: Path, *, intact: bool, discarded: bool, resumable: bool) -> str:
    """How to continue after a write fault in ``directory`` (the outermost run directory)."""
    if not intact:
        return ""  # the directory was removed or replaced: the fault says so
    if discarded:
        return f"nothing was left in {str(directory)!r}: run the command again once the fault is cleared"
    if resumable:
        return (
            f"the files written are complete, and `fedsample run --resume {directory}` completes the run once the "
            "fault is cleared"
        )
    return "the files written are complete: run it again with --overwrite once the fault is cleared"


@contextlib.contextmanager
def updating_run_directory(directory: Path, *, parameter: str = "run_dir") -> Iterator[None]:
    """Check, and list in ``directory``'s manifest, what is written into it in the block.

    For a command that rewrites files of an existing run directory (``fedsample report``, ``plot``),
    so that ``--overwrite`` still finds every file listed. The directory is locked (and the temporary
    files of interrupted writes removed) at the block's first write, so a command refused before it
    writes leaves it untouched. A folder that is not a run directory is neither locked nor listed,
    but its writes are checked as a run directory's (no link followed). Inside an open run directory
    (the runner writing its own report) the block runs as it is.
    """
    if current_run_directory() is not None:
        yield
        return
    run = RunDirectory(directory, parameter=parameter, listing=is_run_directory(directory), lazy=True)
    try:
        with _io.guarding(run):
            yield
    except _io.WriteError as exc:
        advice = "the files written before are complete: run the command again once the fault is cleared"
        raise exc.advised(advice if run.intact() else "", parameter) from None
    finally:
        run.close()
