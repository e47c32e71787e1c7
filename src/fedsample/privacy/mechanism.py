"""DP-FedAvg's round with any fixed-design sampler: clip each update, sum with the design's weights, noise once.

For run ``r`` in round ``t`` the server's direction is

``delta = sum_i w_i(S_t) clip_C(Delta_i) + N(0, (z_u C_t s)^2 I)``

with the design's own weights ``w_i(S_t)`` (summed over a client's draws) and no data-dependent
denominator: for every design whose weights are unbiased (``E[w_i(S)] = p_i``: full, independent
inclusions, fixed size, rows with replacement such as MD and clustered, systematic),
``E[delta] = sum_i p_i clip_C(Delta_i)``, the clipped updates' population average, whatever the noise.
``s`` is the design's noise scale (:func:`fedsample.privacy.noise_std`), ``z_u = z`` without adaptive
clipping.

Clipping is flat (``clip_C(Delta) = Delta min(1, C / ||Delta||)``) or per layer (each parameter
tensor to ``C / sqrt(L)``, so that the whole update stays within ``C``).

Adaptive clipping (Andrew et al., 2021; quantile-based): each kept client also reports
``b_i = 1[||Delta_i|| <= C_t]``; the server estimates the population's fraction under the bound as
``b = 1/2 + sum_i w_i (b_i - 1/2) + N(0, (z_b s)^2)`` (unbiased under the same designs, since
``sum_i p_i = 1``) and moves ``C_{t+1} = C_t exp(-eta (b - gamma))`` toward the ``gamma`` quantile.
The count has its own noise; the update's multiplier is raised to ``z_u = (z^-2 - (2 z_b)^-2)^(-1/2)``
so that the pair (update, count) is one Gaussian mechanism of multiplier ``z`` per client, and the
accountant's epsilons hold unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from fedsample._params import declared
from fedsample._validation import Boolean, Constraint, Interval, NoneOr, Options, check_params, invalid
from fedsample.privacy.accountant import ACCOUNTANTS, DELTA, EPSILON, NOISE_MULTIPLIER

__all__ = ["PRIVACY", "DPFedAvg", "PrivacyBudgetWarning", "update_multiplier"]

_OWNER = "DPFedAvg"
MAX_CLIP_NORM = 1e12


class PrivacyBudgetWarning(UserWarning):
    """A run with ``privacy.max_epsilon`` stopped before the round that would spend more (one line)."""


@dataclass(frozen=True)
class DPFedAvg:
    """The ``[privacy]`` settings: user-level DP-FedAvg, noise added once a round by the server.

    Attributes
    ----------
    clip_norm:
        ``C``, the bound on each client's update norm (the first one under adaptive clipping).
    noise_multiplier:
        ``z``: the noise's standard deviation is ``z C s`` (docs/privacy.md).
    per_layer:
        Clip each parameter tensor to ``C / sqrt(L)`` instead of the whole update to ``C``.
    target_quantile:
        ``gamma``: adaptive clipping toward this quantile of the update norms (``None``: ``C`` is fixed).
    clip_learning_rate:
        ``eta``, the geometric step of the adaptive clip norm.
    count_noise_multiplier:
        ``z_b``: the adaptive count's noise is ``z_b s`` (must exceed ``z / 2``; ``None``: ``m / 20``,
        Andrew et al.'s choice, with ``m`` the clients per round, and at least ``z``).
    delta, accountant:
        The accountant's ``delta`` and engine (``"pld"`` or ``"rdp"``) for the epsilons recorded each round.
    max_epsilon:
        The budget: the run stops before the round that would spend more (``None``: no budget).
    target_epsilon:
        Solve each run's ``z`` so that its most exposed client spends this epsilon after the training's
        rounds (:func:`fedsample.privacy.noise_for_budget`), instead of ``noise_multiplier``: samplers at
        an equal budget.
    """

    clip_norm: float = 1.0
    noise_multiplier: float = 1.0
    per_layer: bool = False
    target_quantile: float | None = None
    clip_learning_rate: float = 0.2
    count_noise_multiplier: float | None = None
    delta: float = 1e-5
    accountant: str = "pld"
    max_epsilon: float | None = None
    target_epsilon: float | None = None
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "clip_norm": Interval(float, 0, MAX_CLIP_NORM, closed="right"),
        "noise_multiplier": NOISE_MULTIPLIER,
        "per_layer": Boolean(),
        "target_quantile": NoneOr(Interval(float, 0, 1, closed="neither")),
        "clip_learning_rate": Interval(float, 0, 10, closed="right"),
        "count_noise_multiplier": NoneOr(NOISE_MULTIPLIER),
        "delta": DELTA,
        "accountant": Options(ACCOUNTANTS),
        "max_epsilon": NoneOr(EPSILON),
        "target_epsilon": NoneOr(EPSILON),
    }

    def __post_init__(self) -> None:
        check_params(_OWNER, {name: getattr(self, name) for name in self._parameter_constraints},
                     self._parameter_constraints)  # fmt: skip
        if self.adaptive and self.per_layer:
            raise invalid("per_layer", _OWNER, "False under adaptive clipping (target_quantile given)", True)
        count = self.count_noise_multiplier
        if self.adaptive and count is not None and 2.0 * count <= self.noise_multiplier:
            rule = f"more than noise_multiplier / 2 = {self.noise_multiplier / 2:g} (the count shares the budget)"
            raise invalid("count_noise_multiplier", _OWNER, rule, count)

    @property
    def adaptive(self) -> bool:
        return self.target_quantile is not None

    def count_noise(self, num_sampled: int, noise_multiplier: float) -> float:
        """``z_b``: the given one, else ``max(m / 20, z)`` (Andrew et al.'s ``m / 20``, kept above ``z / 2``)."""
        count = self.count_noise_multiplier
        if count is None:
            return max(num_sampled / 20.0, float(noise_multiplier))
        if 2.0 * count <= noise_multiplier:
            rule = f"more than the run's noise multiplier / 2 = {noise_multiplier / 2:g} (the count shares the budget)"
            raise invalid("count_noise_multiplier", _OWNER, rule, count)
        return float(count)


def update_multiplier(z: float, count_multiplier: float | None) -> float:
    """``z_u``: the update's noise multiplier when the adaptive count takes its share (``None``: no count)."""
    if count_multiplier is None:
        return z
    return 1.0 / math.sqrt(z**-2 - (2.0 * count_multiplier) ** -2)


PRIVACY = declared(DPFedAvg, "privacy")
"""The ``[privacy]`` table of a config: :class:`DPFedAvg`'s parameters, declared once."""
