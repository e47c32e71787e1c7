"""Active Federated Learning (Goetz, Malik, Bui, Moon, Liu and Kumar, "Active Federated Learning", 2019).

Each client holds a *valuation* ``v_i``, the last one it reported: its loss at the global model it
received, summed over its ``n_i`` samples and scaled by ``1 / n_i^e`` (AFL's ``e = 1/2``:
``v_i = sqrt(n_i) L_i`` with ``L_i`` the mean loss). A round, with ``a`` available clients:

1. the ``floor(alpha_1 a)`` lowest valuations are set to ``-inf`` (probability 0);
2. the others get ``p_i ∝ exp(alpha_2 v_i)`` (a softmax with inverse temperature ``alpha_2``);
3. ``m - floor(alpha_3 m)`` clients are drawn from ``p`` without replacement;
4. ``floor(alpha_3 m)`` more are drawn uniformly among the available clients not yet drawn.

``split_rule="floor-active"`` rounds the other share down instead, as the AFL port in FedCor's repository
(Yoruko-Tang/FedCor, ``src/federated_main.py``) does: ``int((1 - alpha_3) m)`` drawn from ``p``, the rest
uniformly (13 + 2 at ``m = 15``, ``alpha_3 = 0.1``, where the default gives 14 + 1).

The paper's values are ``alpha_1 = 0.75``, ``alpha_2 = 0.01``, ``alpha_3 = 0.1``. The selected clients
are aggregated by FedAvg over the participants (``aggregation``), so the scheme is biased
(``E[w_i] != p_i``); :mod:`fedsample.stats` measures the bias by Monte Carlo.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Boolean, Constraint, Interval, Options
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers.selectors.flsim import SizesState
from fedsample.samplers.selectors.rules import (
    AGGREGATION_OPTIONS,
    EVERY_LOSS,
    Aggregation,
    RuleSampler,
    gumbel_top_k,
    init_loss_state,
    participant_weights,
    update_loss_state,
)
from fedsample.samplers.two_phase import FirstPhase

__all__ = ["AFLSampler", "afl_log_weights", "lowest_with_random_ties", "valuations"]


def valuations(losses: FloatArray, sizes: FloatArray, size_exponent: float) -> FloatArray:
    """AFL's valuations ``n_i L_i / n_i^e`` from mean losses ``L_i`` (``-inf`` where none is known yet)."""
    with np.errstate(invalid="ignore"):
        values: FloatArray = np.where(np.isfinite(losses), sizes ** (1.0 - size_exponent) * losses, -np.inf)
    return values


def afl_log_weights(
    values: FloatArray, *, zero_fraction: float, inverse_temperature: float, active: int, rng: np.random.Generator
) -> FloatArray:
    """Log of AFL's unnormalised probabilities ``exp(alpha_2 v_i)`` over ``values``, ``-inf`` for the
    ``floor(alpha_1 a)`` lowest (ties at random), keeping at least ``active`` clients drawable.

    An unknown valuation (``-inf``: no loss reported yet) counts as the highest known one, so that a
    client not yet seen is attractive. The softmax is taken relative to the largest valuation.
    """
    size = values.size
    known = np.isfinite(values)
    top = float(values[known].max()) if known.any() else 0.0
    v = np.where(known, values, top)
    zeroed = min(int(np.floor(zero_fraction * size)), size - active)
    with np.errstate(over="ignore", invalid="ignore"):
        log_w = inverse_temperature * (v - top)
    log_w = np.where(np.isnan(log_w), 0.0, log_w)  # 0 * -inf: alpha_2 = 0 with a valuation gap beyond range
    if zeroed > 0:
        log_w[lowest_with_random_ties(v, zeroed, rng)] = -np.inf
    return log_w


def lowest_with_random_ties(values: FloatArray, count: int, rng: np.random.Generator) -> IntArray:
    """Positions of the ``count`` lowest ``values``, equal values at the cut chosen uniformly at random.

    ``O(len)``: the cut is the ``count``-th smallest value (a partition, no sort); everything below it
    is taken, and the places left go to a uniform choice among the values equal to it.
    """
    cut = np.partition(values, count - 1)[count - 1]
    below = np.flatnonzero(values < cut)
    tied = np.flatnonzero(values == cut)
    chosen: IntArray = np.concatenate([below, rng.choice(tied, size=count - below.size, replace=False)])
    return chosen


