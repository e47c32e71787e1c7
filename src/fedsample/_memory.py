"""How much memory this machine gives a process, for the checks that refuse a setting whose arrays
cannot fit before anything is allocated or written (a sampler's sketched gradients, a model's stacked
parameters, a round's batches)."""

from __future__ import annotations

import contextlib
import os
import resource

from fedsample._validation import invalid

__all__ = ["check_fits_in_memory", "gib", "memory_limit"]


def memory_limit() -> int | None:
    """Physical memory in bytes, or the address-space limit of this process when lower (None: unknown)."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # sysconf names vary across systems
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    return min(limits) if limits else None


def gib(count: float) -> str:
    """``count`` bytes in GiB, three significant digits."""
    return f"{count / 2**30:.3g} GiB"


def check_fits_in_memory(
    name: str, owner: str, value: object, needed: float, what: str, *, noun: str = "parameter"
) -> None:
    """Refuse ``value`` of the parameter ``name`` (a config key with ``noun="key"``) when ``needed``
    bytes (``what`` says of what) exceed this machine's memory (:func:`memory_limit`); nothing is
    refused when the limit is unknown."""
    available = memory_limit()
    if available is not None and needed > available:
        fits = f"small enough for {what} to fit in memory"
        constraint = f"{fits}: {gib(needed)}, more than this machine's {gib(available)}"
        raise invalid(name, owner, constraint, value, noun=noun)
