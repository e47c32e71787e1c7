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
    FullSampler,
    MDSampler,
    PoissonSampler,
    Sampler,
    SizeClusteredSampler,
    UniformSampler,
)
from fedsample.samplers import size_clustered_design

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
}
CASES = list(SAMPLER_FACTORIES)
BIASED_CASES = {"fedavg-uniform"}
UNBIASED_CASES = [c for c in CASES if c not in BIASED_CASES]
# Schemes that draw distinct clients without replacement or by inclusion need m <= n.
NEEDS_M_AT_MOST_N = {"uniform", "fedavg-uniform", "binomial", "poisson-capped"}
# Samplers whose selection is the same every round whatever the seed.
DETERMINISTIC_CASES = {"full"}


def make_case(case: str, federation: Federation, num_sampled: int) -> tuple[Sampler[Any], Any]:
    """The sampler of ``case`` and its state on ``federation`` with ``num_sampled`` clients per round."""
    sampler = SAMPLER_FACTORIES[case](federation, num_sampled)
    return sampler, sampler.init(federation, num_sampled)


def feasible(case: str, federation: Federation, num_sampled: int) -> bool:
    """Whether ``case`` accepts ``num_sampled`` on ``federation`` (m <= n, and m p_i <= 1 for Poisson)."""
    if case in NEEDS_M_AT_MOST_N and num_sampled > federation.num_clients:
        return False
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
