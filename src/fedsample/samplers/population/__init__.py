"""Samplers over populations of 10^8 clients known by their sizes (docs/scale.md).

The documented public path: the samplers (:mod:`fedsample.samplers.population.samplers`) and the
memory-mapped sizes (:mod:`fedsample.samplers.population.sizes`), exported here.
"""

from fedsample.samplers.population.samplers import (
    SIZE_DTYPES,
    ClusteredPopulationState,
    MDPopulationState,
    Population,
    PopulationClusteredSampler,
    PopulationMDSampler,
    PopulationUniformSampler,
    UniformPopulationState,
    open_population,
    order_by_size,
    write_sizes_file,
)

__all__ = [
    "SIZE_DTYPES",
    "ClusteredPopulationState",
    "MDPopulationState",
    "Population",
    "PopulationClusteredSampler",
    "PopulationMDSampler",
    "PopulationUniformSampler",
    "UniformPopulationState",
    "open_population",
    "order_by_size",
    "write_sizes_file",
]
