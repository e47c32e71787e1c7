"""What availability and failures do to the aggregation weights, by Monte Carlo, under each policy.

For a sampler state and a :class:`~fedsample.participation.setting.Participation` setting, round ``t``
(``t = 0, ..., R - 1``) draws its selection, availability and failures exactly as the engine does
(:func:`~fedsample.participation.procedure.select_participants` and
:func:`~fedsample.participation.procedure.settle_participants`, updates assumed finite) and corrects the
weights by every policy from the *same* draws. The result gives, per policy, ``E[w'_i]`` with
standard errors, the bias ``E[w'_i] - p_i``, ``Var(w'_i)``, and the mean and variance of the weight
sum. A scheme stays unbiased under failures when every ``|E[w'_i] - p_i|`` is within a few
standard errors: ``"inverse-probability"`` with known (or well estimated) return rates does,
``"renormalise"`` does not when return rates differ between clients, and ``"ignore"`` shrinks
every weight by the return rate. The policies for unknown rates are settled with their state, which
learns across the rounds as in a run: ``"fedau"``'s interval estimates, and for ``"mifa"`` and
``"fedvarp"`` which clients have been seen; the weights reported for these two are the weights their
aggregate puts on each client's update when updates are fixed
(:func:`~fedsample.participation.policies.remembered_weights`), so their bias is the warm-up's
(``-p_i`` times the chance that client ``i`` was not yet seen) and decays with the rounds; start
collecting after ``warmup`` rounds to leave it out. Under the released MIFA (``mifa_variant="released"``)
the weight is 0 until the round after its memory is filled, then ``1/N`` for every client.

>>> import numpy as np
>>> from fedsample import Federation, MDSampler
>>> from fedsample.participation.availability import Dropout
>>> from fedsample.participation.setting import Participation
>>> sampler = MDSampler()
>>> state = sampler.init(Federation.from_sizes([10, 20, 30, 40]), num_sampled=2)
>>> setting = Participation(dropout=Dropout(np.array([0.1, 0.2, 0.5, 0.6])))
>>> stats = participation_statistics(sampler, state, setting, num_sampled=2, num_rounds=4000)
>>> bool(stats.policies["inverse-probability"].max_abs_z < 4), bool(stats.policies["renormalise"].max_abs_z > 4)
(True, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Interval, check_param, invalid
from fedsample.participation.mifa import MemoryWarmup
from fedsample.participation.policies import AGGREGATION_POLICIES, PolicyNames, remembered_weights
from fedsample.participation.procedure import FAILURE_COUNTS, select_participants, settle_participants, warmed_up
from fedsample.participation.setting import Participation
from fedsample.samplers._base import Sampler
from fedsample.stats.montecarlo import MAX_MONTE_CARLO_ROUNDS, MONTE_CARLO_ROUNDS, Estimate, check_sampler_and_state

__all__ = ["ParticipationStatistics", "PolicyStatistics", "format_participation", "participation_statistics"]


@dataclass(frozen=True, eq=False)
class PolicyStatistics:
    """Monte-Carlo moments of the corrected weights ``w'_i`` under one policy."""

    policy: str
    mean_weights: Estimate
    bias: Estimate
    var_weights: Estimate
    weight_sum: Estimate
    var_weight_sum: Estimate

    @property
    def max_abs_z(self) -> float:
        """``max_i |E[w'_i] - p_i| / se_i``: the largest bias in standard errors (0 when there is none)."""
        z = self.bias.deviation(0.0)
        return float(np.max(z)) if np.size(z) else 0.0

    @property
    def max_abs_bias(self) -> float:
        return float(np.max(np.abs(self.bias.value))) if np.size(self.bias.value) else 0.0


@dataclass(frozen=True, eq=False)
class ParticipationStatistics:
    """Per-policy statistics of ``num_rounds`` rounds, and the mean failures per round."""

    num_rounds: int
    importances: FloatArray
    policies: dict[str, PolicyStatistics]
    failures: dict[str, float]
    kept: Estimate


