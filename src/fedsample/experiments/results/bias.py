"""Each compared sampler's bias, measured by Monte Carlo on a fixed feedback sequence, for a run's report.

A learning sampler's weights have no closed form at a learned state, so the bias
``max_i |E[w_i] - p_i|`` is estimated as docs/selection-systems.md describes ("Measuring the
bias"): the sampler is initialised on the run's federation, learns from a fixed feedback sequence,
then :func:`fedsample.stats.monte_carlo_statistics` draws :data:`MONTE_CARLO_ROUNDS` selections
at the resulting state and :func:`fedsample.stats.monte_carlo_bias` compares the mean weights with
the importances ``p_i``.

The sequence is the same for every sampler and every run of a config: :data:`FEEDBACK_ROUNDS`
rounds in which the sampler draws its own selection (seeded by the round) and every selected
client reports fixed values that depend on its id alone: a training loss rising with the id
(``1 + i / n``, its mean square ``(1 + i / n)^2``), a round time cycling over 1 to 5 seconds, and
an update vector (seeded, of dimension :data:`DIMENSION`, or the ``min_update_dimension`` a sampler
declares when it reads more: HiCS-FL's output layer) with its norm. Every client is available.
A two-phase sampler (``Sampler.two_phase``: Power-of-Choice's pow-d and cpow-d, optimal sampling)
reads its round's candidates' report before it draws, so one draw of it is the whole round: its
candidates among every client (:func:`fedsample.samplers.two_phase.draw_candidates`), their report
from the same fixed values, then its draw; the Monte Carlo draws repeat that whole round
(``_WholeRound``), so the candidates vary as they do in a run, and the feedback sequence feeds
it the same way (no second update after the draw). It is cheap (well under a second per sampler
for hundreds of clients) and is not the run's own
feedback: it measures how far each rule's weights drift from ``p_i`` once it has learned something,
not the bias of the trained runs.

Under unbiasedness each client's ``|mean - p_i| / stderr`` is about standard normal, so
``max_z > 5`` shows a bias (a false alarm below ``6e-3`` for up to ``10^4`` clients by the union
bound); a smaller ``max_z`` says that no bias was detected at this many rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.designs import Design
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers import Feedback, Sampler, Selection
from fedsample.samplers.two_phase import draw_candidates
from fedsample.stats import monte_carlo_bias, monte_carlo_statistics

__all__ = [
    "BIAS_FILE",
    "DIMENSION",
    "FEEDBACK_ROUNDS",
    "MONTE_CARLO_ROUNDS",
    "Z_THRESHOLD",
    "bias_markdown",
    "measure_bias",
]

BIAS_FILE = "bias.json"
FEEDBACK_ROUNDS = 20
MONTE_CARLO_ROUNDS = 2000
DIMENSION = 16
Z_THRESHOLD = 5.0
_SEED = 20260415  # the fixed sequence's and the Monte Carlo draws' seed


def measure_bias(
    samplers: list[tuple[str, Sampler[Any]]],
    federation: Federation,
    num_sampled: int,
    *,
    feedback_rounds: int = FEEDBACK_ROUNDS,
    monte_carlo_rounds: int = MONTE_CARLO_ROUNDS,
) -> dict[str, Any]:
    """The bias of each ``(label, sampler)``, as plain data for ``bias.json``.

    Each row holds the label, the sampler's name, whether it declares itself ``biased``, and the
    estimate: ``max_bias`` (``max_i |E[w_i] - p_i|``), its standard error ``stderr``, the ``client``
    where it occurs, ``max_z`` (the largest deviation in standard errors) and ``detected``
    (``max_z > 5``).
    """
    rows = []
    for label, sampler in samplers:
        dimension = max(DIMENSION, int(getattr(sampler, "min_update_dimension", 0) or 0))
        values = _FixedValues.of(len(federation.importances), dimension)
        state = _learned_state(sampler, federation, num_sampled, feedback_rounds, values)
        rng = np.random.default_rng(_SEED)
        drawn = _WholeRound(inner=sampler, values=values, round=feedback_rounds) if sampler.two_phase else sampler
        mc = monte_carlo_statistics(drawn, state, rng, num_rounds=monte_carlo_rounds)
        estimate = monte_carlo_bias(mc, sampler.importances(state))
        rows.append(
            {
                "label": label,
                "sampler": sampler.name,
                "declared_biased": bool(sampler.biased),
                "max_bias": estimate.max_bias,
                "stderr": estimate.stderr,
                "client": estimate.client,
                "max_z": estimate.max_z if math.isfinite(estimate.max_z) else None,
                "detected": bool(estimate.max_z > Z_THRESHOLD),
            }
        )
    return {
        "feedback_rounds": feedback_rounds,
        "monte_carlo_rounds": monte_carlo_rounds,
        "num_clients": len(federation.importances),
        "num_sampled": num_sampled,
        "samplers": rows,
    }


@dataclass(frozen=True, eq=False)
class _FixedValues:
    """What every client reports in the fixed sequence: values that depend on its id alone."""

    losses: FloatArray
    times: FloatArray
    vectors: FloatArray
    norms: FloatArray

    @classmethod
    def of(cls, n: int, dimension: int = DIMENSION) -> _FixedValues:
        ids = np.arange(n, dtype=np.float64)
        vectors = np.random.default_rng(_SEED).normal(size=(n, dimension))
        return cls(losses=1.0 + ids / n, times=1.0 + ids % 5, vectors=vectors, norms=np.linalg.norm(vectors, axis=1))

    def feedback(self, t: int, selection: Selection, sampler: Sampler[Any]) -> Feedback:
        """Round ``t``'s feedback from the clients of ``selection`` (every client available)."""
        clients = np.unique(selection.clients)
        return Feedback(
            round=t,
            selection=selection,
            clients=clients,
            update_norms=self.norms[clients],
            updates=self.vectors[clients] if "updates" in sampler.reads else None,
            gradients=self.vectors[clients] if "gradients" in sampler.reads else None,
            losses=self.losses[clients],
            gradient_norms=self.norms[clients],
            local_lr=1.0,
            local_steps=1,
            loss_squares=self.losses[clients] ** 2,
            round_times=self.times[clients],
            available=np.arange(self.losses.size, dtype=np.int64),
        )


