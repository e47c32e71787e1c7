"""FedCor (Tang, Ren, Zhang, Pei and Sun, CVPR 2022): correlation-based client selection.

FedCor models how the clients' losses change together over a round with a Gaussian process
(:mod:`fedsample.samplers.selectors.fedcor_gp`: ``Sigma = X^T X + sigma^2 I`` over learned client embeddings
``X``) and picks, one client at a time, the client whose loss change covaries most with the
importance-weighted change of everyone's loss, conditioning the process on each pick. The process is
fitted from rounds in which every client's loss is measured before and after a round of clients drawn
at random:

* **warm-up**: rounds ``0..W`` (``warmup_rounds``) draw ``m`` clients uniformly at random; every
  client reports its loss at the global model before and after each of them, each round giving one
  loss-change vector ``Delta_t = L(theta_{t+1}) - L(theta_t)``. After round ``W`` the embeddings are
  fitted (``warmup_iterations`` Adam steps on the marginal likelihood of the stored vectors, weighted
  ``decay^(W - e)``, with the mean ``mu`` their weighted average).
* **selection rounds**: the greedy choice of :func:`~fedsample.samplers.selectors.fedcor_gp.greedy_selection`;
  each chosen client's score is then multiplied by ``discount`` (``beta``) for the rounds that follow,
  so that the same clients are not chosen every round.
* **refits**: every ``refit_interval`` rounds after the warm-up, a round is again drawn at random and
  measured; its vector joins those of the last ``history`` rounds, the discounts are reset to 1 and
  the embeddings are refitted (``refit_iterations`` steps, from where they were).

The losses come through a first phase (:mod:`fedsample.samplers.two_phase`): the sampler is two-phase,
and its candidates are every available client in a round whose loss is needed (before and after each
random round) and nobody otherwise. The engine runs the phase (each candidate's loss at the global
model over all its data, a forward pass) and hands the losses to :meth:`FedCorSampler.update` before
the draw; the draw of a selection round is computed there too (it is deterministic), and
:meth:`~FedCorSampler.sample` returns it. See docs/selection-systems.md for where this follows the
authors' released code (Yoruko-Tang/FedCor) and where it departs. Biased by design (``E[w_i] != p_i``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import BoolArray, DTypeTable, FloatArray, IntArray
from fedsample._invariants import FieldError, check_count, check_mask, check_round, check_values
from fedsample._validation import Constraint, Interval, Options, invalid
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.selectors.fedcor_gp import LossChanges, fit_embedding, greedy_selection, weighted_mean
from fedsample.samplers.selectors.rules import RuleSampler, participant_weights, returned_values
from fedsample.samplers.two_phase import FirstPhase, check_report_round, reported_round
from fedsample.serialization import plain_data

# The largest loss change a fit takes: its square, summed over a few thousand clients, stays finite.
_LARGEST_CHANGE = 1e100

__all__ = ["MAX_DIMENSION", "MAX_ITERATIONS", "FedCorSampler", "FedCorState"]

# The largest embedding dimension and number of Adam steps of a fit (the bounds of the parameter table).
MAX_DIMENSION = 100
MAX_ITERATIONS = 10**4

# Every candidate's loss at the global model over all its data (a forward pass, no training).
EVERY_LOSS = FirstPhase(report="losses")
# The largest magnitude of an embedding entry: D <= MAX_DIMENSION squares of it stay far from overflow, so
# the GP's variances x_k^T x_k + sigma^2 are finite (a saved or fitted embedding beyond it is refused/not kept).
EMBEDDING_LIMIT = 1e100

# Mixed into the embedding's seed, so that its stream differs from any other seeded by the same integer.
_EMBEDDING_TAG = 0xFEDC0


@plain_data
@dataclass(frozen=True, eq=False)
class FedCorState(SamplerState):
    """FedCor's state: :class:`SamplerState`'s fields, and

    Attributes
    ----------
    embedding:
        ``X`` (``D x n``): the clients' embeddings, ``Sigma = X^T X + noise^2 I``.
    mean:
        ``mu``, the weighted mean of the stored loss changes (0 before the first fit).
    discount:
        Each client's annealing factor ``beta^(times chosen since the last refit)``.
    change_rounds, changes, observed:
        The stored loss-change vectors: the round each measures, its values (``k x n``, 0 where not
        observed) and which clients it observed.
    losses, losses_observed, losses_round:
        The last report's losses at the global model of round ``losses_round`` (-1: none yet).
    planned:
        The clients of the selection round about to be drawn (empty in a random round).
    available:
        Who may be selected (the last report's candidates, or the feedback's ``available``).
    round:
        Reports read: the next report is that of round ``round``, and ``sample`` draws round ``round - 1``.
    """

    embedding: FloatArray
    mean: FloatArray
    discount: FloatArray
    change_rounds: IntArray
    changes: FloatArray
    observed: BoolArray
    losses: FloatArray
    losses_observed: BoolArray
    planned: IntArray
    available: BoolArray
    losses_round: int = -1
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {
        **dict.fromkeys(("embedding", "mean", "discount", "changes", "losses"), np.float64),
        **dict.fromkeys(("change_rounds", "planned"), np.int64),
        **dict.fromkeys(("observed", "losses_observed", "available"), np.bool_),
    }

    def check_invariants(self) -> None:
        owner = "FedCorState"
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        limit = EMBEDDING_LIMIT
        check_values(owner, "embedding", self.embedding, shape=(None, n), low=-limit, high=limit)
        if self.embedding.shape[0] < 1:
            raise FieldError(
                owner, "embedding", "a D x n array with D >= 1", f"an array of shape {self.embedding.shape}"
            )
        check_values(owner, "mean", self.mean, shape=(n,))
        check_values(owner, "discount", self.discount, shape=(n,), low=0.0, high=1.0)
        k = check_values(owner, "change_rounds", self.change_rounds, shape=(None,), low=0, integer=True).size
        check_values(owner, "changes", self.changes, shape=(k, n))
        if self.observed.dtype != np.bool_ or self.observed.shape != (k, n):
            raise FieldError(owner, "observed", f"a boolean array of shape ({k}, {n})", f"{self.observed.shape}")
        check_values(owner, "losses", self.losses, shape=(n,))
        check_mask(owner, "losses_observed", self.losses_observed, n)
        check_values(owner, "planned", self.planned, shape=(None,), low=0, high=n - 1, integer=True)
        if np.unique(self.planned).size != self.planned.size:
            raise FieldError(owner, "planned", "distinct client ids", repr(self.planned.tolist()))
        check_mask(owner, "available", self.available, n)
        check_round(owner, "round", self.round)
        check_count(owner, "losses_round", self.losses_round, -1, max(self.round - 1, -1))


@register_sampler
@dataclass(frozen=True, kw_only=True)
class FedCorSampler(RuleSampler[FedCorState]):
    """FedCor: a Gaussian process of the clients' loss changes picks the clients expected to lower the
    global loss most (see the module doc). Biased.

    Hyperparameters (the authors' names in brackets; defaults from their README's FMNIST command)
    ----------------------------------------------------------------------------------------------
    warmup_rounds:
        ``W`` [``--warmup``, 15]: rounds ``0..W`` are drawn at random and measured, then the first fit.
    refit_interval:
        [``--GPR_interval``, 10]: after the warm-up, every round ``t`` with ``t % refit_interval == 0``
        is drawn at random and measured, and the process is refitted.
    history:
        [``--group_size``, 100]: a refit uses the vectors of the rounds at most ``history`` rounds old.
    decay:
        ``gamma`` [``--GPR_gamma``, 0.95] in ``(0, 1]``: a vector ``a`` rounds older weighs ``gamma^a``.
    discount:
        ``beta`` [``--discount``, 0.95] in ``(0, 1]``: a chosen client's score factor, per selection.
    dimension:
        ``D`` [``--dimension``, 15]: the embeddings' dimension, at most :data:`MAX_DIMENSION` (100).
    noise:
        ``sigma`` [0.01, fixed in the released ``GPR``]: the noise level on the diagonal, ``1e-6`` to ``1e6``.
    warmup_iterations, refit_iterations:
        Adam steps of the first fit [1000] and of each refit [``--GPR_Epoch``, 100], at most
        :data:`MAX_ITERATIONS` (10^4) so that a fit cannot stall a run.
    learning_rate:
        Adam's step [0.01].
    aggregation:
        ``"average"`` (default, the released plain mean of the chosen models) or ``"size"``.
    seed:
        Seeds the initial embeddings (``N(0, 1/D)`` entries, as the released initialisation).
    """

    name = "fedcor"
    two_phase = True
    warmup_rounds: int = 15
    refit_interval: int = 10
    history: int = 100
    decay: float = 0.95
    discount: float = 0.95
    dimension: int = 15
    noise: float = 0.01
    warmup_iterations: int = 1000
    refit_iterations: int = 100
    learning_rate: float = 0.01
    aggregation: Literal["average", "size"] = "average"
    seed: int = 0
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "warmup_rounds": Interval(int, 0, 10**6, closed="both"),
        "refit_interval": Interval(int, 1, 10**6, closed="both"),
        "history": Interval(int, 1, 10**6, closed="both"),
        "decay": Interval(float, 0, 1, closed="right"),
        "discount": Interval(float, 0, 1, closed="right"),
        # An Adam step costs O(n D (D + k) + D^3): D = 100 and 10^4 steps are about 35 s a fit on the default
        # preset's 60 clients (one thread), D = 15 about 2.5 s; beyond them a run stalls on its fits.
        "dimension": Interval(int, 1, MAX_DIMENSION, closed="both"),
        "noise": Interval(float, 1e-6, 1e6, closed="both"),
        "warmup_iterations": Interval(int, 0, MAX_ITERATIONS, closed="both"),
        "refit_iterations": Interval(int, 0, MAX_ITERATIONS, closed="both"),
        "learning_rate": Interval(float, 0, 1e3, closed="right"),
        "aggregation": Options(("average", "size")),
        "seed": Interval(int, 0, 2**63 - 1, closed="both"),
    }

    # --- the schedule -------------------------------------------------------------------------

    def random_round(self, t: int) -> bool:
        """Whether round ``t`` is drawn at random and measured (warm-up, or a refit round)."""
        return t <= self.warmup_rounds or t % self.refit_interval == 0

    def report_due(self, t: int) -> bool:
        """Whether every client's loss at the global model of round ``t`` is needed (before or after a
        random round)."""
        return self.random_round(t) or (t >= 1 and self.random_round(t - 1))

    # --- the contract -------------------------------------------------------------------------

    def first_phase(self) -> FirstPhase:
        """Each candidate's loss at the global model over all its data."""
        return EVERY_LOSS

    def init(self, federation: Federation, num_sampled: int) -> FedCorState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        rng = np.random.default_rng([self.seed, _EMBEDDING_TAG, n, self.dimension])
        return FedCorState(
            importances=federation.importances,
            num_sampled=m,
            embedding=rng.standard_normal((self.dimension, n)) / np.sqrt(self.dimension),
            mean=np.zeros(n),
            discount=np.ones(n),
            change_rounds=np.zeros(0, dtype=np.int64),
            changes=np.zeros((0, n)),
            observed=np.zeros((0, n), dtype=bool),
            losses=np.zeros(n),
            losses_observed=np.zeros(n, dtype=bool),
            planned=np.zeros(0, dtype=np.int64),
            available=np.ones(n, dtype=bool),
        )

    def draw_candidates(self, state: FedCorState, available: IntArray, rng: np.random.Generator) -> Selection:
        """Every ``available`` client when round ``state.round``'s losses are needed, else nobody."""
        ids = np.asarray(available, dtype=np.int64) if self.report_due(state.round) else np.zeros(0, np.int64)
        return Selection(clients=ids, weights=state.importances[ids])

    def select(self, state: FedCorState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        """Round ``state.round - 1``: ``m`` available clients uniformly at random in a random round, else
        the greedy choice made when the round's report was read."""
        t = max(state.round - 1, 0)
        if self.random_round(t) or state.planned.size == 0:
            ids = np.flatnonzero(state.available)
            clients = np.sort(rng.choice(ids, size=min(state.num_sampled, ids.size), replace=False)).astype(np.int64)
        else:
            clients = np.sort(state.planned)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: FedCorState, feedback: Feedback) -> FedCorState:
        """Read round ``t``'s report: each candidate's loss at the round's global model. A random round's
        loss changes are stored when the losses before and after it are known (then fitted or refitted
        on schedule); a selection round's clients are chosen here, and discounted."""
        owner = f"{type(self).__name__}.update"
        check_report_round(state.round, feedback, owner, "fedcor")
        t = max(int(state.round), int(feedback.round))
        clients, values = returned_values(feedback, "losses")
        if feedback.losses is None and feedback.clients.size and self.report_due(t):
            rule = "a Feedback with 'losses': the candidates' losses at the global model (FedCor's report)"
            raise invalid("feedback", owner, rule, "a Feedback without 'losses'")
        available = self._availability(state, feedback)
        state = replace(state, available=available)
        if t >= 1 and self.random_round(t - 1) and state.losses_round == t - 1:
            state = self._learn(state, t - 1, clients, values)
        if clients.size:
            losses = np.zeros_like(state.losses)
            losses[clients] = values
            observed = np.zeros(losses.size, dtype=bool)
            observed[clients] = True
            state = replace(state, losses=losses, losses_observed=observed, losses_round=t)
        planned = np.zeros(0, dtype=np.int64)
        discount = state.discount
        if not self.random_round(t):
            candidates = np.flatnonzero(state.available).astype(np.int64)
            planned = greedy_selection(
                state.embedding, self.noise, state.importances, discount, candidates, state.num_sampled
            )
            discount = discount.copy()
            discount[planned] *= self.discount
        return replace(state, planned=planned, discount=discount, round=reported_round(state.round, feedback))

    # --- learning -----------------------------------------------------------------------------

    def _availability(self, state: FedCorState, feedback: Feedback) -> BoolArray:
        """``feedback.available`` when given; else a report's candidates (every available client)."""
        ids = feedback.available if feedback.available is not None else feedback.selection.clients
        if feedback.available is None and ids.size == 0:
            return state.available
        mask = np.zeros(state.importances.size, dtype=bool)
        mask[np.asarray(ids, dtype=np.int64)] = True
        return mask

    def _learn(self, state: FedCorState, measured: int, clients: IntArray, values: FloatArray) -> FedCorState:
        """Store round ``measured``'s loss changes (the clients observed before and after it), keep the
        last ``history`` rounds' and fit the process when the schedule says so."""
        n = state.importances.size
        after = np.zeros(n, dtype=bool)
        after[clients] = True
        observed = after & state.losses_observed
        if observed.any():
            change = np.zeros(n)
            now = np.zeros(n)
            now[clients] = values
            change[observed] = now[observed] - state.losses[observed]
            # A change too large to square (finite losses near 1e200) would make the fit NaN: not stored.
            bad = observed & ~(np.abs(change) < _LARGEST_CHANGE)
            observed &= ~bad
            change[bad] = 0.0
        if observed.any():
            keep = state.change_rounds + self.history >= measured
            state = replace(
                state,
                change_rounds=np.append(state.change_rounds[keep], measured),
                changes=np.vstack([state.changes[keep], change]),
                observed=np.vstack([state.observed[keep], observed]),
            )
        if measured < self.warmup_rounds or state.change_rounds.size == 0:
            return state
        iterations = self.warmup_iterations if measured == self.warmup_rounds else self.refit_iterations
        changes = LossChanges(
            values=state.changes,
            observed=state.observed,
            weights=self.decay ** (measured - state.change_rounds).astype(np.float64),
        )
        mean = weighted_mean(changes)
        embedding = fit_embedding(
            state.embedding, self.noise, mean, changes, iterations=iterations, learning_rate=self.learning_rate
        )
        diverged = not (np.abs(embedding).max(initial=0.0) <= EMBEDDING_LIMIT and np.isfinite(mean).all())
        if diverged:  # a fit that diverged is not kept
            return state
        return replace(state, embedding=embedding, mean=mean, discount=np.ones(n))
