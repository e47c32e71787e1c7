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

A one-phase sampler may ask for a first phase *once*, before its first selection
(``initial_phase() -> FirstPhase | None``, due while its state's ``round`` is 0): DivFL's
every-client gradients and ``high-loss``'s evaluation of every client's loss, as their authors' code
does. Its candidates are every available client; it then reads the round's feedback as usual.
:func:`phase_due` says which first phase, if any, the next round of a sampler at a state starts
with: the engine runs it, and so can a user's loop.

**Your own loop.** A two-phase sampler draws each round from its candidates' report::

    candidates = sampler.draw_candidates(state, available, candidates_rng)
    report = Feedback(round=t, selection=candidates, clients=replied, losses=...)  # or update_norms
    state = sampler.update(state, report)
    selection = sampler.sample(state, rng)
    # train the selection; no update after the round: the next round's report replaces this one

pow-d, cpow-d and ``optimal``'s protocol mode refuse a draw from a state that read no report
(:func:`check_reported`) and a second feedback for a round already reported
(:func:`check_report_round`), instead of narrowing their candidates to the last selection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample.errors import FedsampleError
from fedsample.rng import Stream, stream_rng
from fedsample.samplers._base import Sampler
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._selection import Selection

__all__ = [
    "CANDIDATES_KEY",
    "FirstPhase",
    "TwoPhaseSampler",
    "candidates_rng",
    "check_report_round",
    "check_reported",
    "draw_candidates",
    "first_phase_of",
    "initial_phase_of",
    "phase_due",
    "reported_round",
    "uniform_candidates",
]

# The extra key of the candidates' stream: (seed, SAMPLING, t, 1) is apart from the draw's (seed, SAMPLING, t).
CANDIDATES_KEY = 1


@dataclass(frozen=True)
class FirstPhase:
    """What each candidate of a two-phase round computes before the draw.

    ``report="updates"``: it trains as it would in the round and reports the norms of its update and
    of its first mini-batch gradient (and its first-batch loss); with ``vectors`` also the update
    itself (``d`` floats: DivFL). ``report="losses"``: it evaluates its local loss at the global
    model, no training, over all its data (pow-d, high-loss). ``report="batch-losses"``: the same
    over a mini-batch of ``loss_batch`` samples (cpow-d; ``None``: the round's training batch size).
    ``report="gradients"``: the gradient of its mean loss over all its data at the global model, no
    training, sent as ``d`` floats (DivFL's ``representative="gradient"``, ``Feedback.gradients``).
    """

    report: Literal["updates", "losses", "batch-losses", "gradients"] = "updates"
    loss_batch: int | None = None
    vectors: bool = False

    @property
    def uploads_vectors(self) -> bool:
        """Whether each candidate's report carries a model-sized vector (else a few scalars)."""
        return self.vectors or self.report == "gradients"


EVERY_UPDATE = FirstPhase()


@runtime_checkable
class TwoPhaseSampler(Protocol):
    """A two-phase sampler that says what its first phase computes and who its candidates are."""

    def first_phase(self) -> FirstPhase: ...

    def draw_candidates(self, state: Any, available: IntArray, rng: np.random.Generator) -> Selection: ...


def first_phase_of(sampler: Sampler[Any]) -> FirstPhase:
    """What ``sampler``'s candidates compute in the first phase (updates unless it says otherwise)."""
    return sampler.first_phase() if isinstance(sampler, TwoPhaseSampler) else EVERY_UPDATE


def initial_phase_of(sampler: Sampler[Any]) -> FirstPhase | None:
    """The first phase ``sampler`` asks for once, before its first selection (``initial_phase()``:
    DivFL's every-client vectors, ``high-loss``'s every-client losses); ``None`` for none."""
    initial = getattr(sampler, "initial_phase", None)
    phase = initial() if callable(initial) else None
    return phase if isinstance(phase, FirstPhase) else None


def phase_due(sampler: Sampler[Any], state: Any) -> FirstPhase | None:
    """The first phase that the next round of ``sampler`` at ``state`` starts with, ``None`` for none.

    Every round for a two-phase sampler (:attr:`Sampler.two_phase`); for a sampler with an initial
    phase (:func:`initial_phase_of`), while its state has read no feedback (``state.round == 0``).
    """
    if sampler.two_phase:
        return first_phase_of(sampler)
    phase = initial_phase_of(sampler)
    return phase if phase is not None and getattr(state, "round", 0) == 0 else None


def reported_round(state_round: int, feedback: Feedback) -> int:
    """A two-phase state's ``round`` after reading ``feedback``: one past the last round reported.

    The engine reports rounds 0, 1, 2...: this is then the count of reports, as before.
    """
    return max(int(state_round), int(feedback.round)) + 1


def check_reported(state_round: int, owner: str, sampler: str) -> None:
    """Refuse to draw from a two-phase state that has read no candidates' report (its ``round`` is 0)."""
    if state_round == 0:
        raise FedsampleError(
            f"The 'state' parameter of {owner} must hold the round's candidates' report ({sampler} is "
            "two-phase: draw_candidates, the candidates' report to update, then sample; "
            "docs/samplers.md, 'Two-phase samplers in your own loop'). Got a state that read no report instead.",
            parameter="state",
        )


def check_report_round(state_round: int, feedback: Feedback, owner: str, sampler: str) -> None:
    """Refuse a feedback of a round already reported: a two-phase sampler reads its candidates' report
    before each draw and nothing after the round (the round's own feedback would narrow its candidates
    to the clients it kept)."""
    if int(feedback.round) < int(state_round):
        raise FedsampleError(
            f"The 'feedback' parameter of {owner} must be the candidates' report of a round not reported yet "
            f"(round >= {int(state_round)}; {sampler} is two-phase and reads no feedback after the round). "
            f"Got a Feedback of round {int(feedback.round)} instead.",
            parameter="feedback",
        )


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
