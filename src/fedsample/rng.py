"""Keyed random streams: every random quantity comes from ``(seed, stream, *keys)``.

Following numpy's advice for parallel and reproducible streams, a generator is never shared
across purposes: the sampler's draw of round ``t`` uses ``stream_rng(seed, Stream.SAMPLING, t)``,
so it does not depend on how many numbers another part of the program consumed before it, and a
resumed run reproduces an uninterrupted one.

>>> a = stream_rng(7, Stream.SAMPLING, 3).random()
>>> b = stream_rng(7, Stream.SAMPLING, 3).random()
>>> a == b
True
"""

from __future__ import annotations

import enum

import numpy as np

from fedsample._validation import Interval, check_param, invalid

__all__ = ["Stream", "check_generator", "stream_rng"]


class Stream(enum.IntEnum):
    """What a random stream is for; the value is part of the seed."""

    SAMPLING = 1
    FEDERATION = 2
    PARTITION = 3
    MODEL_INIT = 4
    TRAINING = 5
    MONTE_CARLO = 6
    AVAILABILITY = 7
    PRIVACY = 8
    SYSTEM = 9
    DROPOUT = 10


def check_generator(rng: object, owner: str) -> np.random.Generator:
    """``rng`` itself when it is a :class:`numpy.random.Generator`; the library's error otherwise.

    The one check of every public entry that takes ``rng`` (a sampler's ``sample``, Monte Carlo, the
    partitioners...): a ``RandomState``, an int, ``None`` or a ``torch.Generator`` is refused, never
    converted, so that no draw comes from a generator the caller did not hand over.
    """
    if not isinstance(rng, np.random.Generator):
        raise invalid("rng", owner, "a numpy.random.Generator (e.g. numpy.random.default_rng(0))", rng)
    return rng


def stream_rng(seed: int, stream: Stream, *keys: int) -> np.random.Generator:
    """A generator for ``stream`` under ``seed``, further keyed by non-negative ints (a round index...)."""
    check_param("seed", "stream_rng", seed, Interval(int, 0, None, closed="left"))
    return np.random.default_rng([int(seed), int(stream), *(int(k) for k in keys)])
