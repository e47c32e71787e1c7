"""FedSampling (paper 004: Qi et al., IJCAI 2023): data-level sampling with a private size estimate.

The server wants ``K`` samples per round. It never learns the clients' sizes; instead:

1. every client answers the size query by randomized response (:mod:`fedsample.samplers.schemes.fedsampling_ldp`): its
   size clipped to ``M - 1`` with probability ``alpha``, else a uniform integer in ``1..M-1``;
2. the server estimates the total ``N~ = (R - (1 - alpha) M |C| / 2) / alpha`` from the sum ``R``
   of the answers (eq. 2), and sends the rate ``K / N~``. The estimate's mean is the total of the
   clipped sizes, ``sum_c min(n_c, M - 1)``: ``E[N~] = N`` holds only when no client holds ``M``
   or more samples (:func:`estimate_moments` gives the exact mean and variance);
3. each client keeps each of its samples independently with that probability, and returns the sum
   of the kept samples' gradients divided by ``K``; the server adds the returns: ``theta <- theta
   - eta sum_c G_c``.

In fedsample the kept count ``k_c ~ Binomial(n_c, K / N~)`` is drawn by the sampler (a uniform
subset of that size has the law of independent keeps), the client trains on exactly those samples
with the mean loss (the ``batch_size`` instruction), and its aggregation weight is ``k_c / K``: the
aggregate ``sum_c (k_c / K) (theta_c - theta) = -eta_l (1/K) sum_kept g`` is FedSampling's update
with one local step (use the ``minibatch-sgd`` algorithm). Each client is aggregated once. With
``N > 1`` local steps the engine draws the kept subset once for the round and every step reads
that same subset (full-batch steps on the kept samples), so a client never touches more than
``k_c`` samples in a round.

Choices the paper leaves open, documented in docs/fedsampling.md:

* **Guard.** Randomized response can make ``N~`` small or even negative. The server knows how
  many clients answered and that each holds at least one sample, so the estimate is clamped to
  ``[|C|, (M - 1) |C|]`` (the range of the clipped sizes' total) before the rate ``min(1, K / N~)``
  is computed. Falling back to "keep everything" instead would multiply the round's step by
  ``N / K``.
* **Divisor.** A client's return is its kept gradients' sum divided by ``K``, the expected number
  of kept samples ``rate N~``. When ``K`` exceeds the estimate, the rate is capped at 1 and the
  divisor becomes ``N~``, so the aggregate stays an average over all the data.
* **Estimate.** ``estimate="round"`` (default, the paper) uses the round's answers alone.
  ``estimate="cumulative"`` averages the estimates of all rounds so far. The sizes do not change,
  and the answers are the ones the per-round protocol releases anyway, so averaging costs no
  privacy. It divides the estimate's variance by the number of rounds: with the paper's ``M = 300``
  and ``eps = 3`` (``alpha = 0.06``), a single round's relative error is about ``760 / sqrt(|C|)``
  for clients of mean size 2, far too noisy below millions of clients.

* **Normalisation** (ours, off by default). ``normalize=True`` divides the weights by their sum,
  ``k_c / sum_j k_j``: the update is the mean gradient of the round's kept samples, so its length
  no longer depends on the estimate ``N~`` (clipped sizes make ``N~`` too small and the weights
  sum to more than one). The server then needs the round's total kept count.

``FixedRateSampler`` gives the paper's naive variants: a fixed keep rate, and weights either
proportional to the kept counts (which discloses them) or equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray
from fedsample._invariants import MAX_COUNT, check_count, check_distribution, check_real, check_round, check_values
from fedsample._validation import Boolean, Constraint, Interval, NoneOr, Options
from fedsample.designs import DataLevelDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers.schemes.fedsampling_ldp import PrivacyReport, epsilon_of, response_probability
from fedsample.serialization import plain_data

# A sizeless state bounds no client id (but ids stay int64 and non-negative).
MAX_CLIENT_ID = int(np.iinfo(np.int64).max)
# The estimate N~ divides by alpha: below this floor it leaves float's range (M |C| / alpha > 1e308) and
# carries no information anyway (one truthful answer in 10^200). An epsilon below MIN_EPSILON gives
# e^eps - 1 = 0 in floats (below 1.1e-16), so alpha = 0; above it alpha >= 1e-12 / MAX_COUNT > MIN_PROBABILITY.
MIN_PROBABILITY = 1e-200
MIN_EPSILON = 1e-12

__all__ = ["DataLevelState", "FedSamplingSampler", "FixedRateSampler", "estimate_moments", "estimate_total"]


def estimate_total(answers: IntArray, probability: float, size_threshold: int) -> float:
    """``N~ = (R - (1 - alpha) M |C| / 2) / alpha`` from the clients' randomized answers (004, eq. 2)."""
    total = float(np.sum(answers, dtype=np.float64))
    return (total - (1.0 - probability) * size_threshold * answers.size / 2.0) / probability


