"""How many threads PyTorch runs, and how its OpenMP threads wait: a policy that holds on a shared machine.

PyTorch's CPU wheels run their kernels on GNU OpenMP threads, one per CPU by default, which
*spin* between parallel regions. On a shared machine (other jobs, a sweep's other runs, Ray
workers) a spinning thread burns the CPU another process needs: the default run took 121.9 s
instead of 7.3 s beside other jobs (issue 23). The policy:

* **passive waiting**: OpenMP's threads sleep between parallel regions (``OMP_WAIT_POLICY=PASSIVE``).
  It must be in the environment before PyTorch loads OpenMP, so :func:`prefer_passive_waiting`
  sets it when ``torch`` is not imported yet and the user has set neither ``OMP_WAIT_POLICY`` nor
  ``GOMP_SPINCOUNT``; the engine package and the Ray workers call it. On an idle machine spinning
  is faster for rounds of many small kernels (``bench_engine.py``: up to 2.9x on the digits round);
  ``OMP_WAIT_POLICY=ACTIVE`` asks for it on a machine you have to yourself. A bounded spin
  (``GOMP_SPINCOUNT`` of 10^4 to 10^5) was measured too: under contention it was the worst of all
  (a digits round 10x to 80x slower than passive). The wait policy never changes a result;
* **no more threads than CPUs this process may really use** (``threads = "auto"``): PyTorch's own
  count (one per CPU of the affinity mask, or what the caller set with ``torch.set_num_threads``),
  capped by the CPUs of the affinity mask and the cgroup's CPU quota (a container limited to 1.5
  CPUs gets 2 threads, not the host's 64): :func:`usable_cpus`, :func:`resolve_threads`.
  ``training.threads`` / ``--threads N`` fix the count.

The thread count is a setting, never measured from the machine's load: a few kernels sum in
another order on another number of threads, and a run's arithmetic must not depend on what else
was running when it started.

>>> resolve_threads(3, current=8)
3
>>> resolve_threads("auto", current=1)
1
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_THREADS", "ThreadsSetting", "prefer_passive_waiting", "resolve_threads", "usable_cpus"]

MAX_THREADS = 1024
_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadsSetting:
    """A thread count the engine accepts: ``"auto"`` or an int in ``[1, MAX_THREADS]``."""

    def is_satisfied_by(self, value: object) -> bool:
        if value == "auto" and isinstance(value, str):
            return True
        return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_THREADS

    def __str__(self) -> str:
        return f"'auto' or an int in the range [1, {MAX_THREADS}]"


def prefer_passive_waiting() -> bool:
    """Ask OpenMP's threads to sleep between parallel regions, if it is not too late and nobody chose.

    Returns whether ``OMP_WAIT_POLICY=PASSIVE`` was set now: not when ``torch`` is already imported
    (OpenMP read its environment then) or when ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is set.
    """
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota (rounded up)."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        count = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)


def resolve_threads(setting: int | str, *, current: int) -> int:
    """The thread count of a ``threads`` setting: the int itself, or for ``"auto"`` PyTorch's ``current``
    count capped at :func:`usable_cpus`."""
    return max(1, min(current, usable_cpus())) if setting == "auto" else int(setting)


def _cgroup_quota() -> float | None:
    """The CPU quota (in CPUs) of this process's cgroup and its ancestors, smallest first; None if unlimited."""
    quotas = [q for q in (_v2_quotas() + _v1_quotas()) if q > 0]
    return min(quotas) if quotas else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_quotas() -> list[float]:
    """``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") of the process's cgroup v2 and each ancestor."""
    text = _read(Path("/proc/self/cgroup")) or ""
    relative = next((line[3:] for line in text.splitlines() if line.startswith("0::")), None)
    if relative is None:
        return []
    quotas = []
    directory = _CGROUP_ROOT / relative.lstrip("/")
    while True:
        value = _read(directory / "cpu.max")
        if value is not None:
            parts = value.split()
            if len(parts) == 2 and parts[0] != "max":
                with contextlib.suppress(ValueError, ZeroDivisionError):
                    quotas.append(int(parts[0]) / int(parts[1]))
        if directory == _CGROUP_ROOT or directory == directory.parent:
            return quotas
        directory = directory.parent


def _v1_quotas() -> list[float]:
    """``cpu.cfs_quota_us / cpu.cfs_period_us`` of cgroup v1's cpu controller (-1: no quota)."""
    for directory in (_CGROUP_ROOT / "cpu", _CGROUP_ROOT / "cpu,cpuacct"):
        quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            try:
                value, length = int(quota), int(period)
            except ValueError:
                continue
            if value > 0 and length > 0:
                return [value / length]
    return []
