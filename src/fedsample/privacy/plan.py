"""A simulation's DP-FedAvg plan: each run's exposure, noise, spent epsilon per round and budget.

:func:`plan_privacy` is called once before training (every quantity is a function of the public
design, not of the data): it refuses a sampler the accountant cannot bound, sets each run's noise
scale ``s``, computes the epsilon the most exposed client has spent after each round, and the rounds
a ``max_epsilon`` budget allows. :meth:`PrivacyPlan.direction` is the server's round
(:mod:`fedsample.privacy.mechanism`): clip, sum with the design's weights, noise once, and (adaptive
clipping) the next clip norm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsample._arrays import FloatArray
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.privacy.accountant import PrivacyCost, noise_for_budget, privacy_cost
from fedsample.privacy.exposure import Exposure
from fedsample.privacy.mechanism import DPFedAvg, update_multiplier
from fedsample.privacy.refusals import exposure_of
from fedsample.privacy.spent import spent_per_round
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import Sampler

__all__ = ["PrivacyPlan", "clip_factors", "plan_privacy"]

# The key of the server's noise within the PRIVACY stream of (seed, round); FedSampling's answers use others.
NOISE_KEY = 36


@dataclass(frozen=True, eq=False)
class PrivacyPlan:
    """The settings and, per run, the noise scale ``s``, the spent epsilon after each round (the client most
    exposed at the end) and the final :class:`~fedsample.privacy.PrivacyCost`, its ``z`` (``noise_multipliers``),
    the update's ``z_u`` and the adaptive count's ``z_b``; ``rounds`` may be fewer
    than asked when the budget stops the runs (``stop`` then says why, in one line)."""

    settings: DPFedAvg
    scales: FloatArray
    spent: tuple[FloatArray, ...]
    costs: tuple[PrivacyCost, ...]
    rounds: int
    noise_multipliers: FloatArray
    update_noise: FloatArray
    count_noise: FloatArray | None
    stop: str | None = None

    def initial_clip_norms(self) -> FloatArray:
        return np.full(self.scales.size, float(self.settings.clip_norm))

    def start(self, record: Any) -> None:
        """Write what is known before training into the per-round record (``record[name]`` is ``(runs,
        rounds)``): the epsilon spent after each round, and the first round's clip norm."""
        record["epsilon_spent"][...] = np.stack(self.spent)
        record["clip_norm"][:, 0] = self.initial_clip_norms()

    def round(
        self,
        record: Any,
        t: int,
        updates: dict[str, torch.Tensor] | None,
        run_of_slot: np.ndarray,
        weights: torch.Tensor,
        *,
        seeds: Sequence[int],
        like: dict[str, torch.Tensor],
    ) -> dict[str, torch.Tensor]:
        """Round ``t``'s noised directions (:meth:`direction`), its clip norms read from ``record["clip_norm"][:, t]``
        and the next round's written to ``record["clip_norm"][:, t + 1]``."""
        norms = np.asarray(record["clip_norm"][:, t], dtype=np.float64)
        out, following = self.direction(updates, run_of_slot, weights, norms, seeds=seeds, round=t, like=like)
        if t + 1 < record["clip_norm"].shape[1]:
            record["clip_norm"][:, t + 1] = following
        return out

    def direction(
        self,
        updates: dict[str, torch.Tensor] | None,
        run_of_slot: np.ndarray,
        weights: torch.Tensor,
        clip_norms: FloatArray,
        *,
        seeds: Sequence[int],
        round: int,
        like: dict[str, torch.Tensor],
    ) -> tuple[dict[str, torch.Tensor], FloatArray]:
        """Each run's noised direction ``(runs, ...)`` and its next clip norms.

        ``updates[name]`` is ``(slots, ...)`` for the slots of every run (``None`` when no slot was kept),
        ``weights`` the slots' weights, ``clip_norms`` each run's ``C_t``; ``like`` the stacked global
        parameters (the directions' shapes, dtype and device). The noise of run ``r`` in round ``t`` is
        drawn from the stream ``(seeds[r], PRIVACY, t, 36)``, so a resumed run adds the same noise.
        """
        num_runs = self.scales.size
        device = next(iter(like.values())).device
        runs = torch.as_tensor(np.asarray(run_of_slot, dtype=np.int64), device=device)
        w = weights.to(device=device, dtype=torch.float64)
        bound = torch.as_tensor(clip_norms, dtype=torch.float64, device=device)
        sums = {n: torch.zeros(v.shape, dtype=torch.float64, device=device) for n, v in like.items()}
        below = torch.zeros(num_runs, dtype=torch.float64, device=device)
        if updates is not None and runs.numel():
            wide = {n: u.to(torch.float64) for n, u in updates.items()}
            factors = clip_factors(wide, bound[runs], per_layer=self.settings.per_layer)
            for name, u in wide.items():
                scaled = u * (w * factors[name]).view(-1, *[1] * (u.dim() - 1))
                sums[name].index_add_(0, runs, scaled)
            if self.settings.adaptive:  # b_i = 1 where the update was within the bound
                within = (next(iter(factors.values())) >= 1.0).to(torch.float64)
                below.index_add_(0, runs, w * (within - 0.5))
        out: dict[str, torch.Tensor] = {}
        generators = [_generator(int(seed), round) for seed in seeds]
        for name, total in sums.items():
            noise = torch.stack(
                [torch.randn(total.shape[1:], generator=g, dtype=torch.float64) for g in generators]
            ).to(device)
            std = torch.as_tensor(self.update_noise * clip_norms * self.scales, device=device)
            out[name] = (total + noise * std.view(-1, *[1] * (total.dim() - 1))).to(like[name].dtype)
        if self.count_noise is None:
            return out, clip_norms
        counts = np.array([float(torch.randn((), generator=g, dtype=torch.float64)) for g in generators])
        fraction = 0.5 + below.cpu().numpy() + self.count_noise * self.scales * counts
        gamma, eta = float(self.settings.target_quantile or 0.0), self.settings.clip_learning_rate
        return out, clip_norms * np.exp(-eta * (fraction - gamma))