def estimate_moments(sizes: IntArray, probability: float, size_threshold: int) -> tuple[float, float]:
    """The exact mean and variance of one round's estimate ``N~`` (:func:`estimate_total`) over the
    answers of clients of ``sizes``.

    Client ``c`` answers its clipped size ``s_c = min(n_c, M - 1)`` with probability ``alpha``, else
    ``U`` uniform on ``1..M-1`` (``E[U] = M / 2``, ``Var[U] = M (M - 2) / 12``). By the law of
    total variance, ``Var[Y_c] = (1 - alpha) M (M - 2) / 12 + alpha (1 - alpha) (s_c - M / 2)^2``;
    the answers are independent and ``N~`` is affine in their sum, so::

        E[N~]   = sum_c s_c
        Var[N~] = (1 - alpha) / alpha^2 * (|C| M (M - 2) / 12 + alpha sum_c (s_c - M / 2)^2)

    The second term (the spread of the truthful answers) is what the approximation
    ``|C| (1 - alpha) M^2 / (12 alpha^2)`` leaves out.

    >>> estimate_moments(np.array([1, 5]), 1.0, 300)
    (6.0, 0.0)
    """
    clipped = np.minimum(np.asarray(sizes, dtype=np.float64), size_threshold - 1)
    alpha, m = float(probability), float(size_threshold)
    spread = float(np.sum((clipped - m / 2.0) ** 2))
    variance = (1.0 - alpha) / alpha**2 * (clipped.size * m * (m - 2.0) / 12.0 + alpha * spread)
    return float(clipped.sum()), variance


@plain_data
@dataclass(frozen=True, eq=False)
class DataLevelState(ArrayFields):
    """Sizes (the simulation's ground truth, which the server never sees), importances, the
    target ``K``, the response probability, and the last round's rate."""

    sizes: IntArray
    importances: FloatArray
    target: int
    response_probability: float
    size_threshold: int
    last_rate: float = math.nan
    estimate_sum: float = 0.0
    estimate_count: int = 0
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {"sizes": np.int64, "importances": np.float64}

    def check_invariants(self) -> None:
        owner = "DataLevelState"
        check_values(owner, "sizes", self.sizes, shape=(None,), low=1, integer=True)
        check_distribution(owner, "importances", self.importances, size=self.sizes.size)
        check_count(owner, "target", self.target, 1, MAX_COUNT)
        check_real(owner, "response_probability", self.response_probability, MIN_PROBABILITY, 1.0)
        check_count(owner, "size_threshold", self.size_threshold, 3, MAX_COUNT)  # answers are drawn in 1..M-1
        largest = float(np.finfo(np.float64).max)
        check_real(owner, "last_rate", self.last_rate, 0.0, largest, nan=True)
        check_real(owner, "estimate_sum", self.estimate_sum, -largest, largest)
        rounds = check_round(owner, "round", self.round)
        check_round(owner, "estimate_count", self.estimate_count, rounds)  # at most one estimate a round


def _check_data_weighted(federation: Federation, owner: str) -> None:
    """FedSampling samples data uniformly: it optimises ``p_i = n_i / M`` and nothing else."""
    data_weighted = federation.sizes / federation.total_size
    if not np.allclose(federation.importances, data_weighted, rtol=1e-9, atol=0.0):
        raise FedsampleError(
            f"The 'federation' parameter of {owner} must have importances p_i = n_i / M: data-level "
            "sampling weighs every sample the same, so it optimises that objective and no other. Got other "
            "importances (for example importance 'uniform' with unequal sizes) instead.",
            parameter="federation",
        )


def _target(federation: Federation, num_sampled: int, target_samples: int | None) -> int:
    """``K``: given, or as many samples as ``m`` clients of average size hold."""
    if target_samples is not None:
        return int(target_samples)
    return max(1, round(num_sampled * federation.total_size / federation.num_clients))


