"""HiCS-FL (Chen and Vikalo, NeurIPS 2024): hierarchical clustered sampling guided by heterogeneity.

The follow-up to clustered sampling by model similarity (:mod:`fedsample.samplers.similarity.sampler`). Each
client is represented by its last update of the network's *output layer* (a ``Linear(h, C)``: weight
``W_i`` and bias ``b_i``), from which the server estimates how heterogeneous its data are:

* **estimated entropy**: ``H_i = entropy(softmax(s_i / T))`` with ``s_i`` the row means of the output
  weight's update (``s_ic = mean_j W_i[c, j]``, the authors' released code) or the bias update
  ``b_i`` (the paper's estimator, ``estimator="bias"``), ``T`` a temperature. A client whose labels
  are concentrated on few classes moves few output rows a lot: a low ``H_i``.
* **dissimilarity**: ``rho_ij = arccos(cos([W_i, b_i], [W_j, b_j])) + lambda |H_i - H_j|`` (0 for a
  client that has not reported, as in the released code).
* **clustering**: Ward's hierarchical clustering of the clients into ``M`` clusters.
* **cluster-level sampling**: each of the ``m`` draws picks a cluster with probability
  ``∝ exp(gamma (R - t) Hbar_k / R)`` (``Hbar_k`` the cluster's mean estimated entropy, ``t`` the
  round, ``R`` the horizon: more heterogeneous-balanced clusters first, annealed to uniform over
  clusters), a cluster holding no more draws than members; each cluster's draws are its members
  chosen uniformly without replacement.

As released, the first ``floor(n / m)`` rounds visit the clients in id order (``m`` a round) so that
each reports once, and when the estimated entropies vary much (variance at least
``variance_threshold``) a round falls back to clustered sampling (Algorithm 2 of paper 000, on the
same tree, one client drawn per row). See docs/selection-systems.md for where this follows the authors'
code (CityChan/HiCS-FL) and where it departs. Biased by design (``E[w_i] != p_i``).

The state is quadratic in ``n`` (the dissimilarities), as clustered sampling by similarity:
``max_clients`` caps ``n`` (default 20000).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import BoolArray, DTypeTable, FloatArray, IntArray
from fedsample._invariants import check_mask, check_round, check_values
from fedsample._memory import check_fits_in_memory
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.designs import RowDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._state import SamplerState, check_sampling_fields
from fedsample.samplers.schemes.clustered import integer_masses
from fedsample.samplers.selectors.rules import RuleSampler, feedback_availability, participant_weights
from fedsample.samplers.similarity.distances import update_distances
from fedsample.samplers.similarity.rows import allocate_clustered_rows, cut_into_clusters, rows_linkage, ward_linkage
from fedsample.samplers.similarity.sampler import MAX_SIMILARITY_CLIENTS
from fedsample.serialization import plain_data

__all__ = ["HiCSFLSampler", "HiCSState", "cut_into_clusters", "estimated_entropies", "rows_linkage"]

# The most classes a model may have here; an entropy in nats over C classes is at most log C, so a saved
# state's beyond log(MAX_CLASSES) (a hair of rounding allowed) is no entropy (1e308 overflowed their variance).
MAX_CLASSES = 10**6
ENTROPY_LIMIT = math.log(MAX_CLASSES) * (1.0 + 1e-12)


def estimated_entropies(scores: FloatArray, temperature: float) -> FloatArray:
    """``entropy(softmax(scores_i / T))`` of each row of ``scores`` (natural log; a stable softmax)."""
    z = np.asarray(scores, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    out: FloatArray = -terms.sum(axis=1)
    return out


@plain_data
@dataclass(frozen=True, eq=False)
class HiCSState(SamplerState):
    """HiCS-FL's state: :class:`SamplerState`'s fields, and

    Attributes
    ----------
    masses:
        Integers ``q_i`` with ``p_i = q_i / sum(q)`` (the fallback's rows are allocated in them).
    vectors:
        ``(n, C h + C)``: each client's last output-layer update ``[W_i, b_i]`` (zero before it reports).
    entropies:
        ``H_i``, the estimated entropies (``log C`` for a client that has not reported).
    angles:
        ``(n, n)`` arccos distances of ``vectors`` (0 to and from a client that has not reported).
    clusters:
        Each client's cluster (``0 .. M-1``) from the current tree.
    rows:
        The fallback's clustered-sampling rows (Algorithm 2 of 000) from the same tree.
    available:
        Who may be selected.
    round:
        Rounds of feedback read (the round about to be drawn).
    """

    masses: IntArray
    vectors: FloatArray
    entropies: FloatArray
    angles: FloatArray
    clusters: IntArray
    rows: RowDesign
    available: BoolArray
    round: int = 0

    _array_dtypes: ClassVar[DTypeTable] = {
        **dict.fromkeys(("vectors", "entropies", "angles"), np.float64),
        **dict.fromkeys(("masses", "clusters"), np.int64),
        "available": np.bool_,
    }

    def check_invariants(self) -> None:
        owner = "HiCSState"
        n, m = check_sampling_fields(owner, self.importances, self.num_sampled, at_most_clients=True)
        check_values(owner, "masses", self.masses, shape=(n,), low=1, integer=True)
        check_values(owner, "vectors", self.vectors, shape=(n, None))
        check_values(owner, "entropies", self.entropies, shape=(n,), low=0.0, high=ENTROPY_LIMIT)
        check_values(owner, "angles", self.angles, shape=(n, n), low=0.0, high=math.pi)
        check_values(owner, "clusters", self.clusters, shape=(n,), low=0, high=max(n - 1, 0), integer=True)
        if not isinstance(self.rows, RowDesign) or self.rows.num_clients != n or int(self.rows.row_counts.sum()) != m:
            raise invalid("rows", owner, f"a RowDesign over {n} clients with {m} draws", self.rows)
        check_mask(owner, "available", self.available, n)
        check_round(owner, "round", self.round)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class HiCSFLSampler(RuleSampler[HiCSState]):
    """HiCS-FL: clusters of clients by output-layer update and estimated heterogeneity, sampled by
    cluster (see the module doc). Biased.

    Hyperparameters (the authors' config keys in brackets, defaults from their CIFAR-10 configs)
    -------------------------------------------------------------------------------------------
    num_classes:
        ``C`` [``n_classes``, 10]: the output layer's width.
    output_inputs:
        ``h``: the output layer's input width. The last ``C h + C`` entries of each update vector are
        its weight (``C x h``, row-major) and bias, as the engine and the Flower strategy lay out a
        model whose last parameters are a ``Linear(h, C)``'s. ``None`` (default): the engine takes it
        from the model (:meth:`for_model`, which also refuses a value that does not match the model's
        output layer); a loop of your own sets it, or calls :meth:`for_model` with its parameters'
        shapes (an update read while it is ``None`` is refused, naming this parameter).
    estimator:
        ``"weight"`` (default, the released code: row means of the weight's update) or ``"bias"``
        (the paper: the bias's update).
    temperature:
        ``T`` [``temp``, 0.001].
    entropy_weight:
        ``lambda`` [``lambda``, 10]: the weight of ``|H_i - H_j|`` in the dissimilarity.
    annealing:
        ``gamma`` [``gamma``, 4]: the clusters' sampling weights are ``exp(gamma (R - t) Hbar / R)``.
    horizon:
        ``R`` [``epochs``, 500]: the rounds of training the annealing runs over.
    num_clusters:
        ``M`` [``M``, 10]: clusters (at most ``n``).
    variance_threshold:
        [0.1, a literal in the released code] cluster-level sampling while the estimated entropies'
        variance is below it, clustered sampling (Algorithm 2 of 000) otherwise.
    clustering:
        ``"rows"`` (default, the released code: Ward on the rows of the dissimilarity matrix taken as
        points) or ``"distances"`` (Ward on the dissimilarities themselves, as
        ``clustered-similarity`` does).
    refresh:
        ``"every-round"`` (default) keeps each returned client's latest update; ``"warm-up"`` only the
        first one (the released code does so when the clients' Dirichlet concentrations differ, as in
        all of the paper's experiments).
    aggregation:
        ``"average"`` (default, the released plain mean of the chosen models) or ``"size"``.
    max_clients:
        The largest federation accepted (default 20000: the state holds ``8 n^2`` bytes).
    """

    name = "hics-fl"
    needs_updates = True
    num_classes: int = 10
    output_inputs: int | None = None
    estimator: Literal["weight", "bias"] = "weight"
    temperature: float = 0.001
    entropy_weight: float = 10.0
    annealing: float = 4.0
    horizon: int = 500
    num_clusters: int = 10
    variance_threshold: float = 0.1
    clustering: Literal["rows", "distances"] = "rows"
    refresh: Literal["every-round", "warm-up"] = "every-round"
    aggregation: Literal["average", "size"] = "average"
    max_clients: int = MAX_SIMILARITY_CLIENTS
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "num_classes": Interval(int, 2, MAX_CLASSES, closed="both"),
        "output_inputs": NoneOr(Interval(int, 1, 10**8, closed="both")),
        "estimator": Options(("weight", "bias")),
        "temperature": Interval(float, 1e-12, 1e12, closed="both"),
        "entropy_weight": Interval(float, 0, 1e12, closed="both"),
        "annealing": Interval(float, 0, 1e3, closed="both"),
        "horizon": Interval(int, 1, 10**9, closed="both"),
        "num_clusters": Interval(int, 1, 10**6, closed="both"),
        "variance_threshold": Interval(float, 0, None, closed="left"),
        "clustering": Options(("rows", "distances")),
        "refresh": Options(("every-round", "warm-up")),
        "aggregation": Options(("average", "size")),
        "max_clients": Interval(int, 1, None, closed="left"),
    }

    def init(self, federation: Federation, num_sampled: int) -> HiCSState:
        n = federation.num_clients
        m = self._check_num_sampled(num_sampled, upper=n)
        if n > self.max_clients:
            raise FedsampleError(
                f"The 'federation' parameter of {type(self).__name__}.init must have at most {self.max_clients} "
                f"clients (max_clients: the dissimilarity matrix and Ward's tree are quadratic in n). Got {n} "
                "clients instead.",
                parameter="federation",
            )
        # The dissimilarities, the Gram matrix and distances of their rows, Ward's condensed input: ~5 n^2 floats.
        what = f"the {n} x {n} dissimilarities HiCS-FL holds and clusters"
        check_fits_in_memory("federation", f"{type(self).__name__}.init", f"{n} clients", 40.0 * n * n, what)
        masses = integer_masses(federation, m)
        angles = np.zeros((n, n))
        entropies = np.full(n, math.log(self.num_classes))
        clusters, rows = self._clustering(angles, entropies, masses, m)
        return HiCSState(
            importances=federation.importances,
            num_sampled=m,
            masses=masses,
            vectors=np.zeros((n, 0)),
            entropies=entropies,
            angles=angles,
            clusters=clusters,
            rows=rows,
            available=np.ones(n, dtype=bool),
        )

    def for_model(self, parameter_shapes: Sequence[Sequence[int]]) -> HiCSFLSampler:
        """This sampler with ``output_inputs`` read from a model whose parameters have, in order,
        ``parameter_shapes``: the last two must be its output layer's weight ``(C, h)`` and bias ``(C,)``
        (the end of every update vector), with ``C`` equal to ``num_classes``, and ``h`` equal to
        ``output_inputs`` when that is set. The engine calls it before the first round.

        >>> HiCSFLSampler(num_classes=10).for_model([(50, 64), (50,), (10, 50), (10,)]).output_inputs
        50
        """
        owner = f"{type(self).__name__}.for_model"
        shapes = [tuple(int(size) for size in shape) for shape in parameter_shapes]
        weight, bias = shapes[-2:] if len(shapes) >= 2 else ((), ())
        if len(weight) != 2 or len(bias) != 1 or weight[0] != bias[0]:
            rule = "read from a model whose last parameters are its output layer's weight (C, h) and bias (C,)"
            raise invalid("output_inputs", owner, rule, f"a model whose last parameters have shapes {shapes[-2:]}")
        classes, inputs = weight
        layer = f"the model's output layer is a Linear({inputs}, {classes})"
        if classes != self.num_classes:
            raise invalid("num_classes", owner, f"the model's output width, {classes} ({layer})", self.num_classes)
        if self.output_inputs is not None and self.output_inputs != inputs:
            rule = f"the input width of the model's output layer, {inputs} ({layer}), or None to read it from the model"
            raise invalid("output_inputs", owner, rule, self.output_inputs)
        return replace(self, output_inputs=inputs)

    @property
    def min_update_dimension(self) -> int:
        """The shortest update vector it reads: the output layer's ``C h + C`` entries (0 while ``h`` is unset)."""
        return 0 if self.output_inputs is None else self.num_classes * (self.output_inputs + 1)

    def warmup_rounds(self, state: HiCSState) -> int:
        """``floor(n / m)``: the rounds that visit the clients in id order."""
        return int(state.importances.size // state.num_sampled)

    def select(self, state: HiCSState, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        m, t = state.num_sampled, state.round
        if t < self.warmup_rounds(state):  # clients t m .. (t + 1) m - 1
            block = np.arange(t * m, (t + 1) * m, dtype=np.int64)
            clients = block[state.available[block]]
        elif float(np.var(state.entropies)) < self.variance_threshold:
            clients = self._cluster_draw(state, rng)
        else:
            drawn, _ = state.rows.draw(rng)
            clients = np.sort(drawn)
        return clients, participant_weights(state.importances, clients, self.aggregation)

    def cluster_probabilities(self, state: HiCSState) -> FloatArray:
        """Each cluster's probability per draw before any cluster fills: ``∝ exp(gamma max(R - t, 0) Hbar_k / R)``."""
        count = int(state.clusters.max()) + 1
        sizes = np.bincount(state.clusters, minlength=count)
        mean = np.bincount(state.clusters, weights=state.entropies, minlength=count) / np.maximum(sizes, 1)
        # Past the horizon the anneal has reached uniform and stays there (not reversed).
        logits = self.annealing * max(self.horizon - state.round, 0) * mean / self.horizon
        weights = np.exp(logits - logits.max())
        out: FloatArray = weights / weights.sum()
        return out

    def _cluster_draw(self, state: HiCSState, rng: np.random.Generator) -> IntArray:
        """``m`` draws of a cluster (a full cluster is drawn no more), then each cluster's members uniformly."""
        probabilities = self.cluster_probabilities(state)
        members = [np.flatnonzero((state.clusters == k) & state.available) for k in range(probabilities.size)]
        room = np.array([ids.size for ids in members])
        counts = np.zeros(probabilities.size, dtype=np.int64)
        for _ in range(min(state.num_sampled, int(room.sum()))):
            open_ = counts < room
            p = np.where(open_, probabilities, 0.0)
            if not p.sum() > 0:  # the open clusters' weights underflowed: draw among them uniformly
                p = open_.astype(np.float64)
            k = int(rng.choice(p.size, p=p / p.sum()))
            counts[k] += 1
        chosen = [rng.choice(ids, size=c, replace=False) for ids, c in zip(members, counts, strict=True) if c]
        return np.sort(np.concatenate(chosen)).astype(np.int64) if chosen else np.zeros(0, dtype=np.int64)

    def update(self, state: HiCSState, feedback: Feedback) -> HiCSState:
        """Keep the returned clients' output-layer updates (all rounds, or the warm-up's only), re-estimate
        their entropies and dissimilarities, and re-cluster."""
        owner = f"{type(self).__name__}.update"
        available = feedback_availability(feedback, state.available)
        keep = self.refresh == "every-round" or state.round < self.warmup_rounds(state)
        clients, layers = self._received(state, feedback, owner) if keep else (np.zeros(0, np.int64), None)
        if layers is None or clients.size == 0:
            return replace(state, available=available, round=state.round + 1)
        vectors = state.vectors if state.vectors.shape[1] else np.zeros((state.importances.size, layers.shape[1]))
        vectors = np.array(vectors, copy=True)
        vectors[clients] = layers
        entropies = state.entropies.copy()
        entropies[clients] = estimated_entropies(self._scores(layers), self.temperature)
        angles = update_distances(state.angles, vectors, clients, similarity="arccos")
        silent = ~np.any(vectors != 0, axis=1)  # the released code's distance to a zero update is 0
        angles[silent, :] = 0.0
        angles[:, silent] = 0.0
        clusters, rows = self._clustering(angles, entropies, state.masses, state.num_sampled)
        return replace(
            state,
            vectors=vectors,
            entropies=entropies,
            angles=angles,
            clusters=clusters,
            rows=rows,
            available=available,
            round=state.round + 1,
        )

    def _scores(self, layers: FloatArray) -> FloatArray:
        """The estimator's ``s_i`` from ``[W_i, b_i]``: the weight's row means, or the bias."""
        c = self.num_classes
        if self.estimator == "bias":
            return layers[:, -c:]
        out: FloatArray = layers[:, :-c].reshape(layers.shape[0], c, -1).mean(axis=2)
        return out

    def _clustering(
        self, angles: FloatArray, entropies: FloatArray, masses: IntArray, num_sampled: int
    ) -> tuple[IntArray, RowDesign]:
        """The clusters and the fallback's rows from one Ward tree of the dissimilarities."""
        rho = angles + self.entropy_weight * np.abs(entropies[:, None] - entropies[None, :])
        tree = rows_linkage(rho) if self.clustering == "rows" else ward_linkage(rho)
        clusters = cut_into_clusters(tree, min(self.num_clusters, masses.size))
        return clusters, allocate_clustered_rows(tree, masses, num_sampled).design

    def _received(self, state: HiCSState, feedback: Feedback, owner: str) -> tuple[IntArray, FloatArray | None]:
        """The returned clients with finite update vectors, and their output layers ``[W_i, b_i]``."""
        if feedback.updates is None:
            if feedback.clients.size == 0:
                return np.zeros(0, dtype=np.int64), None
            raise invalid("feedback", owner, "a Feedback with 'updates' (HiCS-FL reads the output layer)", feedback)
        c, h = self.num_classes, self.output_inputs
        if h is None:
            rule = (
                "an int >= 1 to read update vectors: the output layer's input width h (its weight and bias "
                "are the last C h + C entries of each update)"
            )
            raise invalid("output_inputs", owner, rule, h)
        width = c * h + c
        updates = feedback.updates
        if updates.shape[1] < width or (state.vectors.shape[1] not in (0, width)):
            rule = f"update vectors of at least num_classes * output_inputs + num_classes = {width} entries"
            raise invalid("feedback", owner, rule, f"vectors of {updates.shape[1]} entries")
        layers = updates[:, updates.shape[1] - width :]
        finite = np.all(np.isfinite(layers), axis=1)
        return feedback.clients[finite], np.asarray(layers[finite], dtype=np.float64)
