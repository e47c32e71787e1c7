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

from fedsample.designs import BernoulliDesign, FixedSizeDesign, FullDesign, RowDesign
from fedsample.errors import FedsampleError
from fedsample.federation import BUILTIN_FEDERATIONS, Federation, builtin_sizes
from fedsample.samplers import (
    BinomialSampler,
    ClusteredSampler,
    DesignState,
    FedAvgUniformSampler,
    Feedback,
    FullSampler,
    MDSampler,
    PoissonSampler,
    Sampler,
    Selection,
    SizeClusteredSampler,
    UniformSampler,
    make_sampler,
    sampler_names,
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
    "BernoulliDesign",
    "BinomialSampler",
    "ClusteredSampler",
    "DesignState",
    "ExactStatistics",
    "FedAvgUniformSampler",
    "Federation",
    "FedsampleError",
    "Feedback",
    "FixedSizeDesign",
    "FullDesign",
    "FullSampler",
    "MDSampler",
    "MonteCarloStatistics",
    "PoissonSampler",
    "RowDesign",
    "Sampler",
    "Selection",
    "SizeClusteredSampler",
    "UniformSampler",
    "__version__",
    "builtin_sizes",
    "compare_samplers",
    "dumps",
    "exact_statistics",
    "loads",
    "make_sampler",
    "monte_carlo_statistics",
    "sampler_names",
    "weight_covariance",
]