@register_sampler
@dataclass(frozen=True, kw_only=True)
class FedSamplingSampler(Sampler[DataLevelState]):
    """FedSampling: uniform data-level sampling with an ``epsilon``-LDP estimate of the total size.

    Hyperparameters: ``target_samples`` (``K``; by default ``num_sampled`` times the mean client
    size, so that it draws as many samples as ``m`` client-level draws would), ``size_threshold``
    (``M``, default 300 as in the paper), ``epsilon`` (privacy budget per answer, default 3 as in
    the paper; ``alpha = (e^eps - 1) / (e^eps + M - 2)``), or ``probability`` (``alpha``
    directly, overriding ``epsilon``), ``estimate`` (``"round"`` or ``"cumulative"``) and
    ``normalize`` (ours: weights ``k_c / sum_j k_j`` instead of ``k_c / K``).

    ``sample`` draws the round's answers and kept counts from its ``rng``; the selection carries
    the ``data_rate`` and ``batch_size`` instructions. :meth:`privacy` reports the accounting.
    """

    name = "fedsampling"
    target_samples: int | None = None
    size_threshold: int = 300
    epsilon: float = 3.0
    probability: float | None = None
    estimate: Literal["round", "cumulative"] = "round"
    normalize: bool = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        # int64 counts: numpy draws the fake answers below M, and K / N~ is a float (MAX_COUNT).
        "target_samples": NoneOr(Interval(int, 1, MAX_COUNT, closed="both")),
        "size_threshold": Interval(int, 3, MAX_COUNT, closed="both"),
        "epsilon": Interval(float, MIN_EPSILON, None, closed="left"),
        "probability": NoneOr(Interval(float, MIN_PROBABILITY, 1, closed="both")),
        "estimate": Options(("round", "cumulative")),
        "normalize": Boolean(),
    }

    def init(self, federation: Federation, num_sampled: int) -> DataLevelState:
        m = self._check_num_sampled(num_sampled, upper=None)
        _check_data_weighted(federation, "FedSamplingSampler.init")
        return DataLevelState(
            sizes=federation.sizes,
            importances=federation.importances,
            target=_target(federation, m, self.target_samples),
            response_probability=self.truth_probability,
            size_threshold=self.size_threshold,
        )

    @property
    def truth_probability(self) -> float:
        """``alpha``: ``probability`` if given, else the truth probability of ``epsilon``-LDP (004, eq. 21)."""
        if self.probability is not None:
            return float(self.probability)
        return response_probability(self.epsilon, self.size_threshold)

    def answers(self, state: DataLevelState, rng: np.random.Generator) -> IntArray:
        """One round of randomized answers to the size query (004, eq. 1)."""
        clipped = np.minimum(state.sizes, state.size_threshold - 1)
        truthful = rng.random(state.sizes.size) < state.response_probability
        fake = rng.integers(1, state.size_threshold, size=state.sizes.size)
        out: IntArray = np.where(truthful, clipped, fake)
        return out

    def rate(self, estimate: float, state: DataLevelState, num_clients: int | None = None) -> tuple[float, float]:
        """The keep probability ``min(1, K / N~)`` and the divisor ``rate N~`` (``K`` unless the rate
        is capped at 1), with ``N~`` clamped to ``[|C|, (M - 1) |C|]``; ``|C|`` is ``num_clients``, the
        clients that answered (by default all of the state's)."""
        clients = state.sizes.size if num_clients is None else num_clients
        clamped = min(max(estimate, clients), (state.size_threshold - 1) * clients)
        rate = min(1.0, state.target / clamped)
        return rate, rate * clamped

    def rate_from_answers(self, answers: IntArray, state: DataLevelState) -> tuple[float, float, float]:
        """The round's estimate ``N~`` from the clients' ``answers``, and the keep rate and divisor it
        gives (:meth:`rate` over the answering clients; ``estimate="cumulative"`` averages it with
        the earlier rounds' estimates in ``state``). The server's side of a round: it reads no size."""
        estimate = estimate_total(answers, state.response_probability, state.size_threshold)
        used = estimate
        if self.estimate == "cumulative":
            used = (state.estimate_sum + estimate) / (state.estimate_count + 1)
        rate, divisor = self.rate(used, state, num_clients=int(answers.size))
        return estimate, rate, divisor

    def sample(self, state: DataLevelState, rng: np.random.Generator) -> Selection:
        estimate, rate, divisor = self.rate_from_answers(self.answers(state, rng), state)
        design = DataLevelDesign(sizes=state.sizes, rate=rate, divisor=divisor, aggregation=self._aggregation)
        clients, kept = design.draw_counts(rng)
        return Selection(
            clients=clients,
            weights=design.weights_of(kept),
            instructions={
                "data_rate": np.full(clients.size, design.rate),
                "batch_size": kept.astype(np.float64),
                "estimated_total": np.full(clients.size, estimate),
            },
        )

    def design(self, state: DataLevelState) -> DataLevelDesign:
        """The design at the rate ``K / N`` of a perfect estimate (statistics are conditional on ``N~ = N``).

        ``N`` itself, not clamped to ``(M - 1) |C|`` as an estimate is: clamped, clients holding more than
        ``M - 1`` samples on average gave weights of mean ``n_i / ((M - 1) |C|)``, not ``p_i``, and the
        sampler's own saved state was refused as biased."""
        total = float(state.sizes.sum())
        rate = min(1.0, state.target / total)
        return DataLevelDesign(sizes=state.sizes, rate=rate, divisor=rate * total, aggregation=self._aggregation)

    def num_clients(self, state: DataLevelState) -> int:
        """The clients the state knows; a server's state without sizes (Flower's: the server never
        sees a size, :func:`~fedsample.integrations.flower_fedsampling.server_state`) knows no
        population, and any client id may report (the ids are the deployment's own)."""
        return int(state.sizes.size) or MAX_CLIENT_ID

    @property
    def _aggregation(self) -> str:
        """The design's weight rule: ``k_c / K`` (the paper), or ``k_c / sum_j k_j`` when normalised."""
        return "weighted" if self.normalize else "fixed"

    def update(self, state: DataLevelState, feedback: Feedback) -> DataLevelState:
        instructions = feedback.selection.instructions
        rates, estimates = instructions.get("data_rate"), instructions.get("estimated_total")
        if rates is None or not rates.size or estimates is None:
            # No client kept a sample this round: the answers were still given, but not carried.
            return replace(state, round=state.round + 1)
        return replace(
            state,
            last_rate=float(rates[0]),
            estimate_sum=state.estimate_sum + float(estimates[0]),
            estimate_count=state.estimate_count + 1,
            round=state.round + 1,
        )

    def privacy(self, state: DataLevelState) -> PrivacyReport:
        """The privacy accounting after ``state.round`` size queries."""
        return PrivacyReport(
            epsilon_per_round=epsilon_of(state.response_probability, state.size_threshold),
            rounds=state.round,
            size_threshold=state.size_threshold,
            response_probability=state.response_probability,
        )


