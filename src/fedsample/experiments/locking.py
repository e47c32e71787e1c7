"""The lock that makes one process the writer of a run directory (:mod:`fedsample.experiments.rundir`).

The lock file holds an exclusive ``flock`` and names its owner (pid, host, start time); a second
writer is refused, naming that owner. The kernel releases the lock when its process dies, so the
lock file a killed run leaves behind is stale and the next writer takes it over.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Any

from fedsample.errors import FedsampleError
from fedsample.serialization import dump_json, load_json

__all__ = ["acquire_lock", "release_lock"]


def acquire_lock(path: Path, parameter: str) -> tuple[int, dict[str, Any] | None]:
    """Hold the exclusive lock of ``path`` and write our name in it; refuse if another process holds it.

    Returns the open descriptor and, when a previous owner's name was left in the file (a process
    that died without releasing it), that owner.
    """
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(handle)
            os.close(handle)
            raise FedsampleError(
                f"The '{parameter}' parameter must name a run directory that no other process is writing. Got "
                f"{str(path.parent)!r}, which {_describe(owner)} is writing (lock file {path.name}), instead.",
                parameter=parameter,
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(handle).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(handle)  # the owner released and removed the file between our open and our lock: again
    previous = _read_owner(handle) or None
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.ftruncate(handle, 0)
    os.pwrite(handle, (dump_json(owner) + "\n").encode("utf-8"), 0)
    os.fsync(handle)
    return handle, previous


def release_lock(path: Path, handle: int) -> None:
    try:
        path.unlink(missing_ok=True)  # while still holding it: a waiting opener sees another inode and retries
    finally:
        os.close(handle)


def _read_owner(handle: int) -> dict[str, Any]:
    try:
        owner = load_json(os.pread(handle, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    if not owner:
        return "another process"
    return f"process {owner.get('pid')} on {owner.get('host')} (started {owner.get('started')})"
