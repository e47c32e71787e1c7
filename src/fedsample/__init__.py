"""fedsample: client sampling for federated learning.

Every major client-sampling scheme behind one contract, the exact statistics of their aggregation
weights, and (with the ``torch`` extra) a simulator to compare them.

>>> import numpy as np
>>> import fedsample
>>> fed = fedsample.Federation.from_sizes([100, 250, 500, 750, 1000])
>>> sampler = fedsample.make_sampler("clustered-size")
>>> state = sampler.init(fed, num_sampled=2)
>>> stats = fedsample.exact_statistics(sampler.design(state), fed.importances)
>>> bool(stats.biased)
False
"""

# First: in the ``fedsample`` console script, SIGINT and SIGTERM are taken from here on (console_startup).
import fedsample._interrupts  # noqa: F401
from fedsample.designs import (
    BernoulliDesign,
    DataLevelDesign,
    FixedSizeDesign,
    FullDesign,
    NormalizedDesign,
    RowDesign,
    SuccessiveDesign,
)
from fedsample.errors import FedsampleError
from fedsample.federation import BUILTIN_FEDERATIONS, Federation, builtin_sizes
from fedsample.participation.availability import (
    AlwaysAvailable,
    BernoulliAvailability,
    Dropout,
    TraceAvailability,
    load_availability_trace,
)
from fedsample.participation.estimators import ReturnRateEstimator
from fedsample.participation.policies import correct_weights
from fedsample.participation.setting import Participation
from fedsample.samplers import (
    AdaptiveOSMDSampler,
    AvareSampler,
    BinomialSampler,
    ClusteredSampler,
    DesignState,
    FedAvgUniformSampler,
    FedSamplingSampler,
    Feedback,
    FixedRateSampler,
    FullSampler,
    GroupClusteredSampler,
    MABSSampler,
    MDSampler,
    OSMDSampler,
    PoissonSampler,
    Sampler,
    Selection,
    SimilarityClusteredSampler,
    SizeClusteredSampler,
    UniformISSampler,
    UniformSampler,
    VRBSampler,
    make_sampler,
    sampler_names,
)
from fedsample.samplers.population.samplers import (
    Population,
    PopulationClusteredSampler,
    PopulationMDSampler,
    PopulationUniformSampler,
    open_population,
    write_sizes_file,
)
from fedsample.serialization import dumps, loads
from fedsample.stats import (
    ExactStatistics,
    MonteCarloStatistics,
    compare_samplers,
    exact_statistics,
    monte_carlo_statistics,
    weight_covariance,
)

__version__ = "0.1.0"

__all__ = [
    "BUILTIN_FEDERATIONS",
    "AdaptiveOSMDSampler",
    "AlwaysAvailable",
    "AvareSampler",
    "BernoulliAvailability",
    "BernoulliDesign",
    "BinomialSampler",
    "ClusteredSampler",
    "DataLevelDesign",
    "DesignState",
    "Dropout",
    "ExactStatistics",
    "FedAvgUniformSampler",
    "FedSamplingSampler",
    "Federation",
    "FedsampleError",
    "Feedback",
    "FixedRateSampler",
    "FixedSizeDesign",
    "FullDesign",
    "FullSampler",
    "GroupClusteredSampler",
    "MABSSampler",
    "MDSampler",
    "MonteCarloStatistics",
    "NormalizedDesign",
    "OSMDSampler",
    "Participation",
    "PoissonSampler",
    "Population",
    "PopulationClusteredSampler",
    "PopulationMDSampler",
    "PopulationUniformSampler",
    "ReturnRateEstimator",
    "RowDesign",
    "Sampler",
    "Selection",
    "SimilarityClusteredSampler",
    "SizeClusteredSampler",
    "SuccessiveDesign",
    "TraceAvailability",
    "UniformISSampler",
    "UniformSampler",
    "VRBSampler",
    "__version__",
    "builtin_sizes",
    "compare_samplers",
    "correct_weights",
    "dumps",
    "exact_statistics",
    "load_availability_trace",
    "loads",
    "make_sampler",
    "monte_carlo_statistics",
    "open_population",
    "sampler_names",
    "weight_covariance",
    "write_sizes_file",
]
