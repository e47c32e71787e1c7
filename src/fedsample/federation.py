"""Federations as the samplers see them: client sizes and importances.

A :class:`Federation` holds the ``n`` client sizes ``n_i`` and the importances ``p_i`` of the
objective ``sum_i p_i L_i``. Importances default to ``n_i / M`` (every data point counts the same)
and can be ``1 / n`` (every client counts the same) or any positive vector summing to one.

When the importances are proportional to integers (sizes, or all ones) the federation keeps those
integer *masses*, so that Algorithm 1 of paper 000 can run in exact integer arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._validation import Options, invalid
from fedsample.errors import FedsampleError
from fedsample.rng import Stream, stream_rng

__all__ = [
    "BUILTIN_FEDERATIONS",
    "Federation",
    "ImportanceMode",
    "as_sizes",
    "builtin_sizes",
    "draw_osmd_skewed_sizes",
]

ImportanceMode = Literal["size", "uniform"]


def as_sizes(sizes: npt.ArrayLike, *, name: str = "sizes", owner: str = "Federation") -> IntArray:
    """Validate client sizes: a non-empty 1-D sequence of positive whole numbers, as int64."""
    constraint = "a non-empty 1-D sequence of positive integers"
    if isinstance(sizes, (str, bytes)):
        raise invalid(name, owner, constraint, sizes)
    try:
        raw = np.asarray(sizes)
    except (TypeError, ValueError) as exc:
        raise invalid(name, owner, constraint, sizes) from exc
    if raw.ndim != 1 or raw.size == 0:
        raise invalid(name, owner, constraint, sizes)
    if raw.dtype == np.bool_ or raw.dtype.kind not in "iuf":
        raise invalid(name, owner, constraint, sizes)
    if isinstance(sizes, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in sizes):
        # np.asarray([3, True]) is an int array: a bool mixed with numbers must not pass as 1.
        raise invalid(name, owner, constraint, sizes)
    if raw.dtype.kind == "f":
        bad = ~np.isfinite(raw) | (raw != np.round(raw))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FedsampleError(
                f"The {name!r} parameter of {owner} must be {constraint}. Got {raw[i].item()!r} at index {i} instead.",
                parameter=name,
            )
        if np.abs(raw).max() >= 2.0**62:
            raise invalid(name, owner, "integers below 2**62", sizes)
    values = raw.astype(np.int64)
    bad = values <= 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FedsampleError(
            f"The {name!r} parameter of {owner} must be {constraint}. Got {values[i].item()!r} at index {i} instead.",
            parameter=name,
        )
    if float(values.sum(dtype=np.float64)) >= 2.0**62:
        # The total M must fit in int64 (it would wrap around to a negative number).
        raise invalid(name, owner, "integers summing below 2**62", sizes)
    return readonly(values)


@dataclass(frozen=True, eq=False)
class Federation:
    """Client sizes and importances.

    Build one with :meth:`from_sizes` or :meth:`from_importances` rather than directly.

    Attributes
    ----------
    sizes:
        ``n_i``, the number of samples of each client (int64, positive).
    importances:
        ``p_i``, positive and summing to one.
    importance_masses:
        Integers ``q_i`` with ``p_i = q_i / sum(q)`` exactly, when the importances are of that
        form (``"size"`` and ``"uniform"`` modes); ``None`` for arbitrary float importances.
    """

    sizes: IntArray
    importances: FloatArray
    importance_masses: IntArray | None

    @classmethod
    def from_sizes(cls, sizes: npt.ArrayLike, *, importance: ImportanceMode = "size") -> Federation:
        """A federation whose importances are ``n_i / M`` (``"size"``) or ``1 / n`` (``"uniform"``).

        >>> Federation.from_sizes([100, 300]).importances.tolist()
        [0.25, 0.75]
        """
        sizes_ = as_sizes(sizes)
        if importance == "size":
            masses = sizes_
        elif importance == "uniform":
            masses = readonly(np.ones_like(sizes_))
        else:
            raise invalid("importance", "Federation.from_sizes", Options(("size", "uniform")), importance)
        total = int(masses.sum(dtype=np.int64))
        return cls(sizes=sizes_, importances=readonly(masses / total), importance_masses=masses)

    @classmethod
    def from_importances(cls, importances: npt.ArrayLike, *, sizes: npt.ArrayLike | None = None) -> Federation:
        """A federation with explicit importances (positive, summing to one within 1e-9).

        ``sizes`` defaults to one sample per client; they matter only to samplers that use them.
        """
        owner = "Federation.from_importances"
        constraint = "a non-empty 1-D sequence of positive finite floats summing to 1"
        try:
            raw = np.asarray(importances)
        except (TypeError, ValueError) as exc:
            raise invalid("importances", owner, constraint, importances) from exc
        # Real numbers only (complex ones lost their imaginary part, Python ints of 10**400 overflowed), each
        # at most 1 (a sum of 1e308s overflowed): refused before any arithmetic.
        p = raw.astype(np.float64) if raw.dtype.kind in "iuf" else np.full(1, np.nan)
        if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p <= 0) or np.any(p > 1):
            raise invalid("importances", owner, constraint, importances)
        if not math.isclose(float(p.sum()), 1.0, rel_tol=0.0, abs_tol=1e-9):
            raise FedsampleError(
                f"The 'importances' parameter of {owner} must be {constraint}. "
                f"Got values summing to {float(p.sum())!r} instead.",
                parameter="importances",
            )
        if sizes is None:
            sizes_ = readonly(np.ones(p.size, dtype=np.int64))
        else:
            sizes_ = as_sizes(sizes, owner=owner)
            if sizes_.size != p.size:
                raise invalid("sizes", owner, f"of length {p.size} like 'importances'", sizes_.size)
        return cls(sizes=sizes_, importances=readonly(p / p.sum()), importance_masses=None)

    @property
    def num_clients(self) -> int:
        return int(self.sizes.size)

    @property
    def total_size(self) -> int:
        """``M``, the total number of samples."""
        return int(self.sizes.sum(dtype=np.int64))


# --- built-in size distributions -------------------------------------------------------------


def _unbalanced(rng: np.random.Generator) -> IntArray:
    # Paper 000, CIFAR-10 experiment: 10/30/30/20/10 clients holding 100/250/500/750/1000 samples.
    return np.repeat(np.array([100, 250, 500, 750, 1000]), [10, 30, 30, 20, 10]).astype(np.int64)


def _balanced(rng: np.random.Generator) -> IntArray:
    # Paper 000, MNIST experiment: 100 clients of 500 samples.
    return np.full(100, 500, dtype=np.int64)


def draw_osmd_skewed_sizes(num_clients: int, rng: np.random.Generator) -> IntArray:
    """Client sizes 1/10/30/100 drawn i.i.d. with probabilities 0.65/0.2/0.1/0.05 (paper 001, real data)."""
    return rng.choice(np.array([1, 10, 30, 100], dtype=np.int64), size=num_clients, p=[0.65, 0.2, 0.1, 0.05])


def _osmd_skewed(rng: np.random.Generator) -> IntArray:
    # Paper 001, real-data experiments: 500 clients.
    return draw_osmd_skewed_sizes(500, rng)


BUILTIN_FEDERATIONS: dict[str, tuple[str, Callable[[np.random.Generator], IntArray]]] = {
    "unbalanced": ("100 clients: 10/30/30/20/10 of 100/250/500/750/1000 samples (paper 000)", _unbalanced),
    "balanced": ("100 clients of 500 samples each (paper 000, MNIST)", _balanced),
    "osmd-skewed": (
        "500 clients of 1/10/30/100 samples w.p. 0.65/0.2/0.1/0.05, drawn from the seed (paper 001)",
        _osmd_skewed,
    ),
}


def builtin_sizes(name: str, *, seed: int = 0) -> IntArray:
    """The client sizes of a named built-in federation (random ones are drawn from ``seed``)."""
    if name not in BUILTIN_FEDERATIONS:
        raise invalid("federation", "builtin_sizes", "one of " + _names(BUILTIN_FEDERATIONS), name)
    rng = stream_rng(seed, Stream.FEDERATION)
    return readonly(BUILTIN_FEDERATIONS[name][1](rng))


def _names(table: Iterable[str]) -> str:
    return "{" + ", ".join(repr(k) for k in table) + "}"
