"""Samplers: who joins each round, and with which aggregation weight.

Every sampler follows one contract (:class:`Sampler`): ``init(federation, num_sampled) -> state``,
``sample(state, rng) -> Selection``, ``update(state, feedback) -> state`` and
``design(state) -> Design``. :func:`make_sampler` builds one from its registry name.
"""

from fedsample.samplers._base import DesignState, Feedback, Sampler, Selection
from fedsample.samplers._registry import make_sampler, register_sampler, sampler_class, sampler_names
from fedsample.samplers.bernoulli import BinomialSampler, PoissonSampler, capped_inclusion
from fedsample.samplers.clustered import (
    ClusteredSampler,
    SizeClusteredSampler,
    check_proposition_1,
    rows_design,
    size_clustered_design,
)
from fedsample.samplers.full import FullSampler
from fedsample.samplers.multinomial import MDSampler, multinomial_design
from fedsample.samplers.uniform import FedAvgUniformSampler, UniformSampler

__all__ = [
    "BinomialSampler",
    "ClusteredSampler",
    "DesignState",
    "FedAvgUniformSampler",
    "Feedback",
    "FullSampler",
    "MDSampler",
    "PoissonSampler",
    "Sampler",
    "Selection",
    "SizeClusteredSampler",
    "UniformSampler",
    "capped_inclusion",
    "check_proposition_1",
    "make_sampler",
    "multinomial_design",
    "register_sampler",
    "rows_design",
    "sampler_class",
    "sampler_names",
    "size_clustered_design",
]
