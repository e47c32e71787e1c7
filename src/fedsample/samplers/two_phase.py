"""The first phase of a two-phase round, as a sampler declares it (:attr:`Sampler.two_phase`).

A two-phase sampler draws its round from something its *candidates* report before the draw:
``optimal`` and ``optimal-distribution`` from the norms of their updates (the candidates train),
Power-of-Choice's ``pow-d`` and ``cpow-d`` from their current local loss at the global model (a
forward pass, no training). Two methods say what the first phase is, and the engine and the Flower
strategy read them through :func:`first_phase_of` and :func:`draw_candidates`:

* ``first_phase() -> FirstPhase``: what each candidate computes;
* ``draw_candidates(state, available, rng) -> Selection``: the round's candidates among the
  ``available`` clients and their first-stage weights (a sampler whose candidates are drawn
  hands its second stage the Horvitz-Thompson weights of that draw, so the two stages together stay
  unbiased; see ``optimal``'s ``candidates``).

A two-phase sampler without them asks every available client for updates, with weights ``p_i``.
The candidates' stream is ``stream_rng(seed, Stream.SAMPLING, t, CANDIDATES_KEY)`` (:func:`candidates_rng`),
apart from the draw's ``(seed, SAMPLING, t)``, so a resumed run draws the same candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample.rng import Stream, stream_rng
from fedsample.samplers._base import Sampler, Selection

__all__ = [
    "CANDIDATES_KEY",
    "FirstPhase",
    "TwoPhaseSampler",
    "candidates_rng",
    "draw_candidates",
    "first_phase_of",
    "uniform_candidates",
]

# The extra key of the candidates' stream: (seed, SAMPLING, t, 1) is apart from the draw's (seed, SAMPLING, t).
CANDIDATES_KEY = 1


@dataclass(frozen=True)
class FirstPhase:
    """What each candidate of a two-phase round computes before the draw.

    ``report="updates"``: it trains as it would in the round and reports the norms of its update and
    of its first mini-batch gradient (and its first-batch loss). ``report="losses"``: it evaluates
    its local loss at the global model, no training, over all its data (pow-d).
    ``report="batch-losses"``: the same over a mini-batch of ``loss_batch`` samples (cpow-d;
    ``None``: the round's training batch size).
    """

    report: Literal["updates", "losses", "batch-losses"] = "updates"
    loss_batch: int | None = None


EVERY_UPDATE = FirstPhase()


@runtime_checkable
class TwoPhaseSampler(Protocol):
    """A two-phase sampler that says what its first phase computes and who its candidates are."""

    def first_phase(self) -> FirstPhase: ...

    def draw_candidates(self, state: Any, available: IntArray, rng: np.random.Generator) -> Selection: ...


def first_phase_of(sampler: Sampler[Any]) -> FirstPhase:
    """What ``sampler``'s candidates compute in the first phase (updates unless it says otherwise)."""
    return sampler.first_phase() if isinstance(sampler, TwoPhaseSampler) else EVERY_UPDATE


def draw_candidates(
    sampler: Sampler[Any], state: Any, available: IntArray, rng: np.random.Generator, importances: FloatArray
) -> Selection:
    """The round's candidates of ``sampler`` among the ``available`` client ids (by default all, weights ``p_i``)."""
    if isinstance(sampler, TwoPhaseSampler):
        return sampler.draw_candidates(state, available, rng)
    ids = np.asarray(available, dtype=np.int64)
    return Selection(clients=ids, weights=np.asarray(importances, dtype=np.float64)[ids])


def candidates_rng(seed: int, round: int) -> np.random.Generator:
    """The stream of round ``round``'s candidate draw under ``seed``."""
    return stream_rng(seed, Stream.SAMPLING, round, CANDIDATES_KEY)


def uniform_candidates(
    importances: FloatArray, available: IntArray, count: int | None, rng: np.random.Generator
) -> Selection:
    """``K = count`` of the ``N_a`` available clients uniformly without replacement, weights ``p_i N_a / K``.

    Each available client is a candidate with probability ``K / N_a``, so ``p_i N_a / K`` is its
    Horvitz-Thompson weight: ``E[w_i 1{i in C} | A] = p_i``. ``count=None`` (or ``K >= N_a``): every
    available client, weights ``p_i``, no randomness drawn.
    """
    ids = np.asarray(available, dtype=np.int64)
    p = np.asarray(importances, dtype=np.float64)
    if count is None or count >= ids.size:
        return Selection(clients=ids, weights=p[ids])
    chosen = np.sort(rng.choice(ids, size=count, replace=False))
    return Selection(clients=chosen, weights=p[chosen] * (ids.size / count))