def _generator(seed: int, t: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(int(stream_rng(seed, Stream.PRIVACY, t, NOISE_KEY).integers(0, 2**63 - 1)))
    return generator


def _allowed(exposure: Exposure, curve: FloatArray, cost: PrivacyCost, settings: DPFedAvg) -> int:
    """The rounds within ``settings.max_epsilon`` (all of them without one): the rounds where the client most
    exposed at the end stays within it, then fewer while any client spends more."""
    budget = settings.max_epsilon
    if budget is None or cost.epsilon_max <= budget:
        return int(curve.size)
    allowed = int(np.searchsorted(curve, budget, side="right"))
    while allowed > 0:
        check = privacy_cost(
            exposure, noise_multiplier=cost.noise_multiplier, rounds=allowed, delta=settings.delta,
            accountant=settings.accountant,
        )  # fmt: skip
        if check.epsilon_max <= budget:
            break
        allowed -= 1
    return allowed


def plan_privacy(
    settings: DPFedAvg,
    federation: Federation,
    samplers: Sequence[Sampler[Any]],
    num_sampled: int,
    rounds: int,
    labels: Sequence[str],
) -> PrivacyPlan:
    """The plan of the runs of ``samplers`` (labelled ``labels``) for ``rounds`` rounds of ``num_sampled``
    clients; a sampler the accountant refuses raises the library's error with its reason."""
    if not isinstance(settings, DPFedAvg):
        raise FedsampleError(
            f"The 'privacy' parameter must be a DPFedAvg or None. Got {type(settings).__name__} instead.",
            parameter="privacy",
        )
    exposed: dict[str, Exposure] = {}  # runs of one sampler over several seeds: one exposure, one accounting
    for sampler in samplers:
        if repr(sampler) not in exposed:
            exposed[repr(sampler)] = exposure_of(sampler, sampler.init(federation, num_sampled))
    exposures = [exposed[repr(sampler)] for sampler in samplers]
    found: dict[str, tuple[float, FloatArray, PrivacyCost]] = {}
    allowed, stop = rounds, None
    for sampler, exposure, label in zip(samplers, exposures, labels, strict=True):
        if repr(sampler) not in found:
            z = _multiplier(settings, exposure, rounds)
            found[repr(sampler)] = (z, *spent_per_round(exposure, noise_multiplier=z, rounds=rounds,
                                    delta=settings.delta, accountant=settings.accountant))  # fmt: skip
        z, curve, cost = found[repr(sampler)]
        budget = _allowed(exposure, curve, cost, settings)
        if budget < allowed:
            allowed = budget
            stop = (
                f"privacy budget: stopped after round {budget} of {rounds}: round {budget + 1} would spend more "
                f"than max_epsilon = {settings.max_epsilon:g} (delta {settings.delta:g}) for run {label!r}"
            )
    if allowed == 0:
        raise FedsampleError(
            f"The 'max_epsilon' parameter of DPFedAvg must allow one round. Got {settings.max_epsilon!r} instead: "
            f"{stop}.",
            parameter="max_epsilon",
            value=settings.max_epsilon,
        )
    spent = [found[repr(sampler)] for sampler in samplers]
    if allowed < rounds:  # the budget stops the runs: their curves cut, their costs after the last round
        for key, (z, curve, _) in found.items():
            cost = privacy_cost(exposed[key], noise_multiplier=z, rounds=allowed, delta=settings.delta,
                                accountant=settings.accountant)  # fmt: skip
            found[key] = (z, curve[:allowed], cost)
        spent = [found[repr(sampler)] for sampler in samplers]
    multipliers = np.array([z for z, _, _ in spent])
    counts = None
    if settings.adaptive:
        counts = np.array([settings.count_noise(num_sampled, z) for z in multipliers])
    return PrivacyPlan(
        settings=settings,
        scales=np.array([exposure.scale for exposure in exposures], dtype=np.float64),
        spent=tuple(curve for _, curve, _ in spent),
        costs=tuple(cost for _, _, cost in spent),
        rounds=allowed,
        noise_multipliers=multipliers,
        update_noise=np.array(
            [update_multiplier(z, None if counts is None else counts[r]) for r, z in enumerate(multipliers)]
        ),
        count_noise=counts,
        stop=stop,
    )


def _multiplier(settings: DPFedAvg, exposure: Exposure, rounds: int) -> float:
    """The run's ``z``: the settings' own, or the least one that keeps ``target_epsilon`` after ``rounds``."""
    if settings.target_epsilon is None:
        return float(settings.noise_multiplier)
    return noise_for_budget(
        exposure, rounds=rounds, epsilon=settings.target_epsilon, delta=settings.delta, accountant=settings.accountant
    )


def clip_factors(updates: dict[str, torch.Tensor], bounds: torch.Tensor, *, per_layer: bool) -> dict[str, torch.Tensor]:
    """Each slot's factor ``min(1, bound / norm)`` per parameter tensor: ``updates[name]`` is ``(slots, ...)``
    and ``bounds`` each slot's ``C`` (flat: one norm over every tensor; per layer: each tensor's own norm
    against ``C / sqrt(L)``). Norms are taken in float64."""
    squares = {n: u.reshape(u.shape[0], -1).to(torch.float64).pow(2).sum(1) for n, u in updates.items()}
    bounds = bounds.to(torch.float64)
    if per_layer:
        share = bounds / math.sqrt(max(len(updates), 1))
        return {n: torch.clamp(share / torch.sqrt(q).clamp_min(1e-300), max=1.0) for n, q in squares.items()}
    norms = torch.sqrt(sum(squares.values(), torch.zeros_like(bounds)))
    factor = torch.clamp(bounds / norms.clamp_min(1e-300), max=1.0)
    return dict.fromkeys(updates, factor)
