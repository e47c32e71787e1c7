"""What the sampler benchmarks share: the median wall time of a call (imported as ``from _timing import
median_seconds``; a script's own folder is first on ``sys.path`` when it runs as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """The median of ``repeats`` timings of ``fn()``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
