"""A run directory's manifest and what ``--overwrite`` may remove (:mod:`~fedsample.experiments.rundir.directory`).

``manifest.json`` lists every file fedsample wrote in the directory and the folders it created for
them. ``--overwrite`` removes exactly the listed files (with the temporary files that interrupted
writes of them left behind), then the listed folders that are empty. It never follows a symbolic
link, and it refuses, before removing anything, a directory that holds anything else: a user's
notes kept beside a run are never deleted. A directory written by a fedsample without manifests is
refused (delete it yourself, or choose another ``--out``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fedsample import _io
from fedsample.errors import FedsampleError
from fedsample.experiments.rundir.locking import LOCK_FILE, probe_lock
from fedsample.serialization import dump_json, load_json

__all__ = [
    "MANIFEST_FILE",
    "check_new_run_directory",
    "is_run_directory",
    "manifest_text",
    "plan_removal",
    "read_manifest",
    "remove",
]

MANIFEST_FILE = "manifest.json"
_FORMAT = "fedsample-run-directory"
_VERSION = 1
# Files that mark a run directory written before manifests existed.
_LEGACY_MARKERS = ("config.toml", "suite.json", "runs.json")


def is_run_directory(directory: Path) -> bool:
    """Whether ``directory`` holds a manifest (a run directory fedsample wrote), a file and not a link."""
    try:
        return stat.S_ISREG(os.lstat(directory / MANIFEST_FILE).st_mode)
    except OSError:
        return False


def check_new_run_directory(directory: Path, *, overwrite: bool, parameter: str = "--out") -> None:
    """Refuse, without touching the file system, a ``directory`` that a new run may not write into.

    A new run may write into a directory that does not exist or is empty, or, with ``overwrite``,
    into a run directory holding nothing but what fedsample listed in its manifest.
    """
    shown = str(directory)
    try:
        existing = next(path for path in (directory, *directory.absolute().parents) if os.path.lexists(path))
        if not existing.is_dir():
            what = "is" if existing == directory else f"lies in {str(existing)!r}, which is"
            kind = "a link to nothing" if existing.is_symlink() and not existing.exists() else "an existing file"
            raise FedsampleError(
                f"The '{parameter}' parameter must name a directory. Got {shown!r}, which {what} {kind}, instead.",
                parameter=parameter,
            )
        if existing != directory or not _entries(directory):
            return
        _check_existing(directory, overwrite=overwrite, parameter=parameter)
    except OSError as exc:
        raise FedsampleError(
            f"The '{parameter}' parameter must name a directory fedsample can read. Got {shown!r} instead "
            f"({exc.strerror or type(exc).__name__}).",
            parameter=parameter,
        ) from exc


def _entries(directory: Path) -> list[Path]:
    """The directory's entries, less a lock and manifest temporary files left by a run killed as it began."""
    return [
        entry for entry in directory.iterdir() if entry.name != LOCK_FILE and not _temporary_of_manifest(entry.name)
    ]


def _check_existing(directory: Path, *, overwrite: bool, parameter: str) -> None:
    shown = str(directory)
    if not is_run_directory(directory):
        if any((directory / name).exists() for name in _LEGACY_MARKERS):
            action = (
                "--overwrite removes only files a manifest.json lists: delete the directory yourself"
                if overwrite
                else "pass --resume to continue it, or delete it yourself"
            )
            raise FedsampleError(
                f"The '{parameter}' parameter must name a new directory or a run directory with a "
                f"{MANIFEST_FILE}. Got {shown!r}, a run directory of an older fedsample without one ({action}, "
                "or choose another --out) instead.",
                parameter=parameter,
            )
        raise FedsampleError(
            f"The '{parameter}' parameter must name a new directory or a run directory. Got {shown!r}, which "
            "holds other files, instead.",
            parameter=parameter,
        )
    if not overwrite:
        raise FedsampleError(
            f"The '{parameter}' parameter must name a directory without a run (pass --resume to continue it, or "
            f"--overwrite to replace it). Got {shown!r}, which holds one, instead.",
            parameter=parameter,
        )
    removal = plan_removal(directory)
    if removal.foreign:
        listed = ", ".join(repr(path) for path in removal.foreign[:3])
        more = f" and {len(removal.foreign) - 3} more" if len(removal.foreign) > 3 else ""
        raise FedsampleError(
            f"The '--overwrite' parameter removes only the files fedsample wrote. Got {shown!r}, which also "
            f"holds {listed}{more} (move them away, or choose another --out), instead.",
            parameter="--overwrite",
        )


def manifest_text(files: set[str], directories: set[str]) -> str:
    """The manifest listing ``files`` and ``directories`` (relative, POSIX names)."""
    payload = {"format": _FORMAT, "version": _VERSION, "files": sorted(files), "directories": sorted(directories)}
    return dump_json(payload, indent=1) + "\n"