@register_sampler
@dataclass(frozen=True, kw_only=True)
class AFLSampler(RuleSampler[SizesState]):
    """Active Federated Learning: a softmax over the clients' valuations, the lowest fraction excluded,
    a fraction of the round uniform (see the module doc).

    Hyperparameters (the paper's ``alpha``s, its defaults)
    --------------------------------------------------------
    zero_fraction:
        ``alpha_1``, the fraction of available clients with the lowest valuations given probability 0
        (default 0.75). At most ``a - (m - floor(alpha_3 m))`` are excluded, so the active draw always
        has enough clients.
    inverse_temperature:
        ``alpha_2``, multiplying the valuations in the softmax (default 0.01; 0: uniform among the
        clients not excluded).
    uniform_fraction:
        ``alpha_3``, the share of the ``m`` clients drawn uniformly, ``floor(alpha_3 m)`` (default 0.1).
    split_rule:
        ``"floor-uniform"`` (default): ``floor(alpha_3 m)`` drawn uniformly, the rest from ``p``;
        ``"floor-active"``: ``floor((1 - alpha_3) m)`` from ``p``, the rest uniformly (FedCor's AFL port).
    size_exponent:
        ``e`` in ``v_i = n_i L_i / n_i^e`` (default 0.5, AFL's ``1 / sqrt(n_i)`` scaling of the summed loss;
        1 is the mean loss, 0 the summed loss).
    initial_evaluation:
        ``True`` (default): before the first selection every available client reports its loss at the
        global model over all its data (a first phase, as ``high-loss``). ``False``: a client without a
        valuation counts as the highest known one.
    aggregation:
        ``"size"`` (default, FedAvg over the participants by sample counts) or ``"average"``.
    """

    name = "afl"
    zero_fraction: float = 0.75
    inverse_temperature: float = 0.01
    uniform_fraction: float = 0.1
    split_rule: Literal["floor-uniform", "floor-active"] = "floor-uniform"
    size_exponent: float = 0.5
    initial_evaluation: bool = True
    aggregation: Aggregation = "size"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "zero_fraction": Interval(float, 0, 1, closed="left"),
        "inverse_temperature": Interval(float, 0, 1e300, closed="both"),
        "uniform_fraction": Interval(float, 0, 1, closed="both"),
        "split_rule": Options(("floor-uniform", "floor-active")),
        "size_exponent": Interval(float, -10, 10, closed="both"),
        "initial_evaluation": Boolean(),
        "aggregation": AGGREGATION_OPTIONS,
    }

    def init(self, federation: Federation, num_sampled: int) -> SizesState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        base = init_loss_state(federation, m)
        return SizesState(**{**base.__dict__, "sizes": federation.sizes.astype(np.float64)})

    def initial_phase(self) -> FirstPhase | None:
        """Every available client's loss over all its data, once before the first selection."""
        return EVERY_LOSS if self.initial_evaluation else None

    def split(self, num_sampled: int, available: int) -> tuple[int, int]:
        """``(active, uniform)``: the round's ``m`` (at most the ``available`` clients) split by ``alpha_3``."""
        m = min(num_sampled, available)
        if self.split_rule == "floor-active":  # FedCor's port: int((1 - alpha_3) m), the same float product
            active = int((1.0 - self.uniform_fraction) * m)
            return active, m - active
        uniform = int(np.floor(self.uniform_fraction * m))
        return m - uniform, uniform

    def probabilities(self, state: SizesState) -> FloatArray:
        """The active draw's distribution over every client (0 for the unavailable and the excluded),
        with the random tie-break of equal valuations at the exclusion cut drawn from a fixed seed."""
        return self._probabilities(state, np.random.default_rng(0))[1]

    def _probabilities(self, state: SizesState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        ids = np.flatnonzero(state.available)
        active, _ = self.split(state.num_sampled, ids.size)
        values = valuations(state.losses[ids], state.sizes[ids], self.size_exponent)
        log_w = afl_log_weights(
            values,
            zero_fraction=self.zero_fraction,
            inverse_temperature=self.inverse_temperature,
            active=active,
            rng=rng,
        )
        p = np.zeros(state.importances.size)
        w = np.exp(log_w - log_w.max()) if ids.size else np.zeros(0)
        p[ids] = w / w.sum() if ids.size else w
        return ids, p

    def select(self, state: SizesState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        ids, p = self._probabilities(state, rng)
        active, uniform = self.split(state.num_sampled, ids.size)
        with np.errstate(divide="ignore"):
            chosen = ids[gumbel_top_k(np.log(p[ids]), active, rng)]
        extra = np.zeros(0, dtype=np.int64)
        if uniform:
            free = state.available.copy()
            free[chosen] = False
            extra = rng.choice(np.flatnonzero(free), size=uniform, replace=False)
        clients = np.concatenate([chosen, extra]).astype(np.int64)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: SizesState, feedback: Feedback) -> SizesState:
        """Record the returned clients' losses (their new valuations) and the availability."""
        base = update_loss_state(state, feedback)
        return replace(state, losses=base.losses, available=base.available, round=base.round)
