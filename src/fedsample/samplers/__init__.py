"""Samplers: who joins each round, and with which aggregation weight.

Every sampler follows one contract (:class:`Sampler`): ``init(federation, num_sampled) -> state``,
``sample(state, rng) -> Selection``, ``update(state, feedback) -> state`` and
``design(state) -> Design``. :func:`make_sampler` builds one from its registry name.
"""

from fedsample.samplers._base import Sampler
from fedsample.samplers._feedback import Feedback
from fedsample.samplers._registry import make_sampler, register_sampler, sampler_class, sampler_names
from fedsample.samplers._selection import Selection
from fedsample.samplers._state import DesignState, SamplerState
from fedsample.samplers.adaptive.bandits import AvareSampler, MABSSampler, ScoreState, UniformISSampler, VRBSampler
from fedsample.samplers.adaptive.optimal import (
    NormState,
    OptimalDistributionSampler,
    OptimalSampler,
    optimal_distribution,
)
from fedsample.samplers.adaptive.osmd import AdaptiveOSMDSampler, AdaptiveOSMDState, DistributionState, OSMDSampler
from fedsample.samplers.adaptive.projection import project_truncated_simplex
from fedsample.samplers.schemes.bernoulli import BernoulliSampler, BinomialSampler, PoissonSampler, capped_inclusion
from fedsample.samplers.schemes.clustered import (
    ClusteredSampler,
    GroupClusteredSampler,
    SizeClusteredSampler,
    check_proposition_1,
    rows_design,
    size_clustered_design,
)
from fedsample.samplers.schemes.fedsampling import (
    DataLevelState,
    FedSamplingSampler,
    FixedRateSampler,
    estimate_moments,
    estimate_total,
)
from fedsample.samplers.schemes.full import FullSampler
from fedsample.samplers.schemes.multinomial import MDSampler, multinomial_design
from fedsample.samplers.schemes.systematic import SystematicSampler
from fedsample.samplers.schemes.uniform import FedAvgUniformSampler, UniformSampler
from fedsample.samplers.selectors.afl import AFLSampler
from fedsample.samplers.selectors.delta import DeltaSampler
from fedsample.samplers.selectors.divfl import DivFLSampler, DivFLState
from fedsample.samplers.selectors.fedcbs import FedCBSSampler, FedCBSState, qcid
from fedsample.samplers.selectors.fedcor import FedCorSampler, FedCorState
from fedsample.samplers.selectors.flsim import NumberOfSamplesSampler, SequentialSampler, SequentialState, SizesState
from fedsample.samplers.selectors.hicsfl import HiCSFLSampler, HiCSState
from fedsample.samplers.selectors.oort import OortSampler, OortState
from fedsample.samplers.selectors.power_of_choice import PowerOfChoiceSampler
from fedsample.samplers.selectors.rules import HighLossSampler, LossState, RoundRobinSampler, RoundRobinState
from fedsample.samplers.similarity.sampler import (
    SimilarityClusteredSampler,
    SimilarityState,
    adjusted_rand_index,
    cluster_labels,
    similarity_clustered_design,
)

__all__ = [
    "AFLSampler",
    "AdaptiveOSMDSampler",
    "AdaptiveOSMDState",
    "AvareSampler",
    "BernoulliSampler",
    "BinomialSampler",
    "ClusteredSampler",
    "DataLevelState",
    "DeltaSampler",
    "DesignState",
    "DistributionState",
    "DivFLSampler",
    "DivFLState",
    "FedAvgUniformSampler",
    "FedCBSSampler",
    "FedCBSState",
    "FedCorSampler",
    "FedCorState",
    "FedSamplingSampler",
    "Feedback",
    "FixedRateSampler",
    "FullSampler",
    "GroupClusteredSampler",
    "HiCSFLSampler",
    "HiCSState",
    "HighLossSampler",
    "LossState",
    "MABSSampler",
    "MDSampler",
    "NormState",
    "NumberOfSamplesSampler",
    "OSMDSampler",
    "OortSampler",
    "OortState",
    "OptimalDistributionSampler",
    "OptimalSampler",
    "PoissonSampler",
    "PowerOfChoiceSampler",
    "RoundRobinSampler",
    "RoundRobinState",
    "Sampler",
    "SamplerState",
    "ScoreState",
    "Selection",
    "SequentialSampler",
    "SequentialState",
    "SimilarityClusteredSampler",
    "SimilarityState",
    "SizeClusteredSampler",
    "SizesState",
    "SystematicSampler",
    "UniformISSampler",
    "UniformSampler",
    "VRBSampler",
    "adjusted_rand_index",
    "capped_inclusion",
    "check_proposition_1",
    "cluster_labels",
    "estimate_moments",
    "estimate_total",
    "make_sampler",
    "multinomial_design",
    "optimal_distribution",
    "project_truncated_simplex",
    "qcid",
    "register_sampler",
    "rows_design",
    "sampler_class",
    "sampler_names",
    "similarity_clustered_design",
    "size_clustered_design",
]