@register_sampler
@dataclass(frozen=True, kw_only=True)
class FixedRateSampler(Sampler[DataLevelState]):
    """Paper 004's naive data-level sampling: a fixed keep rate ``rate``, no size estimate.

    ``aggregation="weighted"`` weighs each client by its kept count over the round's total (the
    server learns the counts); ``"average"`` gives every participating client the same weight
    (private, but biased towards small clients).
    """

    name = "fixed-rate"
    rate: float = 0.05
    aggregation: Literal["weighted", "average"] = "weighted"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "rate": Interval(float, 0, 1, closed="right"),
        "aggregation": Options(("weighted", "average")),
    }

    def init(self, federation: Federation, num_sampled: int) -> DataLevelState:
        m = self._check_num_sampled(num_sampled, upper=None)
        return DataLevelState(
            sizes=federation.sizes,
            importances=federation.importances,
            target=_target(federation, m, None),
            response_probability=1.0,
            size_threshold=3,
        )

    def design(self, state: DataLevelState) -> DataLevelDesign:
        return DataLevelDesign(sizes=state.sizes, rate=self.rate, divisor=1.0, aggregation=self.aggregation)

    def sample(self, state: DataLevelState, rng: np.random.Generator) -> Selection:
        design = self.design(state)
        clients, kept = design.draw_counts(rng)
        return Selection(
            clients=clients,
            weights=design.weights_of(kept),
            instructions={"data_rate": np.full(clients.size, self.rate), "batch_size": kept.astype(np.float64)},
        )

    def update(self, state: DataLevelState, feedback: Feedback) -> DataLevelState:
        return replace(state, last_rate=self.rate, round=state.round + 1)