def read_manifest(directory: Path) -> tuple[set[str], set[str]]:
    path = directory / MANIFEST_FILE
    if not path.is_file():
        return set(), set()  # a run of an older fedsample, resumed: from now on its writes are listed
    try:
        payload = load_json(path.read_text(encoding="utf-8"))
        files, folders = payload["files"], payload["directories"]
        if payload.get("format") != _FORMAT or not all(isinstance(x, str) for x in [*files, *folders]):
            raise TypeError(payload.get("format"))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise FedsampleError(
            f"The '--resume' parameter must name a run directory whose {MANIFEST_FILE} lists its files. Got "
            f"{str(directory)!r}, whose {MANIFEST_FILE} is unreadable ({type(exc).__name__}), instead.",
            parameter="--resume",
        ) from exc
    return set(files), set(folders)


@dataclass
class _Removal:
    files: list[Path] = field(default_factory=list)
    directories: list[Path] = field(default_factory=list)  # deepest first
    locks: list[Path] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)


def plan_removal(directory: Path, *, temporary_only: bool = False) -> _Removal:
    """What overwriting ``directory`` removes, and what it would have to remove that is not ours.

    The walk reads each entry with ``lstat`` and descends only real folders: a symbolic link is
    removed as a link if the manifest lists it, never followed.
    """
    removal = _Removal()
    _walk(directory, directory, "", removal, temporary_only=temporary_only)
    return removal


def _walk(root: Path, directory: Path, prefix: str, removal: _Removal, *, temporary_only: bool) -> None:
    files, folders = read_manifest(directory) if (directory / MANIFEST_FILE).is_file() else (set(), set())
    _walk_folder(root, directory, "", files, folders, prefix, removal, temporary_only=temporary_only)


def _walk_folder(
    root: Path,
    run: Path,
    relative: str,
    files: set[str],
    folders: set[str],
    prefix: str,
    removal: _Removal,
    *,
    temporary_only: bool,
) -> None:
    folder = run / relative if relative else run
    for entry in sorted(folder.iterdir()):
        name = f"{relative}/{entry.name}" if relative else entry.name
        shown = f"{prefix}{name}"
        mode = entry.lstat().st_mode
        if not relative and entry.name == MANIFEST_FILE:
            continue  # rewritten, never removed: the directory stays a run directory
        if not relative and entry.name == LOCK_FILE:
            if run != root:
                removal.locks.append(entry)
            continue
        if stat.S_ISDIR(mode):
            if name in folders:
                if (entry / MANIFEST_FILE).is_file() and f"{name}/{MANIFEST_FILE}" in files:
                    _walk(root, entry, f"{shown}/", removal, temporary_only=temporary_only)
                else:
                    _walk_folder(root, run, name, files, folders, prefix, removal, temporary_only=temporary_only)
                if not temporary_only:
                    removal.directories.append(entry)
            elif not temporary_only:
                removal.foreign.append(shown)
            continue
        ours = name in files
        temporary = _temporary_of(entry.name, relative, files) or (not relative and _temporary_of_manifest(entry.name))
        if temporary and stat.S_ISREG(mode):
            removal.files.append(entry)
        elif ours and not temporary_only:
            removal.files.append(entry)  # a listed name, unlinked as it is (a link is not followed)
        elif not ours and not temporary_only:
            removal.foreign.append(shown)


def _temporary_of(entry: str, relative: str, files: set[str]) -> bool:
    """Whether ``entry`` is ``.NAME.<random>.tmp`` (:func:`fedsample._io.atomic_path`) of a listed ``NAME``."""
    if not (entry.startswith(".") and entry.endswith(".tmp")):
        return False
    stem = entry[1:-4]
    for index in range(len(stem)):
        if stem[index] == "." and (f"{relative}/{stem[:index]}" if relative else stem[:index]) in files:
            return True
    return False


def _temporary_of_manifest(entry: str) -> bool:
    return entry.startswith(f".{MANIFEST_FILE}.") and entry.endswith(".tmp")


def remove(removal: _Removal) -> None:
    for lock in removal.locks:
        probe_lock(lock.parent, "--out")  # refuses a part that another process is writing
    for path in removal.files:
        path.unlink(missing_ok=True)
    for path in sorted(removal.directories, key=lambda p: len(p.parts), reverse=True):
        for stale in (path / MANIFEST_FILE, *_io.temporary_files(path / MANIFEST_FILE)):
            if stale.is_file() and not stale.is_symlink() and _only_ours_left(path):
                stale.unlink()
        with contextlib.suppress(OSError):
            path.rmdir()  # only when empty


def _only_ours_left(path: Path) -> bool:
    """Whether a nested run's folder holds nothing but its manifest and the manifest's temporary files."""
    return all(entry.name == MANIFEST_FILE or _temporary_of_manifest(entry.name) for entry in path.iterdir())