@dataclass(frozen=True, kw_only=True)
class _WholeRound(Sampler[Any]):
    """A two-phase sampler's whole round as one draw: its candidates among every client, their report
    (the fixed values), then its draw; what :func:`monte_carlo_statistics` repeats to measure its bias."""

    name: ClassVar[str] = "whole-round"
    inner: Sampler[Any]
    values: _FixedValues
    round: int

    def init(self, federation: Federation, num_sampled: int) -> Any:
        return self.inner.init(federation, num_sampled)

    def design(self, state: Any) -> Design:
        raise FedsampleError(
            f"{self.inner.name}'s whole round has no fixed design: its candidates are drawn anew each round.",
            parameter="sampler",
        )

    def sample(self, state: Any, rng: np.random.Generator) -> Selection:
        return _two_phase_draw(self.inner, state, rng, self.round, self.values)[1]

    def importances(self, state: Any) -> FloatArray:
        return self.inner.importances(state)


def _two_phase_draw(
    sampler: Sampler[Any], state: Any, rng: np.random.Generator, t: int, values: _FixedValues
) -> tuple[Any, Selection]:
    """Round ``t`` of a two-phase sampler: the state that read its candidates' report, and its draw."""
    p = sampler.importances(state)
    candidates = draw_candidates(sampler, state, np.arange(p.size, dtype=np.int64), rng, p)
    state = sampler.update(state, values.feedback(t, candidates, sampler))
    return state, sampler.sample(state, rng)


def _learned_state(
    sampler: Sampler[Any], federation: Federation, num_sampled: int, rounds: int, values: _FixedValues
) -> Any:
    """The sampler's state after the fixed feedback sequence (see the module documentation)."""
    state = sampler.init(federation, num_sampled)
    for t in range(rounds):
        rng = np.random.default_rng([_SEED, t])
        if sampler.two_phase:  # the report comes before the draw, and nothing after it
            state = _two_phase_draw(sampler, state, rng, t, values)[0]
            continue
        selection = sampler.sample(state, rng)
        state = sampler.update(state, values.feedback(t, selection, sampler))
    return state


def bias_markdown(payload: Any) -> list[str]:
    """The report's "Bias" section (Markdown lines) from :func:`measure_bias`'s data, as ``bias.json`` holds it."""
    rows = payload.get("samplers") if isinstance(payload, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return ["## Bias", "", f"`{BIAS_FILE}` does not hold a measured bias.", ""]
    lines = [
        "## Bias",
        "",
        "| label | sampler | declared biased | max_i abs(E[w_i] - p_i) | ± SE | at client | max z | bias detected |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for row in payload["samplers"]:
        z = row.get("max_z")
        cells = [
            str(row.get("label", "")).replace("|", "\\|"),
            str(row.get("sampler", "")),
            "yes" if row.get("declared_biased") else "no",
            _number(row.get("max_bias")),
            _number(row.get("stderr")),
            str(row.get("client", "")),
            "∞" if z is None else ("> 1000" if _number(z) and z > 1000 else _number(z)),
            "yes" if row.get("detected") else "no",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Measured by Monte Carlo ({payload.get('monte_carlo_rounds')} draws, fixed seed) at the state each "
        f"sampler reaches after {payload.get('feedback_rounds')} rounds of a fixed feedback sequence on this "
        f"run's federation ({payload.get('num_clients')} clients, m = {payload.get('num_sampled')}), the same "
        'for every sampler (fedsample.experiments.results.bias; docs/selection-systems.md, "Measuring the bias"); '
        "not the trained runs' own feedback. SE: the standard error of the estimated E[w_i] at that client "
        f"(a 95% interval is ± 1.96 SE). max z: the largest |E[w_i] - p_i| / SE over the clients; "
        f"bias detected: max z > {Z_THRESHOLD:g} (for up to 10^4 clients a false alarm below 6e-3), "
        "∞ or > 1000: a client whose estimate has (almost) no spread, such as one never or always drawn.",
        "",
    ]
    return lines


def _number(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.3g}"
    return ""
