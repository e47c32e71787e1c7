"""Clustered sampling by model similarity and its stages (distances, row allocation, sketches).

The documented public path of the similarity sampler's stages (docs/similarity.md): each is a
module-level function of :mod:`fedsample.samplers.similarity.sampler` and its neighbours, exported here.
"""

from fedsample.samplers.similarity.sampler import (
    MAX_SIMILARITY_CLIENTS,
    CountSketch,
    SimilarityClusteredSampler,
    SimilarityRows,
    SimilarityState,
    adjusted_rand_index,
    allocate_clustered_rows,
    cluster_labels,
    count_sketch,
    cut_by_mass,
    distance_rows,
    pairwise_distances,
    similarity_clustered_design,
    update_distances,
    ward_linkage,
)

__all__ = [
    "MAX_SIMILARITY_CLIENTS",
    "CountSketch",
    "SimilarityClusteredSampler",
    "SimilarityRows",
    "SimilarityState",
    "adjusted_rand_index",
    "allocate_clustered_rows",
    "cluster_labels",
    "count_sketch",
    "cut_by_mass",
    "distance_rows",
    "pairwise_distances",
    "similarity_clustered_design",
    "update_distances",
    "ward_linkage",
]
