"""DivFL (Balakrishnan, Li, Zhou, Himayat, Smith and Bilmes, ICLR 2022): diverse client selection.

DivFL picks the subset ``S`` of ``m`` clients whose gradients best represent the full set's: it
minimises ``G(S) = sum_{i in [n]} min_{k in S} ||g_i - g_k||`` (each client represented by its
nearest selected client), which is maximising the facility-location function
``F(S) = sum_i max_{k in S} (D - ||g_i - g_k||)`` with ``D`` the largest distance: monotone
submodular, so the greedy algorithm is within ``1 - 1/e`` of the best subset. Greedy runs with
lazy evaluations (Minoux): a client's marginal gain only shrinks as ``S`` grows, so stale gains
are upper bounds and only the top one is re-evaluated.

Gradients are those the server last saw (the paper's stale gradients): each client's latest
vector kept as its representative gradient, optionally count-sketched, as by the similarity sampler
(:mod:`fedsample.samplers.similarity.sampler`), whose distance updates are reused: a round recomputes the
distance rows of the clients that returned (``O(n k d')``). The vector is, as in the authors' code
(melodi-lab/divfl, ``flearn/trainers/fedavg.py``), the gradient of the client's mean loss over all
its data at the global model it received (``representative="gradient"``, default,
``Feedback.gradients``), or its update ``theta_i - theta`` (``"update"``). As in the authors' code,
every available client reports its vector before the first selection (``initial_report``: a first
phase, :mod:`fedsample.samplers.two_phase`); without it a client never heard from is the zero
vector. Selection is biased (``E[w_i] != p_i``); see ``docs/selection-systems.md``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import DTypeTable, FloatArray, IntArray
from fedsample._invariants import check_count, check_mask, check_round, check_values
from fedsample._validation import Boolean, Constraint, Interval, NoneOr, Options, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.selectors.rules import RuleSampler, feedback_availability, participant_weights
from fedsample.samplers.similarity.distances import check_squared_distances
from fedsample.samplers.similarity.sampler import MAX_SIMILARITY_CLIENTS, update_distances
from fedsample.samplers.similarity.sketch import MAX_PROJECTION_DIM, check_sketch_memory, received_vectors
from fedsample.samplers.two_phase import FirstPhase
from fedsample.serialization import plain_data

__all__ = ["DivFLSampler", "DivFLState", "facility_location_greedy"]

# DivFL's first phase with representative="update": each client trains and sends its update.
EVERY_UPDATE_VECTOR = FirstPhase(report="updates", vectors=True)


def facility_location_greedy(
    distances: FloatArray, candidates: IntArray, count: int, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """Lazy greedy maximisation of ``sum_i max_{k in S} (D - distances[i, k])`` over ``S`` within
    ``candidates``, ``|S| = count``; ties broken at random.

    Returns the chosen clients in the order chosen and, for every client ``i``, the chosen client
    nearest to it (its representative).
    """
    n = distances.shape[0]
    top = float(distances.max(initial=0.0))
    nearest = np.full(n, top)  # distance from each client to S; D for the empty set (gain 0)
    # Initial gains sum_i (D - d_ik); their tie-breaking keys are random.
    gains = n * top - distances[candidates].sum(axis=1)
    keys = rng.random(candidates.size)
    heap = [(-float(g), float(u), int(c)) for g, u, c in zip(gains, keys, candidates, strict=True)]
    heapq.heapify(heap)
    chosen: list[int] = []
    while heap and len(chosen) < count:
        _, key, client = heapq.heappop(heap)
        gain = float(np.maximum(nearest - distances[client], 0.0).sum())  # the current marginal gain
        if heap and gain < -heap[0][0] - 1e-12 * max(top * n, 1.0):  # a stale bound: re-queue
            heapq.heappush(heap, (-gain, key, client))
            continue
        chosen.append(client)
        np.minimum(nearest, distances[client], out=nearest)
    picked = np.asarray(chosen, dtype=np.int64)
    representative = picked[np.argmin(distances[:, picked], axis=1)] if picked.size else np.zeros(0, np.int64)
    return picked, representative


@plain_data
@dataclass(frozen=True, eq=False)
class DivFLState(SamplerState):
    """DivFL's state: stale (sketched) gradients, their squared distances and who is available."""

    gradients: np.ndarray  # (n, d') float32, zero for clients never heard from
    update_dim: int
    distances: FloatArray  # (n, n) squared Euclidean distances of the gradients
    available: np.ndarray
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {"gradients": np.float32, "distances": np.float64, "available": np.bool_}

    def check_invariants(self) -> None:
        owner = "DivFLState"
        n, _ = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        check_values(owner, "gradients", self.gradients, shape=(n, None))
        check_count(owner, "update_dim", self.update_dim, 0)
        check_values(owner, "distances", self.distances, shape=(n, n), low=0.0)
        check_squared_distances(owner, self.gradients, self.distances)
        check_mask(owner, "available", self.available, n)
        check_round(owner, "round", self.round)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class DivFLSampler(RuleSampler[DivFLState]):
    """DivFL: the ``m`` available clients whose stale gradients best represent every client's.

    Hyperparameters
    ---------------
    projection_dim, projection_seed:
        ``None`` keeps full update vectors; an int ``d'`` keeps their count sketch (``O(d)``
        memory, distances preserved in expectation), as in the similarity sampler.
    aggregation:
        ``"size"`` (default, ``p_i / sum_S p_j``: FedAvg over the participants), ``"average"``
        (``1/m``) or ``"assignment"`` (each selected client weighs the importances of the clients
        it represents, ``sum_{i : rep(i) = k} p_i``: the facility-location estimate of the full
        gradient).
    max_clients:
        The largest federation accepted (the distance matrix is ``8 n^2`` bytes; default 20000).
    representative:
        The vector that stands for a client: ``"gradient"`` (default, the authors' code): the
        gradient of its mean loss over all its data at the global model it last received
        (``Feedback.gradients``: one more pass over the client's data each time it trains, and ``d``
        more floats to upload); or ``"update"``, its last update ``theta_i - theta``
        (``Feedback.updates``, which the engine has anyway).
    initial_report:
        ``True`` (default, the authors' code): before the first selection every available client
        reports its vector (its update, training as in the round, or its gradient), a first phase
        that the engine runs and charges on the clock. ``False``: no first phase; the first round is
        uniform (every client is the zero vector) and about one unseen client joins per round.
    """

    name = "divfl"
    projection_dim: int | None = None
    projection_seed: int = 0
    aggregation: Literal["size", "average", "assignment"] = "size"
    max_clients: int = MAX_SIMILARITY_CLIENTS
    representative: Literal["update", "gradient"] = "gradient"
    initial_report: bool = True
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "projection_dim": NoneOr(Interval(int, 1, MAX_PROJECTION_DIM, closed="both")),
        "projection_seed": Interval(int, 0, None, closed="left"),
        "aggregation": Options(("size", "average", "assignment")),
        "max_clients": Interval(int, 1, None, closed="left"),
        "representative": Options(("update", "gradient")),
        "initial_report": Boolean(),
    }

    @property
    def needs_updates(self) -> bool:  # type: ignore[override]
        """The update vectors are the representatives (``representative="update"``)."""
        return self.representative == "update"

    @property
    def needs_gradients(self) -> bool:  # type: ignore[override]
        """The full-batch gradients are the representatives (``representative="gradient"``)."""
        return self.representative == "gradient"

    def initial_phase(self) -> FirstPhase | None:
        """Every available client's vector before the first selection: it trains and sends its update,
        or computes and sends its gradient (``None`` without ``initial_report``)."""
        if not self.initial_report:
            return None
        return FirstPhase(report="gradients") if self.representative == "gradient" else EVERY_UPDATE_VECTOR

    def init(self, federation: Federation, num_sampled: int) -> DivFLState:
        m = self._check_num_sampled(num_sampled, upper=federation.num_clients)
        n = federation.num_clients
        if n > self.max_clients:
            raise FedsampleError(
                f"The 'federation' parameter of {type(self).__name__}.init must have at most {self.max_clients} "
                f"clients (max_clients: the distance matrix is quadratic in n). Got {n} clients instead.",
                parameter="federation",
            )
        check_sketch_memory(self.projection_dim, n, type(self).__name__)
        return DivFLState(
            importances=federation.importances,
            num_sampled=m,
            gradients=np.zeros((n, 0), dtype=np.float32),
            update_dim=0,
            distances=np.zeros((n, n)),
            available=np.ones(n, dtype=bool),
        )

    def select(self, state: DivFLState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        candidates = np.flatnonzero(state.available)
        distances = np.sqrt(state.distances)
        picked, representative = facility_location_greedy(distances, candidates, state.num_sampled, rng)
        clients = np.sort(picked)
        if self.aggregation == "assignment":
            mass = np.bincount(representative, weights=state.importances, minlength=state.importances.size)
            return clients, mass[clients] / mass[clients].sum()
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def update(self, state: DivFLState, feedback: Feedback) -> DivFLState:
        owner = f"{type(self).__name__}.update"
        available = feedback_availability(feedback, state.available)
        clients, vectors, update_dim = self._received(state, feedback, owner)
        stored_dim = update_dim if self.projection_dim is None else self.projection_dim
        gradients = state.gradients
        if state.update_dim == 0 and update_dim:
            gradients = np.zeros((gradients.shape[0], stored_dim), dtype=np.float32)
        elif state.update_dim and gradients.shape[1] != stored_dim:  # a saved state with another projection
            made = (
                f"a state whose gradients have {stored_dim} columns (built with projection_dim={self.projection_dim})"
            )
            raise invalid("state", owner, made, f"{gradients.shape[1]} columns")
        if clients.size == 0:
            return replace(
                state, gradients=gradients, update_dim=update_dim, available=available, round=state.round + 1
            )
        gradients = np.array(gradients, copy=True)
        gradients[clients] = vectors
        distances = update_distances(state.distances, gradients, clients, similarity="l2")
        return replace(
            state,
            gradients=gradients,
            update_dim=update_dim,
            distances=distances,
            available=available,
            round=state.round + 1,
        )

    def _received(self, state: DivFLState, feedback: Feedback, owner: str) -> tuple[IntArray, np.ndarray, int]:
        """The returned clients with finite vectors (updates or gradients), those vectors (sketched) and ``d``."""
        return received_vectors(
            feedback,
            update_dim=state.update_dim,
            projection_dim=self.projection_dim,
            projection_seed=self.projection_seed,
            owner=owner,
            field="gradients" if self.representative == "gradient" else "updates",
        )
