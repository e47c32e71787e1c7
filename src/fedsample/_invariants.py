"""Checks of a plain-data object's fields against its invariants, for objects read from files.

A registered plain-data class (:func:`fedsample.serialization.plain_data`) may declare a
``check_invariants(self)`` method; decoding calls it on every object it builds, so every path that
loads a state (``fedsample stats --sampler-state``, checkpoints) refuses a tampered or corrupted
one with a :class:`FieldError` naming the field, instead of computing nonsense from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsample.errors import FedsampleError

__all__ = [
    "DISTRIBUTION_TOLERANCE",
    "MAX_COUNT",
    "MAX_ROUND",
    "FieldError",
    "check_count",
    "check_distribution",
    "check_mask",
    "check_real",
    "check_round",
    "check_values",
]

# Distributions stored in a state sum to 1 up to float rounding of n terms (n * 2**-52 at most,
# about 2e-9 for 10^7 clients); anything further off is not a distribution.
DISTRIBUTION_TOLERANCE = 1e-6
# A round counter read from a file stays below this: every count derived from it (the next round, a
# doubled horizon) then fits int64, and a loop driven by it ends. A run's own checkpoint bounds its
# states' counters by the rounds it has done (fedsample.engine.checkpoint).
MAX_ROUND = 2**62
# A count a sampler keeps or takes as a hyperparameter (samples, FedSampling's size threshold and target)
# stays below this: it fits int64 with room for sums, and float() of it is exact to 2**-52 and never overflows.
MAX_COUNT = 2**62


class FieldError(FedsampleError):
    """A field of a plain-data object that breaks the object's invariants.

    ``owner`` is the class, ``field`` the dotted path to the field inside it, ``rule`` the
    constraint and ``got`` a short description of the value.
    """

    def __init__(self, owner: str, field: str, rule: str, got: str) -> None:
        subject = f"The {field!r} field of {owner}" if field else f"The value ({owner})"
        super().__init__(f"{subject} must be {rule}. Got {got} instead.", parameter=field or None)
        self.owner, self.field, self.rule, self.got = owner, field, rule, got

    def within(self, owner: str, field: str) -> FieldError:
        """The same error seen from ``owner``, whose ``field`` holds the object at fault."""
        return FieldError(owner, f"{field}.{self.field}" if self.field else field, self.rule, self.got)


def _short(value: Any) -> str:
    return f"{value!r:.60}"


def check_count(owner: str, field: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (``high=None``: no upper bound)."""
    rule = f"an int in [{low}, {'inf' if high is None else high}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FieldError(owner, field, rule, f"{_short(value)} of type {type(value).__name__}")
    if value < low or (high is not None and value > high):
        raise FieldError(owner, field, rule, _short(int(value)))
    return int(value)


def check_round(owner: str, field: str, value: Any, high: int = MAX_ROUND) -> int:
    """``value`` as a round counter: an int in ``[0, high]`` (``high`` at most :data:`MAX_ROUND`)."""
    return check_count(owner, field, value, 0, min(high, MAX_ROUND))


def check_real(owner: str, field: str, value: Any, low: float, high: float, *, nan: bool = False) -> float:
    """``value`` as a float in ``[low, high]`` (infinite bounds allowed; ``nan=True`` also takes NaN)."""
    rule = f"a float in [{low}, {high}]" + (" or NaN" if nan else "")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise FieldError(owner, field, rule, f"{_short(value)} of type {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond the largest float (10**400 in a saved file)
        raise FieldError(owner, field, rule, _short(value)) from None
    if (x != x and not nan) or (x == x and not low <= x <= high):
        raise FieldError(owner, field, rule, _short(x))
    return x


def check_values(
    owner: str,
    field: str,
    array: Any,
    *,
    shape: tuple[int | None, ...],
    low: float = -np.inf,
    high: float = np.inf,
    finite: bool = True,
    integer: bool = False,
) -> np.ndarray:
    """``array`` as a numeric array of ``shape`` (``None``: any length) with values in ``[low, high]``."""
    values = np.asarray(array)
    kind = "finite floats" if finite else "floats (not NaN)"
    if integer or values.dtype.kind in "iu":
        kind = "integers"
    dims = " x ".join("n" if d is None else str(d) for d in shape)
    rule = f"{kind} in [{low:g}, {high:g}] of shape ({dims})"
    if values.dtype.kind not in ("iu" if integer else "biuf"):
        raise FieldError(owner, field, rule, f"an array of dtype {values.dtype}")
    if values.ndim != len(shape) or any(d is not None and d != s for d, s in zip(shape, values.shape, strict=True)):
        raise FieldError(owner, field, rule, f"an array of shape {values.shape}")
    if values.size:
        as_float = values.astype(np.float64)
        bad = np.isnan(as_float) | (~np.isfinite(as_float) if finite else False) | (as_float < low) | (as_float > high)
        if bad.any():
            position = np.unravel_index(int(np.argmax(bad)), values.shape)
            raise FieldError(owner, field, rule, f"{values[position].item()!r} at {tuple(int(i) for i in position)}")
    return values


def check_distribution(owner: str, field: str, array: Any, *, size: int | None = None, axis_rows: bool = False) -> None:
    """``array`` holds non-negative finite floats summing to 1 (each row of a matrix with ``axis_rows``)."""
    shape: tuple[int | None, ...] = (None, size) if axis_rows else (size,)
    values = check_values(owner, field, array, shape=shape, low=0.0)
    sums = values.sum(axis=-1) if values.size else np.zeros(values.shape[:-1])
    if values.shape[-1] == 0 or np.any(np.abs(sums - 1.0) > DISTRIBUTION_TOLERANCE):
        worst = float(np.atleast_1d(sums)[int(np.argmax(np.abs(np.atleast_1d(sums) - 1.0)))]) if sums.size else 0.0
        raise FieldError(
            owner,
            field,
            f"non-negative finite floats summing to 1 (within {DISTRIBUTION_TOLERANCE:g})",
            f"{'a row' if axis_rows else 'values'} summing to {worst!r}",
        )


def check_mask(owner: str, field: str, array: Any, n: int) -> np.ndarray:
    """``array`` as a boolean mask over ``n`` clients (shape ``(n,)``)."""
    values = np.asarray(array)
    rule = f"a boolean mask of shape ({n},)"
    if values.dtype != np.bool_:
        raise FieldError(owner, field, rule, f"an array of dtype {values.dtype}")
    if values.shape != (n,):
        raise FieldError(owner, field, rule, f"an array of shape {values.shape}")
    return values
