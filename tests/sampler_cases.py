"""Shared test inputs: one case per registered sampler, and the federations the suites run on.

Test modules import this file by name: ``tests/`` is on ``sys.path`` because it holds a
``conftest.py`` and no ``__init__.py`` (pytest's default "prepend" import mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedsample import (
    BinomialSampler,
    ClusteredSampler,
    FedAvgUniformSampler,
    Federation,
    Feedback,
    FullSampler,
    MDSampler,
    PoissonSampler,
    RowDesign,
    Sampler,
    Selection,
    SizeClusteredSampler,
    UniformSampler,
)
from fedsample.samplers import (
    AdaptiveOSMDSampler,
    AFLSampler,
    AvareSampler,
    BernoulliSampler,
    DeltaSampler,
    DivFLSampler,
    FedCBSSampler,
    FedCorSampler,
    FedSamplingSampler,
    FixedRateSampler,
    GroupClusteredSampler,
    HiCSFLSampler,
    HighLossSampler,
    MABSSampler,
    NumberOfSamplesSampler,
    OortSampler,
    OptimalDistributionSampler,
    OptimalSampler,
    OSMDSampler,
    PowerOfChoiceSampler,
    RoundRobinSampler,
    SequentialSampler,
    SimilarityClusteredSampler,
    SystematicSampler,
    UniformISSampler,
    VRBSampler,
    size_clustered_design,
)
from fedsample.samplers.population.samplers import (
    PopulationClusteredSampler,
    PopulationMDSampler,
    PopulationUniformSampler,
)

SamplerFactory = Callable[[Federation, int], Sampler[Any]]


def mixed_rows(federation: Federation, num_sampled: int) -> np.ndarray:
    """A valid clustered row matrix (000, Prop. 1) that differs from Algorithm 1's.

    The average of Algorithm 1's rows and MD's rows (every row equal to ``p``): both have rows
    summing to one (eq. 7) and columns summing to ``m p_i`` (eq. 8), so their average does too.
    Every client sits in every row, which exercises the general paths of the exact statistics.
    """
    masses = federation.importance_masses
    if masses is None:
        masses = np.maximum(np.round(federation.importances * 2.0**30), 1).astype(np.int64)
    algorithm_1 = size_clustered_design(masses, num_sampled).dense_rows()
    return 0.5 * algorithm_1 + 0.5 * np.broadcast_to(federation.importances, algorithm_1.shape)


# Case id -> factory building the sampler for a federation and m (ClusteredSampler needs rows).
SAMPLER_FACTORIES: dict[str, SamplerFactory] = {
    "full": lambda federation, m: FullSampler(),
    "md": lambda federation, m: MDSampler(),
    "uniform": lambda federation, m: UniformSampler(),
    "fedavg-uniform": lambda federation, m: FedAvgUniformSampler(),
    "poisson": lambda federation, m: PoissonSampler(),
    "poisson-capped": lambda federation, m: PoissonSampler(capped=True),
    "binomial": lambda federation, m: BinomialSampler(),
    "clustered-size": lambda federation, m: SizeClusteredSampler(),
    "clustered": lambda federation, m: ClusteredSampler(rows=mixed_rows(federation, m)),
    # Algorithm 1's rows over clients laid out by group (three interleaved groups).
    "clustered-groups": lambda federation, m: GroupClusteredSampler(groups=np.arange(federation.num_clients) % 3),
    # Algorithm 2 of 000: learns rows from the update vectors (make_case warms it up).
    "clustered-similarity": lambda federation, m: SimilarityClusteredSampler(),
    # McMahan et al.'s FedAvg in practice: weights renormalised over the sampled clients.
    "fedavg-uniform-normalized": lambda federation, m: FedAvgUniformSampler(normalize=True),
    # FedSampling (004) with truthful size answers (alpha = 1) and a threshold above every size:
    # N~ = N, so the exact statistics of its design hold; "fedsampling-private" answers with the
    # paper's M = 300 and eps = 3 (Monte Carlo only).
    "fedsampling": lambda federation, m: FedSamplingSampler(probability=1.0, size_threshold=2**40),
    "fedsampling-private": lambda federation, m: FedSamplingSampler(),
    "fixed-rate": lambda federation, m: FixedRateSampler(rate=0.3),
    "fixed-rate-average": lambda federation, m: FixedRateSampler(rate=0.3, aggregation="average"),
    # Independent inclusions with any q (003, App. A.8): water-filled m p_i, m/n, or a given vector.
    "bernoulli": lambda federation, m: BernoulliSampler(),
    "bernoulli-uniform": lambda federation, m: BernoulliSampler(rule="uniform"),
    "bernoulli-given": lambda federation, m: BernoulliSampler(
        inclusion=tuple(np.linspace(0.2, 1.0, federation.num_clients).tolist())
    ),
    # Optimal sampling (Chen et al.): q from reported update norms; make_case warms it up with every
    # client reporting (a two-phase round with all clients as candidates).
    "optimal": lambda federation, m: OptimalSampler(),
    "optimal-protocol": lambda federation, m: OptimalSampler(mode="protocol"),
    # The protocol with K candidates drawn uniformly among the available clients (K between m and n).
    "optimal-candidates": lambda federation, m: OptimalSampler(
        mode="protocol", candidates=min(federation.num_clients, m + 1)
    ),
    # Paper 001's full-information Optimal: K draws from p proportional to lambda ||g||.
    "optimal-distribution": lambda federation, m: OptimalDistributionSampler(),
    "optimal-distribution-floor": lambda federation, m: OptimalDistributionSampler(alpha=0.4),
    # m distinct clients with P(i in S) = min(1, c p_i): systematic sampling over a fixed layout.
    "systematic": lambda federation, m: SystematicSampler(),
    "systematic-given": lambda federation, m: SystematicSampler(order="given"),
}

# Samplers that learn a distribution from bandit feedback (paper 001), each drawn with replacement
# (case "<name>") and without (case "<name>-noreplace"). OSMD's eta suits the contract federation's
# feedback (exponents of order 1 in the first rounds); the others run with their defaults.
_DISTRIBUTION_SAMPLERS: dict[str, Callable[..., Sampler[Any]]] = {
    "osmd": lambda **kw: OSMDSampler(eta=0.01, **kw),
    "adaptive-osmd": lambda **kw: AdaptiveOSMDSampler(**kw),
    "uniform-is": lambda **kw: UniformISSampler(**kw),
    "mabs": lambda **kw: MABSSampler(**kw),
    "vrb": lambda **kw: VRBSampler(**kw),
    "avare": lambda **kw: AvareSampler(**kw),
    # Paper 001's released variants: MABS's step derived from the horizon, VRB's mixture with uniform.
    "mabs-horizon": lambda **kw: MABSSampler(step="horizon", horizon=50, **kw),
    "vrb-mixture": lambda **kw: VRBSampler(form="mixture", **kw),
    # DELTA (NeurIPS 2023): the released score from the update vectors, and the paper's form.
    "delta": lambda **kw: DeltaSampler(**kw),
    "delta-paper": lambda **kw: DeltaSampler(form="paper", **kw),
}
for _name, _build in _DISTRIBUTION_SAMPLERS.items():
    SAMPLER_FACTORIES[_name] = lambda federation, m, _build=_build: _build(replace=True)
    SAMPLER_FACTORIES[f"{_name}-noreplace"] = lambda federation, m, _build=_build: _build(replace=False)
DISTRIBUTION_CASES = [c for name in _DISTRIBUTION_SAMPLERS for c in (name, f"{name}-noreplace")]
WITHOUT_REPLACEMENT_CASES = {c for c in DISTRIBUTION_CASES if c.endswith("-noreplace")}

# Client-selection systems (issue 15): biased rules that learn from losses, round times and update
# vectors, drawing distinct clients among the available ones; Monte Carlo covers their statistics.
_SELECTION_SYSTEMS: dict[str, Callable[[], Sampler[Any]]] = {
    "oort": lambda: OortSampler(),
    "power-of-choice": lambda: PowerOfChoiceSampler(),
    "power-of-choice-d": lambda: PowerOfChoiceSampler(num_candidates=5, aggregation="size"),
    # The paper's variants that read a first phase: the candidates' losses at the global model.
    "power-of-choice-pow-d": lambda: PowerOfChoiceSampler(variant="pow-d"),
    "power-of-choice-cpow-d": lambda: PowerOfChoiceSampler(variant="cpow-d", loss_batch=2),
    "divfl": lambda: DivFLSampler(),
    "divfl-sketch-assignment": lambda: DivFLSampler(projection_dim=3, aggregation="assignment"),
    # The default reads full-batch gradients (Feedback.gradients); this one the update vectors.
    "divfl-update": lambda: DivFLSampler(representative="update"),
    "high-loss": lambda: HighLossSampler(),
    "round-robin": lambda: RoundRobinSampler(),
    # FLSim's selectors by sample count (successive sampling) and in id order.
    "number-of-samples": lambda: NumberOfSamplesSampler(),
    "sequential": lambda: SequentialSampler(),
    # Active Federated Learning (Goetz et al. 2019): the paper's alphas, and every client drawn actively.
    "afl": lambda: AFLSampler(),
    "afl-no-exclusion": lambda: AFLSampler(zero_fraction=0.0, uniform_fraction=0.0, inverse_temperature=1.0),
    # FedCor (CVPR 2022): two-phase (every client's loss before and after each random round); at its
    # defaults the warm-up draws at random, "fedcor-fitted" is fitted after round 1 and draws its greedy
    # choice (deterministic) from round 2 on, refitting at round 5.
    "fedcor": lambda: FedCorSampler(),
    "fedcor-fitted": lambda: FedCorSampler(
        warmup_rounds=1, refit_interval=5, warmup_iterations=20, refit_iterations=5, aggregation="size"
    ),
    # HiCS-FL (NeurIPS 2024): the synthetic updates (4 entries) are a Linear(1, 2) output layer; after the
    # 2 warm-up rounds, cluster-level sampling (released clustering); "hics-fl-fallback" always falls
    # back to clustered sampling's rows (Ward on the dissimilarities, the paper's bias estimator).
    "hics-fl": lambda: HiCSFLSampler(num_classes=2, output_inputs=1, num_clusters=3, horizon=20),
    "hics-fl-fallback": lambda: HiCSFLSampler(
        num_classes=2, output_inputs=1, variance_threshold=0.0, clustering="distances", estimator="bias"
    ),
}
for _name, _system in _SELECTION_SYSTEMS.items():
    SAMPLER_FACTORIES[_name] = lambda federation, m, _system=_system: _system()


def label_counts(federation: Federation, num_classes: int = 3) -> np.ndarray:
    """Made-up ``(n, C)`` label histograms summing to each client's size: client ``i`` holds three
    quarters of its samples in class ``i mod C`` and the rest in the next class (Fed-CBS reads them)."""
    sizes = federation.sizes.astype(np.int64)
    rows = np.arange(sizes.size)
    counts = np.zeros((sizes.size, num_classes), dtype=np.int64)
    counts[rows, rows % num_classes] = sizes - sizes // 4
    counts[rows, (rows + 1) % num_classes] += sizes // 4
    return counts


# Fed-CBS (ICML 2023): the clients' label histograms are a hyperparameter (the config's "federation").
SAMPLER_FACTORIES["fedcbs"] = lambda federation, m: FedCBSSampler(label_counts=label_counts(federation))
SAMPLER_FACTORIES["fedcbs-no-exploration"] = lambda federation, m: FedCBSSampler(
    label_counts=label_counts(federation), exploration=0.0, exponent_step=0.0, aggregation="average"
)
SELECTION_SYSTEM_CASES = set(_SELECTION_SYSTEMS) | {"fedcbs", "fedcbs-no-exploration"}

# The population samplers (fedsample.samplers.population.samplers, for 10^8 clients given as sizes), run on a
# Federation with size importances: MD and Algorithm 1's rows with replacement, uniform without.
# Their designs are their states (no closed-form statistics): Monte Carlo covers them.
_POPULATION_SAMPLERS: dict[str, Callable[[], Sampler[Any]]] = {
    "population-md": lambda: PopulationMDSampler(),
    "population-uniform": lambda: PopulationUniformSampler(),
    "population-clustered-size": lambda: PopulationClusteredSampler(empty_rows="skip"),
}
for _name, _population in _POPULATION_SAMPLERS.items():
    SAMPLER_FACTORIES[_name] = lambda federation, m, _population=_population: _population()
POPULATION_CASES = set(_POPULATION_SAMPLERS)

CASES = list(SAMPLER_FACTORIES)
# Samplers whose update returns a new state; make_case warms them up with a few rounds of
# synthetic feedback so that the suites see learned states (uniform-is only counts rounds).
# A new learning sampler goes here after adding its factory above.
# The data-level samplers count rounds and accumulate their size estimates.
DATA_LEVEL_CASES = {"fedsampling", "fedsampling-private", "fixed-rate", "fixed-rate-average"}
# Two-phase samplers: the round's candidates report norms to update() before sample() draws.
TWO_PHASE_CASES = {
    "optimal",
    "optimal-protocol",
    "optimal-candidates",
    "optimal-distribution",
    "optimal-distribution-floor",
    "power-of-choice-pow-d",
    "power-of-choice-cpow-d",
    "fedcor",
    "fedcor-fitted",
}
LEARNING_CASES = set(DISTRIBUTION_CASES) | {"clustered-similarity"} | DATA_LEVEL_CASES | TWO_PHASE_CASES
LEARNING_CASES |= SELECTION_SYSTEM_CASES
# Designs without closed-form statistics (successive sampling without replacement): the exact
# statistics suites skip them and Monte Carlo covers them.
NO_CLOSED_FORM_CASES = set(WITHOUT_REPLACEMENT_CASES) | {
    "fedavg-uniform-normalized",
    "fedsampling-private",
    "fixed-rate",
    "fixed-rate-average",
}
NO_CLOSED_FORM_CASES |= SELECTION_SYSTEM_CASES | POPULATION_CASES
EXACT_CASES = [c for c in CASES if c not in NO_CLOSED_FORM_CASES]
# fedsampling-private: E[K / N~] differs from K / N (and the estimate is clamped); the naive
# data-level variants divide by random totals.
BIASED_CASES = {
    "fedavg-uniform",
    "fedavg-uniform-normalized",
    "fedsampling-private",
    "fixed-rate",
    "fixed-rate-average",
}
BIASED_CASES |= SELECTION_SYSTEM_CASES
UNBIASED_CASES = [c for c in CASES if c not in BIASED_CASES]
# Schemes that draw distinct clients without replacement or by inclusion need m <= n.
NEEDS_M_AT_MOST_N = {
    "uniform",
    "fedavg-uniform",
    "binomial",
    "poisson-capped",
    "bernoulli",
    "bernoulli-uniform",
    "bernoulli-given",
    "optimal",
    "optimal-protocol",
    "optimal-candidates",
    "systematic",
    "systematic-given",
} | WITHOUT_REPLACEMENT_CASES
NEEDS_M_AT_MOST_N |= SELECTION_SYSTEM_CASES | {"population-uniform"}
# Samplers whose selection is the same every round whatever the seed.
DETERMINISTIC_CASES = {"full", "sequential", "fedcor-fitted"}
# Rounds of synthetic feedback that make_case feeds a learning sampler before handing its state out.
WARM_UP_ROUNDS = 4


def client_norms(num_clients: int) -> np.ndarray:
    """Per-client norms of the synthetic feedback: unequal (1 to 4), so that learning moves ``p``."""
    return 1.0 + np.arange(num_clients) % 4


def synthetic_feedback(
    round_index: int,
    selection: Selection,
    norms: np.ndarray,
    *,
    returned: np.ndarray | None = None,
    dimension: int = 4,
) -> Feedback:
    """The feedback of a round in which the selected clients (or only ``returned`` among them) send
    update and gradient norms ``norms[i]``, loss ``norms[i] / 2`` and an update vector (and a
    full-batch gradient, the same) of norm ``norms[i]`` along axis ``i mod dimension``, with
    ``local_lr = 1`` and ``local_steps = 1``: the gradient scale is then ``norms[i]`` and paper 001's
    feedback ``a_i = lambda_i^2 norms[i]^2``."""
    ids = np.unique(selection.clients) if returned is None else np.unique(returned)
    updates = np.zeros((ids.size, dimension))
    updates[np.arange(ids.size), ids % dimension] = norms[ids]
    return Feedback(
        round=round_index,
        selection=selection,
        clients=ids,
        update_norms=norms[ids],
        updates=updates,
        gradients=updates,
        losses=norms[ids] / 2,
        gradient_norms=norms[ids],
        local_lr=1.0,
        local_steps=1,
    )


def next_feedback(sampler: Sampler[Any], state: Any, t: int, rng: np.random.Generator, norms: np.ndarray) -> Feedback:
    """Round ``t``'s synthetic feedback for ``sampler`` at ``state``: for a two-phase sampler its
    candidates' report (every client a candidate, weight ``p_i``), read before its draw; for any
    other, the feedback of its own draw. ``t`` must follow the rounds ``state`` has read."""
    if sampler.two_phase:
        candidates = Selection(clients=np.arange(norms.size), weights=sampler.importances(state))
        return synthetic_feedback(t, candidates, norms)
    return synthetic_feedback(t, sampler.sample(state, rng), norms)


def warm_up(sampler: Sampler[Any], state: Any, rounds: int = WARM_UP_ROUNDS, *, seed: int = 314) -> Any:
    """``state`` after ``rounds`` rounds of sampling and synthetic feedback (fixed seed)."""
    rng = np.random.default_rng(seed)
    norms = client_norms(int(sampler.importances(state).size))
    for t in range(rounds):
        if sampler.two_phase:
            # Every client is a candidate (weight p_i) and reports its norm before the round's draw.
            n = norms.size
            candidates = Selection(clients=np.arange(n), weights=sampler.importances(state))
            state = sampler.update(state, synthetic_feedback(t, candidates, norms))
            continue
        selection = sampler.sample(state, rng)
        state = sampler.update(state, synthetic_feedback(t, selection, norms))
    return state


def make_case(case: str, federation: Federation, num_sampled: int) -> tuple[Sampler[Any], Any]:
    """The sampler of ``case`` and its state on ``federation`` with ``num_sampled`` clients per round
    (for a learning sampler, the state after :data:`WARM_UP_ROUNDS` rounds of synthetic feedback)."""
    sampler = SAMPLER_FACTORIES[case](federation, num_sampled)
    state = sampler.init(federation, num_sampled)
    if case in LEARNING_CASES:
        state = warm_up(sampler, state)
    return sampler, state


def feasible(case: str, federation: Federation, num_sampled: int) -> bool:
    """Whether ``case`` accepts ``num_sampled`` on ``federation`` (m <= n, and m p_i <= 1 for Poisson)."""
    if case in NEEDS_M_AT_MOST_N and num_sampled > federation.num_clients:
        return False
    if case in POPULATION_CASES:  # a population's importances are its sizes (init refuses others)
        masses = federation.importance_masses
        return masses is not None and bool(np.array_equal(masses, federation.sizes))
    if case in ("fedsampling", "fedsampling-private"):
        # data-level sampling optimises p_i = n_i / M only (the sampler rejects other importances)
        return bool(np.allclose(federation.importances, federation.sizes / federation.total_size, rtol=1e-9))
    if case == "poisson":
        masses = federation.importance_masses
        if masses is not None:
            return num_sampled * int(masses.max()) <= int(masses.sum())
        return num_sampled * float(federation.importances.max()) <= 1.0
    return True


# The federation of the contract suite: unequal sizes, feasible for every sampler at m = 3.
CONTRACT_SIZES = (5, 1, 3, 8, 2, 6, 4, 1)
CONTRACT_NUM_SAMPLED = 3


def contract_federation() -> Federation:
    return Federation.from_sizes(CONTRACT_SIZES)


def random_sizes(seed: int, num_clients: int, *, low: int = 1, high: int = 50) -> np.ndarray:
    """Client sizes drawn uniformly from ``[low, high)`` with a fixed seed."""
    return np.random.default_rng(seed).integers(low, high, size=num_clients)


def stationary_run(
    sampler: Sampler[Any], federation: Federation, num_sampled: int, a: np.ndarray, rounds: int, *, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``rounds`` rounds of a stationary problem: every returned client reports paper 001's
    feedback ``a_i`` exactly (update norm ``sqrt(a_i) / lambda_i`` with ``local_lr = 1`` and one
    local step). Returns the distribution before each round and after the last,
    ``(rounds + 1, n)``, and how many times each client was drawn."""
    state = sampler.init(federation, num_sampled)
    norms = np.sqrt(a) / federation.importances
    rng = np.random.default_rng(seed)
    history = [sampler.probabilities(state)]
    drawn = np.zeros(federation.num_clients, dtype=np.int64)
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        drawn += np.bincount(selection.clients, minlength=federation.num_clients)
        state = sampler.update(state, synthetic_feedback(t, selection, norms))
        history.append(sampler.probabilities(state))
    return np.array(history), drawn


def unit_matrix(design: RowDesign) -> np.ndarray:
    """The integer units r'[k, i] of a row design (clustered sampling's r' of 000) as a dense (m, n) int64 matrix."""
    assert design.units is not None
    out = np.zeros((design.num_rows, design.num_clients), dtype=np.int64)
    rows = np.repeat(np.arange(design.num_rows), np.diff(design.indptr))
    np.add.at(out, (rows, design.indices), design.units)
    return out