def _moments(
    rounds: list[int], clients: list[Any], weights: list[Any], num_rounds: int, n: int
) -> tuple[Estimate, Estimate, FloatArray]:
    """Mean and variance (with standard errors) of each dense ``w'_i``, and each round's weight sum."""
    round_of = np.repeat(np.asarray(rounds, dtype=np.int64), [c.size for c in clients])
    client_of = np.concatenate(clients) if clients else np.zeros(0, dtype=np.int64)
    weight_of = np.concatenate(weights) if weights else np.zeros(0)
    boundaries = np.searchsorted(round_of, np.arange(num_rounds + 1))
    chunk = max(1, (1 << 22) // max(n, 1))

    def dense() -> Iterator[FloatArray]:
        for start in range(0, num_rounds, chunk):
            stop = min(start + chunk, num_rounds)
            lo, hi = boundaries[start], boundaries[stop]
            flat = (round_of[lo:hi] - start) * n + client_of[lo:hi]
            dense_weights = np.bincount(flat, weights=weight_of[lo:hi], minlength=(stop - start) * n)
            yield dense_weights.reshape(-1, n).astype(np.float64, copy=False)

    total = np.zeros(n)
    sums = []
    for w in dense():
        total += w.sum(axis=0)
        sums.append(w.sum(axis=1))
    mean = total / num_rounds
    d2, d4 = np.zeros(n), np.zeros(n)
    for w in dense():  # centred moments in a second pass, for accuracy
        dd = (w - mean) ** 2
        d2 += dd.sum(axis=0)
        d4 += (dd * dd).sum(axis=0)
    var = d2 / (num_rounds - 1)
    var_se = np.sqrt(np.maximum(d4 / num_rounds - (d2 / num_rounds) ** 2, 0.0) / num_rounds)
    return Estimate(mean, np.sqrt(var / num_rounds)), Estimate(var, var_se), np.concatenate(sums)


def _scalar(values: FloatArray) -> tuple[Estimate, Estimate]:
    """Mean and variance of one value per round, each with its standard error."""
    r = values.size
    d = values - values.mean()
    var = float(np.mean(d * d)) * r / (r - 1)
    mu4 = float(np.mean(d**4))
    return (
        Estimate(float(values.mean()), float(np.sqrt(var / r))),
        Estimate(var, float(np.sqrt(max(mu4 - var * var, 0.0) / r))),
    )


def participation_statistics(
    sampler: Sampler[Any],
    state: Any,
    participation: Participation,
    *,
    num_sampled: int,
    num_rounds: int = 10_000,
    seed: int = 0,
    policies: Sequence[str] = AGGREGATION_POLICIES,
    warmup: int = 0,
) -> ParticipationStatistics:
    """Estimate the corrected weights' moments over ``num_rounds`` rounds under each of ``policies``.

    ``state`` is the sampler's state for the *asked* count (``participation.num_asked(num_sampled)``
    clients per round); ``num_sampled`` (``m``) is how many replies are kept under over-selection.
    The state is not updated between rounds (the statistics of one round drawn at that state);
    estimated return rates learn across the rounds, as in a run. ``seed`` keys every draw. The first
    ``warmup`` rounds run (the states learn) but are not counted. Rounds are independent under the
    policies without state; with state (estimated rates, ``"fedau"``, ``"mifa"``, ``"fedvarp"``) the
    standard errors assume they nearly are.
    """
    owner = "participation_statistics"
    check_sampler_and_state(sampler, state, owner)
    check_param("num_rounds", owner, num_rounds, MONTE_CARLO_ROUNDS)
    check_param("num_sampled", owner, num_sampled, Interval(int, 1, None, closed="left"))
    check_param("seed", owner, seed, Interval(int, 0, None, closed="left"))
    # Warm-up rounds are drawn like the counted ones: the same limit (2**63 of them ran without end).
    check_param("warmup", owner, warmup, Interval(int, 0, MAX_MONTE_CARLO_ROUNDS, closed="both"))
    if not isinstance(participation, Participation):
        raise invalid("participation", owner, "a Participation", participation)
    if isinstance(policies, str) or not isinstance(policies, Sequence) or len(policies) == 0:
        raise invalid("policies", owner, "a non-empty sequence of policies", policies)
    for key in policies:
        check_param("policy", owner, key, PolicyNames())
    importances = np.asarray(sampler.importances(state), dtype=np.float64)
    n = importances.size
    run = participation.for_run(seed)
    settings = {key: dataclasses.replace(run, policy=cast(Any, key)) for key in policies}
    for setting in settings.values():
        setting.check_known_rates(n, owner)
    estimators = {key: settings[key].new_estimator(n) for key in policies}
    seen = {key: np.zeros(n, dtype=bool) for key in policies if settings[key].aggregation.remembers_updates}
    collected: dict[str, tuple[list[int], list[Any], list[Any]]] = {p: ([], [], []) for p in policies}
    failures = dict.fromkeys(FAILURE_COUNTS, 0)
    kept_counts = np.zeros(num_rounds)
    for step in range(warmup + num_rounds):
        t = step - warmup  # the statistics' round; the draws are keyed by `step`
        selected = select_participants(sampler, state, run, seed=seed, round=step, num_clients=n)
        for key in policies:
            chosen, tracker, phase = selected, estimators[key], None
            if isinstance(tracker, MemoryWarmup):  # the released MIFA's warm-up decides who trains
                phase = tracker.observe(selected.clients, selected.trains)
                chosen = warmed_up(selected, phase, n)
            settled = settle_participants(
                chosen,
                np.ones(chosen.clients.size, dtype=bool),
                settings[key],
                seed=seed,
                round=step,
                num_kept=num_sampled,
                estimator=estimators[key],
                importances=importances,
            )
            rounds, clients, weights = collected[key]
            kept = np.flatnonzero(settled.kept)
            ids, values = chosen.clients[kept], settled.weights[kept]
            if key in seen:
                dense = remembered_weights(key, importances, seen[key], ids, values)
                if phase is not None:  # with fixed updates: their plain mean once the memory is filled
                    dense = np.full(n, 1.0 / n) if phase == "train" else np.zeros(n)
                ids = np.flatnonzero(dense)
                values = dense[ids]
            if t < 0:
                continue
            rounds.append(t)
            clients.append(ids)
            weights.append(values)
        if t < 0:
            continue
        for name, count in settled.counts.items():
            failures[name] += count
        kept_counts[t] = settled.kept.sum()
    out = {}
    for key in policies:
        mean, var, sums = _moments(*collected[key], num_rounds, n)
        sum_mean, sum_var = _scalar(sums)
        bias = Estimate(mean.value - importances, mean.stderr)
        out[key] = PolicyStatistics(key, mean, bias, var, sum_mean, sum_var)
    return ParticipationStatistics(
        num_rounds=num_rounds,
        importances=importances,
        policies=out,
        failures={name: count / num_rounds for name, count in failures.items()},
        kept=_scalar(kept_counts)[0],
    )


def format_participation(rows: Sequence[tuple[str, ParticipationStatistics]]) -> str:
    """A text table: one line per sampler and policy (bias in standard errors, weight-sum moments)."""
    header = ("sampler", "policy", "max|bias|", "max|z|", "E[sum w']", "Var[sum w']", "sum Var[w'_i]", "kept")
    lines = [header]
    for label, stats in rows:
        for policy, s in stats.policies.items():
            lines.append(
                (
                    label,
                    policy,
                    f"{s.max_abs_bias:.4g}",
                    f"{s.max_abs_z:.2f}",
                    f"{s.weight_sum.value:.4f} ± {s.weight_sum.stderr:.1g}",
                    f"{s.var_weight_sum.value:.4g}",
                    f"{float(np.sum(s.var_weights.value)):.4g}",
                    f"{stats.kept.value:.2f}",
                )
            )
    widths = [max(len(line[k]) for line in lines) for k in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines]
    return "\n".join(text)
