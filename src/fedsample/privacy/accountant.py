"""Each client's epsilon after ``T`` rounds, the rounds a budget allows, and the noise a budget needs.

Every function takes an :class:`~fedsample.privacy.exposure.Exposure` (from
:func:`~fedsample.privacy.samplers.exposure_of` or :func:`~fedsample.privacy.exposure.design_exposure`)
and asks dp-accounting once per group of clients (:mod:`fedsample.privacy.events`).

>>> import numpy as np
>>> from fedsample import Federation, make_sampler
>>> from fedsample.privacy import exposure_of, privacy_cost
>>> sampler = make_sampler("poisson")
>>> state = sampler.init(Federation.from_sizes([100] * 100), 10)
>>> cost = privacy_cost(exposure_of(sampler, state), noise_multiplier=1.0, rounds=100, delta=1e-5)
>>> round(cost.epsilon_max, 2), cost.accountant
(7.05, 'pld')
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Constraint, Interval, Options, check_param, invalid
from fedsample.privacy.events import group_epsilon
from fedsample.privacy.exposure import MULTIPLICITY, Exposure

__all__ = ["ACCOUNTANTS", "MAX_ROUNDS", "PrivacyCost", "noise_for_budget", "privacy_cost", "rounds_for_budget"]

ACCOUNTANTS = ("pld", "rdp")
MAX_ROUNDS = 1_000_000
MAX_NOISE_MULTIPLIER = 1e4
MIN_NOISE_MULTIPLIER = 1e-2
# noise_for_budget stops when the bracket of z is this tight (relative): its answer is the upper end.
NOISE_TOLERANCE = 1e-4

NOISE_MULTIPLIER = Interval(float, 0, MAX_NOISE_MULTIPLIER, closed="right")
ROUNDS = Interval(int, 0, MAX_ROUNDS, closed="both")
DELTA = Interval(float, 0, 1, closed="neither")
EPSILON = Interval(float, 0, 1e6, closed="right")


@dataclass(frozen=True, eq=False)
class PrivacyCost:
    """Each client's epsilon at ``delta`` after ``rounds`` rounds at noise multiplier ``noise_multiplier``.

    ``accountant`` is the one asked for (sampling without replacement also takes dp-accounting's RDP
    bound of its event, which its PLD accountant lacks). ``exposure`` says the model and adjacency.
    """

    epsilon: FloatArray
    group_epsilon: FloatArray
    delta: float
    rounds: int
    noise_multiplier: float
    accountant: str
    exposure: Exposure

    @property
    def epsilon_max(self) -> float:
        return float(self.epsilon.max()) if self.epsilon.size else 0.0

    @property
    def worst_client(self) -> int:
        """The client with the largest epsilon (the lowest id among equals)."""
        return int(np.argmax(self.epsilon))

    @property
    def epsilon_median(self) -> float:
        return float(np.median(self.epsilon))


def _check(exposure: object, owner: str, **values: object) -> None:
    if not isinstance(exposure, Exposure):
        raise invalid("exposure", owner, "an Exposure (fedsample.privacy.exposure_of)", exposure)
    table: dict[str, Constraint] = {
        "noise_multiplier": NOISE_MULTIPLIER,
        "rounds": ROUNDS,
        "delta": DELTA,
        "epsilon": EPSILON,
        "accountant": Options(ACCOUNTANTS),
    }
    for name, value in values.items():
        check_param(name, owner, value, table[name])


def privacy_cost(
    exposure: Exposure, *, noise_multiplier: float, rounds: int, delta: float, accountant: str = "pld"
) -> PrivacyCost:
    """Every client's epsilon at ``delta`` after ``rounds`` rounds, in client order.

    ``accountant``: ``"pld"`` (privacy loss distributions, tight) or ``"rdp"`` (Renyi DP, looser).
    """
    owner = "privacy_cost"
    _check(exposure, owner, noise_multiplier=noise_multiplier, rounds=rounds, delta=delta, accountant=accountant)
    z, count = float(noise_multiplier), int(rounds)
    epsilons = np.array(
        [
            group_epsilon(exposure, g, noise_multiplier=z, rounds=count, delta=delta, accountant=accountant)
            for g in range(exposure.num_groups)
        ]
    )
    return _cost(exposure, epsilons, z, count, float(delta), accountant)


def _cost(exposure: Exposure, groups: FloatArray, z: float, rounds: int, delta: float, accountant: str) -> PrivacyCost:
    per_client = np.zeros(exposure.num_clients)
    exposed = exposure.client_group >= 0
    per_client[exposed] = groups[exposure.client_group[exposed]]
    return PrivacyCost(
        epsilon=per_client,
        group_epsilon=groups,
        delta=delta,
        rounds=rounds,
        noise_multiplier=z,
        accountant=accountant,
        exposure=exposure,
    )


def _likely_worst_first(exposure: Exposure) -> list[int]:
    """The groups, the most exposed first (expected multiplicity times sensitivity): the worst client is
    usually found by the first computation, and the others are only checked against it."""
    if exposure.kind == MULTIPLICITY:
        mean = np.array([float(np.arange(law.size) @ law) for law in exposure.multiplicities])
    else:
        mean = exposure.rates
    return [int(g) for g in np.argsort(-(mean * exposure.sensitivities), kind="stable")]


def rounds_for_budget(
    exposure: Exposure, *, noise_multiplier: float, epsilon: float, delta: float, accountant: str = "pld"
) -> int:
    """The most rounds after which every client's epsilon at ``delta`` is at most ``epsilon`` (0 when one
    round already spends more; :data:`MAX_ROUNDS` when that many do not).

    The rounds of the whole federation are the fewest of any group's, so the group most exposed is
    solved first (bisection over ``T``) and each other group is checked at that ``T``, and solved in
    turn only if it spends more.
    """
    owner = "rounds_for_budget"
    _check(exposure, owner, noise_multiplier=noise_multiplier, epsilon=epsilon, delta=delta, accountant=accountant)
    z, budget = float(noise_multiplier), float(epsilon)

    def within(group: int, rounds: int) -> bool:
        cost = group_epsilon(exposure, group, noise_multiplier=z, rounds=rounds, delta=delta, accountant=accountant)
        return cost <= budget

    best = -1
    for group in _likely_worst_first(exposure):
        if best >= 0 and within(group, best):
            continue
        high = MAX_ROUNDS + 1 if best < 0 else best
        best = _last_true(functools.partial(within, group), 0, high)
        if best == 0:
            break
    return max(best, 0)


def _last_true(holds: Callable[[int], bool], low: int, high: int) -> int:
    """The largest integer in ``[low, high)`` where the monotone predicate ``holds`` is true (``holds(low)``
    is assumed, ``holds(high)`` false): a doubling search from ``low``, then bisection."""
    step = 1
    while low + step < high and holds(low + step):
        low, step = low + step, step * 2
    high = min(high, low + step)
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            low = middle
        else:
            high = middle
    return low


def noise_for_budget(
    exposure: Exposure, *, rounds: int, epsilon: float, delta: float, accountant: str = "pld"
) -> float:
    """The smallest noise multiplier ``z`` (within a relative 1e-4, rounded up) at which every client's
    epsilon at ``delta`` after ``rounds`` rounds is at most ``epsilon``.

    Raises the library's error when even :data:`MAX_NOISE_MULTIPLIER` spends more.
    """
    owner = "noise_for_budget"
    _check(exposure, owner, rounds=rounds, epsilon=epsilon, delta=delta, accountant=accountant)
    budget, rounds = float(epsilon), int(rounds)

    def within(group: int, z: float) -> bool:
        cost = group_epsilon(exposure, group, noise_multiplier=z, rounds=rounds, delta=delta, accountant=accountant)
        return cost <= budget

    needed = 0.0
    for group in _likely_worst_first(exposure):
        if needed > 0.0 and within(group, needed):
            continue
        found = _smallest_noise(functools.partial(within, group), needed or 1.0)
        if found is None:
            rule = f"a budget that a noise multiplier of at most {MAX_NOISE_MULTIPLIER:g} meets after {rounds} rounds"
            raise invalid("epsilon", owner, rule, epsilon)
        needed = found
    return needed


def _smallest_noise(holds: Callable[[float], bool], start: float) -> float | None:
    """The smallest ``z`` at which the predicate (true for large enough ``z``) holds, within
    :data:`NOISE_TOLERANCE` and rounded up, from a bracket grown by doubling from ``start``; ``None``
    when it fails at :data:`MAX_NOISE_MULTIPLIER`; :data:`MIN_NOISE_MULTIPLIER` when it holds there."""
    low = high = start
    if holds(start):
        while holds(low / 2):
            low /= 2
            if low <= MIN_NOISE_MULTIPLIER:
                return MIN_NOISE_MULTIPLIER
        low, high = low / 2, low
    else:
        while not holds(high):
            if high >= MAX_NOISE_MULTIPLIER:
                return None
            low, high = high, min(2.0 * high, MAX_NOISE_MULTIPLIER)
    while high / low > 1.0 + NOISE_TOLERANCE:
        middle = math.sqrt(low * high)
        if holds(middle):
            high = middle
        else:
            low = middle
    return high
