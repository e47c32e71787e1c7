"""The lock that makes one process the writer of a run directory (:mod:`fedsample.experiments.rundir.directory`).

The lock file ``.fedsample.lock`` holds an exclusive ``flock`` and names its owner (pid, host, start
time); a second writer is refused, naming that owner. The kernel releases the lock when its process
dies, so the lock file a killed run leaves behind is stale and the next writer takes it over.

The lock is held by descriptor, in the directory the writer opened (its descriptor): it is opened
without following a link (a planted ``.fedsample.lock`` link, or a hard link to another file, is
refused, and its target never written), and released only where it still is ours. A removed run
directory takes its lock file with it, so on Linux the writer also claims the directory's path (a
name in the abstract socket namespace, released by the kernel with the process): a second writer
is refused even after the directory was removed and re-created, until the first one ends.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import socket
import stat
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsample import _io
from fedsample.errors import FedsampleError
from fedsample.serialization import dump_json, load_json

__all__ = ["LOCK_FILE", "Lock", "acquire_lock", "probe_lock", "release_lock"]

LOCK_FILE = ".fedsample.lock"
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(eq=False)
class Lock:
    """A held lock: the lock file's descriptor (holding the ``flock``), the claim on the directory's
    path (None where the platform has none), and the previous owner named in a stale lock file."""

    folder: int
    handle: int
    claim: socket.socket | None
    previous: dict[str, Any] | None


def acquire_lock(folder: int, directory: Path, parameter: str) -> Lock:
    """Hold the lock of the run directory open as ``folder`` (a descriptor of ``directory``) and write our
    name in it; refuse, in one line naming ``parameter``, if another process holds it or the lock file is
    a link. Returns the lock, with the owner a previous (dead) writer left in the file, if any."""
    claim = _claim_path(folder, directory, parameter)
    try:
        handle, previous = _lock_file(folder, directory, parameter)
    except BaseException:
        if claim is not None:
            claim.close()
        raise
    return Lock(folder, handle, claim, previous)


def release_lock(lock: Lock) -> None:
    """Remove the lock file if it is still ours (while still holding it: a waiting opener sees another
    inode and retries), then let go of the lock and of the path."""
    try:
        with contextlib.suppress(OSError):  # a directory removed (its lock with it) or read-only now
            if _is_ours(lock.folder, lock.handle):
                os.unlink(LOCK_FILE, dir_fd=lock.folder)
    finally:
        os.close(lock.handle)
        if lock.claim is not None:
            lock.claim.close()


def probe_lock(directory: Path, parameter: str) -> None:
    """Refuse ``directory`` (a real folder) if another process holds its lock; leave it as it was."""
    folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        release_lock(acquire_lock(folder, directory, parameter))
    finally:
        os.close(folder)


def _lock_file(folder: int, directory: Path, parameter: str) -> tuple[int, dict[str, Any] | None]:
    path = directory / LOCK_FILE
    while True:
        try:
            handle = _io._open(LOCK_FILE, _LOCK_FLAGS, 0o644, dir_fd=folder)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a symbolic link
                raise _not_plain(directory, parameter, f"a symbolic link to {_link_target(folder)!r}") from None
            raise _io.write_fault(exc, path) from None
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                what = "not a regular file" if not stat.S_ISREG(info.st_mode) else "a hard link to another file"
                raise _not_plain(directory, parameter, what)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(handle)
                raise FedsampleError(
                    f"The '{parameter}' parameter must name a run directory that no other process is writing. Got "
                    f"{str(directory)!r}, which {_describe(owner)} is writing (lock file {LOCK_FILE}), instead.",
                    parameter=parameter,
                ) from None
        except BaseException:
            os.close(handle)
            raise
        if _is_ours(folder, handle):
            break
        os.close(handle)  # the owner released and removed the file between our open and our lock: again
    try:
        previous = _read_owner(handle) or None
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(handle, 0)
        data = (dump_json(owner) + "\n").encode("utf-8")
        if _io._write(handle, memoryview(data)) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fsync(handle)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(LOCK_FILE, dir_fd=folder)
        os.close(handle)
        raise _io.write_fault(exc, path) from None
    return handle, previous


def _is_ours(folder: int, handle: int) -> bool:
    """Whether the directory's entry ``.fedsample.lock`` is the file open as ``handle``."""
    try:
        entry = os.stat(LOCK_FILE, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(handle)
    return (entry.st_dev, entry.st_ino) == (held.st_dev, held.st_ino)


def _not_plain(directory: Path, parameter: str, what: str) -> FedsampleError:
    return FedsampleError(
        f"The '{parameter}' parameter must name a run directory whose lock file is a plain file or absent. Got "
        f"{str(directory)!r}, whose {str(directory / LOCK_FILE)!r} is {what}, instead: fedsample never writes "
        "through it; remove it, or choose another directory.",
        parameter=parameter,
    )


def _link_target(folder: int) -> str:
    try:
        return os.readlink(LOCK_FILE, dir_fd=folder)
    except OSError:
        return "?"


def _claim_path(folder: int, directory: Path, parameter: str) -> socket.socket | None:
    """Claim the directory's path for this process (Linux: an abstract socket named after it), or refuse
    it, naming the process that claims it. None where the platform has no such namespace."""
    if not sys.platform.startswith("linux"):
        return None
    key = hashlib.sha256(os.fsencode(os.path.realpath(directory))).hexdigest()[:48]
    name = f"\0fedsample-run-directory-{key}".encode()
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(name)
        claim.listen(64)  # a refused writer's probe waits there, never accepted (_claimant)
    except OSError as exc:
        claim.close()
        if exc.errno != errno.EADDRINUSE:
            return None  # no claim to be had here (a sandbox): the lock file still holds
        raise FedsampleError(
            f"The '{parameter}' parameter must name a run directory that no other process is writing. Got "
            f"{str(directory)!r}, which {_claimant(name, folder)} is writing (its path is claimed, even if the "
            "directory was removed and made again since), instead.",
            parameter=parameter,
        ) from None
    return claim


def _claimant(name: bytes, folder: int) -> str:
    """The process claiming ``name``: asked of the socket (its peer's pid), named as the lock file names it."""
    pid = None
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)  # a full backlog (never accepted) answers EAGAIN instead of waiting
        probe.connect(name)
        pid, _, _ = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    owner: dict[str, Any] = {}
    with contextlib.suppress(OSError):
        handle = os.open(LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        try:
            owner = _read_owner(handle) if stat.S_ISREG(os.fstat(handle).st_mode) else {}
        finally:
            os.close(handle)
    here = socket.gethostname()
    if pid is None and owner.get("host") == here and isinstance(owner.get("pid"), int):
        pid = owner["pid"] if _alive(owner["pid"]) else None
    if pid is None:
        return "another process"
    return _describe(owner if owner.get("pid") == pid else {"pid": pid, "host": here})


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs here (signal 0 sends nothing; the pid read from a file may be anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def _read_owner(handle: int) -> dict[str, Any]:
    try:
        owner = load_json(os.pread(handle, 4096, 0).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    if not owner:
        return "another process"
    started = f" (started {owner['started']})" if "started" in owner else ""
    return f"process {owner.get('pid')} on {owner.get('host')}{started}"
